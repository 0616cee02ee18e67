"""The gates of `inspect` and `audit` end to end (CliRunner): --fail-on on a converted output and
on dumps, the same from a --checks file, --junit-xml, exit 7 and the precedence of the commands'
own codes (3, 4), --json's `checks`, --fail-on help, and the usage errors (exit 2) raised before
any input is read."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

import train_dumps as T
from inspect_samples import DATA, sample, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.core.errors import ExitCode

GATED = int(ExitCode.CHECKS_FAILED)


def run(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def junit_cases(path: Path) -> dict[str, list]:
    (suite,) = ET.parse(path).getroot()
    return {c.get("name"): [(e.tag, e.get("message")) for e in c] for c in suite}


def test_exit_code_7():
    assert GATED == 7


# sample_data/jsonl, train split: truncation rates 0.1875, 0.0, 0.133333 (steps 1, 2, 3)
def test_inspect_output_gated_on_truncation_rate(sample_out_clean, tmp_path):
    xml = tmp_path / "gates.xml"
    r = run("inspect", sample_out_clean, "--fail-on", "step.truncation_rate > 0.2", "--junit-xml", xml)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == "check passed: step.truncation_rate > 0.2: value 0.1875 (largest of 3), threshold 0.2"
    assert junit_cases(xml) == {"step.truncation_rate > 0.2": []}

    r = run("inspect", sample_out_clean, "--fail-on", "step.truncation_rate > 0.15", "--fail-on", "rows > 1000",
            "--junit-xml", xml)
    assert r.exit_code == GATED, r.output
    assert r.stdout.splitlines()[-2:] == [
        "check FAILED: step.truncation_rate > 0.15: value 0.1875 (largest of 3), threshold 0.15; crossed at step 1 (0.1875)",
        "check passed: rows > 1000: value 46, threshold 1000"]
    cases = junit_cases(xml)
    assert cases["rows > 1000"] == []
    [(tag, message)] = cases["step.truncation_rate > 0.15"]
    assert tag == "failure" and message.endswith("crossed at step 1 (0.1875)")


def test_the_step_that_crosses_is_named(tmp_path):
    """Step 5 truncates 2 of its 4 samples, step 6 none: the gate of the README exits 7 naming
    step 5, from the flag and from a checks file alike."""
    for step, statuses in ((5, ["truncated", "completed", "truncated", "completed"]), (6, ["completed"] * 4)):
        write_jsonl(tmp_path / "dumps" / f"{step}.jsonl",
                    [sample(i, i // 2, reward=float(i % 2), status=st) for i, st in enumerate(statuses)])
    out = tmp_path / "out"
    assert run("convert", tmp_path / "dumps", out, "-q").exit_code == 0
    (tmp_path / "gates.toml").write_text('[inspect]\nfail_on = ["step.truncation_rate > 0.2"]\n')
    for gate in (["--fail-on", "step.truncation_rate > 0.2"], ["--checks", tmp_path / "gates.toml"]):
        xml = tmp_path / "gates.xml"
        r = run("inspect", out, *gate, "--junit-xml", xml)
        assert r.exit_code == GATED, r.output
        assert r.stdout.splitlines()[-1] == ("check FAILED: step.truncation_rate > 0.2: value 0.5 (largest of 2), "
                                             "threshold 0.2; crossed at step 5 (0.5)")
        [(tag, _)] = junit_cases(xml)["step.truncation_rate > 0.2"]
        assert tag == "failure"
        assert "crossed at: step 5 (0.5)" in ET.parse(xml).getroot().find("testsuite/testcase/failure").text


def test_inspect_dumps_json_checks(tmp_path):
    r = run("inspect", DATA / "jsonl", "--json", "--fail-on", "step.truncation_rate > 0.1",
            "--fail-on", "step.zero_variance_share >= 0.5", "--fail-on", "anomalies.id_reused_across_groups > 0")
    assert r.exit_code == GATED, r.output
    d = json.loads(r.stdout)
    assert d["checks"] == [
        {"expr": "step.truncation_rate > 0.1", "name": "step.truncation_rate", "op": ">", "threshold": 0.1,
         "value": 0.1875, "passed": False, "checked": 3, "steps": [{"step": 1, "value": 0.1875}, {"step": 3, "value": 0.133333}],
         "worst_at": {"step": 1}},
        {"expr": "step.zero_variance_share >= 0.5", "name": "step.zero_variance_share", "op": ">=", "threshold": 0.5,
         "value": 0.5, "passed": False, "checked": 3, "steps": [{"step": 1, "value": 0.5}], "worst_at": {"step": 1}},
        {"expr": "anomalies.id_reused_across_groups > 0", "name": "anomalies.id_reused_across_groups", "op": ">",
         "threshold": 0, "value": 0, "passed": True, "checked": 1, "steps": [], "worst_at": None},
    ]
    # every check against the figure --json shows beside it
    per = {p["step"]: p for p in d["summary"]["per_step"]}
    assert [s["value"] for s in d["checks"][0]["steps"]] == [per[1]["truncation_rate"], per[3]["truncation_rate"]]


def test_no_gate_no_checks_key():
    r = run("inspect", DATA / "jsonl", "--json")
    assert r.exit_code == 0 and "checks" not in json.loads(r.stdout)


CHECKS = """
fail_on = ["anomalies.id_reused_across_groups > 0", "mismatch.k3 > 0.5"]

