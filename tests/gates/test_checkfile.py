"""rollout_cli.gates.checkfile: the TOML checks file read, and each bad file a usage error
naming the file and what is wrong in it."""
from __future__ import annotations

import pytest

from rollout_cli.core.errors import ExitCode, UsageError
from rollout_cli.gates.checkfile import load

BOTH = '''
fail_on = ["anomalies.id_reused_across_groups > 0"]

[inspect]
fail_on = ["step.truncation_rate > 0.2", "step.zero_variance_share >= 0.5"]

[audit]
fail_on = ["mismatch.mean_abs_diff > 0.05"]
'''


def test_top_level_and_both_tables(tmp_path):
    f = tmp_path / "gates.toml"
    f.write_text(BOTH)
    c = load(str(f))
    assert c.path == str(f)
    assert c.top == ["anomalies.id_reused_across_groups > 0"]
    assert c.tables == {"inspect": ["step.truncation_rate > 0.2", "step.zero_variance_share >= 0.5"],
                        "audit": ["mismatch.mean_abs_diff > 0.05"]}


def test_empty_file_has_no_check(tmp_path):
    f = tmp_path / "gates.toml"
    f.write_text("# no gates yet\n")
    c = load(str(f))
    assert c.top == [] and c.tables == {}


@pytest.mark.parametrize("text, message", [
    ('fail_on = ["rows > 1"\n\n[inspect]\n', r"not valid TOML: .*\(at line 3, column 1\)"),
    ('fail_on = "rows > 1"\n', r"fail_on: expected a list of strings"),
    ('fail_on = [1]\n', r"fail_on: expected a list of strings"),
    ('fail-on = ["rows > 1"]\n', r"unknown key 'fail-on' \(expected fail_on and the tables inspect and audit\)"),
    ('[verify]\nfail_on = []\n', r"unknown key 'verify'"),
    ('inspect = ["rows > 1"]\n', r"unknown key 'inspect'"),
    ('[inspect]\nfail_on = ["rows > 1"]\nthreshold = 3\n', r"inspect table: unknown key 'threshold'"),
    ('[audit]\nfail_on = "mismatch.k3 > 0.1"\n', r"audit table fail_on: expected a list of strings"),
    (b'fail_on = ["\xff"]\n', r"not UTF-8 text"),
])
def test_bad_file_is_a_usage_error_naming_it(tmp_path, text, message):
    f = tmp_path / "gates.toml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UsageError, match=f"^--checks {f}: " + message) as e:
        load(str(f))
    assert e.value.exit_code == ExitCode.USAGE


def test_missing_file(tmp_path):
    f = tmp_path / "none.toml"
    with pytest.raises(UsageError, match=f"--checks {f}: cannot read it: No such file or directory"):
        load(str(f))


def test_the_checks_file_of_docs_ci_md_is_valid(tmp_path):
    """The file docs/ci.md shows plans on both commands, each with its own table."""
    import re
    from pathlib import Path

    from rollout_cli.gates import plan

    page = (Path(__file__).resolve().parents[2] / "docs" / "ci.md").read_text(encoding="utf-8")
    (text,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    f = tmp_path / "gates.toml"
    f.write_text(text)
    ins, aud = plan("inspect", [], str(f)), plan("audit", [], str(f))
    assert [c.expr for c in ins.checks] == ["anomalies.id_reused_across_groups > 0", "step.truncation_rate > 0.2",
                                            "step.zero_variance_share >= 0.5"]
    assert [c.expr for c in aud.checks] == ["mismatch.mean_abs_diff > 0.05", "rules.samples > 0"]
    assert [s["expr"] for s in aud.skipped] == ["anomalies.id_reused_across_groups > 0"]