[inspect]
fail_on = ["step.truncation_rate > {rate}"]

[audit]
fail_on = ["mismatch.mean_abs_diff > {mad}"]
"""


def checks_file(tmp_path, rate=0.2, mad=0.05) -> Path:
    f = tmp_path / "gates.toml"
    f.write_text(CHECKS.format(rate=rate, mad=mad))
    return f


def test_inspect_checks_file_and_flags(sample_out_clean, tmp_path):
    xml = tmp_path / "gates.xml"
    r = run("inspect", sample_out_clean, "--checks", checks_file(tmp_path), "--junit-xml", xml)
    assert r.exit_code == 0, r.output
    assert [x.split(":")[0] for x in r.stdout.splitlines()[-2:]] == ["check passed"] * 2
    assert "note: " + str(tmp_path / "gates.toml") + ": fail_on 'mismatch.k3 > 0.5' skipped: inspect has no figure" in r.stderr
    assert junit_cases(xml) == {
        "anomalies.id_reused_across_groups > 0": [], "step.truncation_rate > 0.2": [],
        "mismatch.k3 > 0.5": [("skipped", f"{tmp_path / 'gates.toml'}: fail_on 'mismatch.k3 > 0.5' skipped: "
                                          "inspect has no figure 'mismatch.k3' (it gates audit)")]}

    r = run("inspect", sample_out_clean, "--checks", checks_file(tmp_path, rate=0.15), "--json")
    assert r.exit_code == GATED
    d = json.loads(r.stdout)
    assert [(c["expr"], c["passed"]) for c in d["checks"]] == [
        ("anomalies.id_reused_across_groups > 0", True), ("step.truncation_rate > 0.15", False)]
    assert any("'mismatch.k3 > 0.5' skipped" in n for n in d["summary"]["notes"])

    r = run("inspect", sample_out_clean, "--checks", checks_file(tmp_path), "--fail-on", "step.rows < 16", "--json")
    assert r.exit_code == GATED  # the flag adds to the file's checks
    d = json.loads(r.stdout)
    assert [(c["expr"], c["passed"]) for c in d["checks"]] == [
        ("anomalies.id_reused_across_groups > 0", True), ("step.truncation_rate > 0.2", True), ("step.rows < 16", False)]
    assert d["checks"][2]["steps"] == [{"step": 2, "value": 15}, {"step": 3, "value": 15}]  # 16, 15, 15 rows


@pytest.fixture(scope="module")
def audit_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("run")
    for step in (0, 1):
        samples = T.rollout_samples(step)
        T.write_rollout(root / "rollout_data", samples, step, "pt")
        T.write_train(root / "train_data", samples, step, n=2, rbs=3, dp=2)
    return root


def audit(root, *args):
    return run("audit", root / "rollout_data", "--train", root / "train_data", *args)


def test_audit_gated_on_mismatch(audit_run, tmp_path):
    d = json.loads(audit(audit_run, "--json").stdout)
    mad = [s["mismatch"]["mean_abs_diff"] for s in d["steps"]]
    assert max(mad) < 0.05 and min(mad) > 0.01  # the stand-in trainer's noise

    r = audit(audit_run, "--fail-on", "mismatch.mean_abs_diff > 0.05")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1].startswith("check passed: mismatch.mean_abs_diff > 0.05: value ")

    xml = tmp_path / "gates.xml"
    r = audit(audit_run, "--fail-on", "mismatch.mean_abs_diff > 0.01", "--junit-xml", xml, "--json")
    assert r.exit_code == GATED, r.output
    (c,) = json.loads(r.stdout)["checks"]
    assert c["steps"] == [{"step": 0, "value": mad[0]}, {"step": 1, "value": mad[1]}] and c["value"] == max(mad)
    [(tag, message)] = junit_cases(xml)["mismatch.mean_abs_diff > 0.01"]
    assert tag == "failure" and "crossed at step 0 (" in message and ", step 1 (" in message


def test_audit_checks_file(audit_run, tmp_path):
    r = audit(audit_run, "--checks", checks_file(tmp_path), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [(c["expr"], c["passed"]) for c in d["checks"]] == [("mismatch.k3 > 0.5", True),
                                                              ("mismatch.mean_abs_diff > 0.05", True)]
    assert any("'anomalies.id_reused_across_groups > 0' skipped: audit has no figure" in n for n in d["summary"]["notes"])
    r = audit(audit_run, "--checks", checks_file(tmp_path, mad=0.01))
    assert r.exit_code == GATED
    assert r.stdout.splitlines()[-1].startswith("check FAILED: mismatch.mean_abs_diff > 0.01: value ")


def test_audit_divergence_keeps_exit_4(tmp_path):
    root = tmp_path
    for step in (0, 1):
        samples = T.rollout_samples(step)
        T.write_rollout(root / "rollout_data", samples, step, "pt")
        T.write_train(root / "train_data", samples, step, n=2, rbs=3,
                      edit=(lambda p: p["samples"][4].update(rollout_ids=40)) if step == 1 else None)
    xml = tmp_path / "gates.xml"
    r = audit(root, "--fail-on", "mismatch.mean_abs_diff > 0.01", "--junit-xml", xml, "--json")
    assert r.exit_code == int(ExitCode.INTEGRITY), r.output
    assert json.loads(r.stdout)["checks"][0]["passed"] is False  # reported, and in the JUnit report
    assert junit_cases(xml)["mismatch.mean_abs_diff > 0.01"][0][0] == "failure"


def test_invalid_input_keeps_exit_3(tmp_path):
    bad = tmp_path / "1.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    r = run("inspect", bad, "--fail-on", "rows > 1000000", "--junit-xml", tmp_path / "gates.xml")
    assert r.exit_code == int(ExitCode.INVALID_INPUT)
    assert not (tmp_path / "gates.xml").exists()


@pytest.mark.parametrize("command, name", [("inspect", "step.zero_variance_share"), ("audit", "mismatch.ratio_below_0.5")])
def test_fail_on_help_needs_no_input(command, name):
    r = run(command, "--fail-on", "help")
    assert r.exit_code == 0, r.output
    assert any(line.split()[:1] == [name] for line in r.stdout.splitlines())


@pytest.mark.parametrize("args, message", [
    (["--fail-on", "step.trunc_rate > 0.2"], "--fail-on 'step.trunc_rate > 0.2': inspect has no figure "
                                              "'step.trunc_rate'; closest: step.truncation_rate"),
    (["--fail-on", "step.truncation_rate => 0.2"], "--fail-on 'step.truncation_rate => 0.2': expected NAME OP NUMBER"),
    (["--fail-on", "mismatch.k3 > 0.1"], "--fail-on 'mismatch.k3 > 0.1': inspect has no figure 'mismatch.k3' "
                                         "(only audit has it)"),
    (["--checks", "{tmp}/none.toml"], "--checks {tmp}/none.toml: cannot read it"),
])
def test_usage_errors_exit_2_before_reading_the_input(tmp_path, args, message):
    missing = tmp_path / "no_such_input"  # reading it would be another usage error
    args = [a.format(tmp=tmp_path) for a in args]
    r = run("inspect", missing, *args, "--json")
    assert r.exit_code == int(ExitCode.USAGE)
    assert json.loads(r.stdout)["message"].startswith(message.format(tmp=tmp_path))
    r = run("audit", missing, "--train", missing, *args)
    assert r.exit_code == int(ExitCode.USAGE)


def test_audit_names_the_command_that_has_it(tmp_path):
    r = run("audit", tmp_path, "--train", tmp_path, "--fail-on", "step.truncation_rate > 0.2", "--json")
    assert r.exit_code == 2
    assert json.loads(r.stdout)["message"].startswith(
        "--fail-on 'step.truncation_rate > 0.2': audit has no figure 'step.truncation_rate' (only inspect has it)")


def test_show_has_no_summary_to_gate():
    r = run("inspect", DATA / "jsonl", "--show", "1:3", "--fail-on", "rows > 1")
    assert r.exit_code == 2 and "not with --show" in r.output
