"""rollout_cli.gates.figures: the names are those of the code that computes the figures (each
declared table holds exactly the numbers the commands' results carry), how each is read (counts
0 when absent, a missing mismatch object null, an empty rules list 0), and `--fail-on help`."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import train_dumps as T
from inspect_samples import DATA
from rollout_cli.auditing import audit_paths
from rollout_cli.auditing.mismatch import KEYS, MEANING
from rollout_cli.core.schema import STATUSES
from rollout_cli.gates import catalogue, names_help
from rollout_cli.gates.figures import AUDIT_RUN_FIGURES, COMMANDS
from rollout_cli.inspection import ANOMALY_KINDS, InspectOptions, inspect_paths
from rollout_cli.inspection.aggregate import RUN_FIGURES, STEP_FIGURES

# summary keys that are not figures: labels, choices, lists, and the histograms keyed by size
NOT_FIGURES = {"input", "split", "options", "group_by", "notes", "per_step", "groups_total", "samples_per_rollout",
               "group_sizes", "status", "anomaly_counts"}


def numbers(d: dict, prefix: str = "") -> set[str]:
    """The dotted paths of every number (or null) under d."""
    out = set()
    for k, v in d.items():
        if isinstance(v, dict):
            out |= numbers(v, f"{prefix}{k}.")
        elif v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
            out.add(prefix + k)
    return out


@pytest.mark.parametrize("split", ["train", "eval"])
def test_inspect_tables_are_the_numbers_its_summary_carries(split):
    s = inspect_paths([str(DATA / "jsonl")], options=InspectOptions(split=split))["summary"]
    assert numbers({k: v for k, v in s.items() if k not in NOT_FIGURES}) == set(RUN_FIGURES)
    for p in s["per_step"]:  # weight_versions: samples per version, keyed by version (a histogram)
        assert numbers({k: v for k, v in p.items() if k != "weight_versions"}) - {"step"} == set(STEP_FIGURES)
    assert set(s["status"]) <= set(STATUSES) and set(s["anomaly_counts"]) <= set(ANOMALY_KINDS)


def test_inspect_catalogue_is_generated_from_the_tables():
    names = list(catalogue("inspect"))
    assert names == (list(RUN_FIGURES) + [f"status.{s}" for s in STATUSES] + [f"step.{n}" for n in STEP_FIGURES]
                     + [f"anomalies.{k}" for k in ANOMALY_KINDS] + ["template.drift_rate"])


def test_zero_variance_share_is_a_step_figure():
    s = inspect_paths([str(DATA / "jsonl")])["summary"]
    # sample_data/README.md: 4 prompt groups per step; zero-variance groups 2, 1, 1
    assert [p["zero_variance_share"] for p in s["per_step"]] == [0.5, 0.25, 0.25]
    assert "step.zero_variance_share" in catalogue("inspect")


@pytest.fixture(scope="module")
def audit_result(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("run")
    for step in (0, 1):
        samples = T.rollout_samples(step)
        T.write_rollout(root / "rollout_data", samples, step, "pt")
        T.write_train(root / "train_data", samples, step, n=2, rbs=3, dp=1)
    return audit_paths([str(root / "rollout_data")], [str(root / "train_data")])


def test_audit_tables_are_numbers_of_its_result(audit_result):
    s = audit_result["summary"]
    assert all(isinstance(s[k], int) for k in AUDIT_RUN_FIGURES)
    assert set(AUDIT_RUN_FIGURES) == {k for k, v in s.items() if isinstance(v, int)}
    assert tuple(MEANING) == KEYS
    for st in audit_result["steps"]:
        assert set(st["mismatch"]) - {"top_tokens"} == set(KEYS) == set(st["ref_mismatch"]) - {"top_tokens"}
    names = list(catalogue("audit"))
    assert names == (list(AUDIT_RUN_FIGURES) + [f"mismatch.{k}" for k in KEYS] + [f"ref_mismatch.{k}" for k in KEYS]
                     + ["rules.samples"])


def test_values_read_from_a_result(audit_result):
    ins = catalogue("inspect")
    r = {"summary": {"truncation_rate": 0.25, "rewards": {"reward": {"std": 0.5}}, "status": {"completed": 3},
                     "anomaly_counts": {"mixed_ids": 2},
                     "per_step": [{"step": 4, "truncation_rate": 0.1}, {"step": 7, "truncation_rate": None}]}}
    assert ins["truncation_rate"].values(r) == [(None, 0.25)]
    assert ins["rewards.reward.std"].values(r) == [(None, 0.5)]
    assert ins["status.completed"].values(r) == [(None, 3)]
    assert ins["status.aborted"].values(r) == [(None, 0)]  # a count absent from the JSON is 0
    assert ins["anomalies.mixed_ids"].values(r) == [(None, 2)]
    assert ins["anomalies.id_reused_across_groups"].values(r) == [(None, 0)]
    assert ins["rows"].values(r) == [(None, None)]  # a figure the result lacks is null (and fails)
    assert ins["step.truncation_rate"].values(r) == [({"step": 4}, 0.1), ({"step": 7}, None)]
    assert ins["step.truncation_rate"].values({"summary": {"per_step": []}}) == []

    aud = catalogue("audit")
    m = aud["mismatch.mean_abs_diff"]
    got = m.values(audit_result)
    assert [lab for lab, _ in got] == [{"step": 0}, {"step": 1}]
    assert [v for _, v in got] == [s["mismatch"]["mean_abs_diff"] for s in audit_result["steps"]]
    assert m.values({"steps": [{"step": 3, "mismatch": None}]}) == [({"step": 3}, None)]  # an unpaired step
    rules = aud["rules.samples"]
    assert rules.values({}) == [(None, 0)] and rules.values({"rules": []}) == [(None, 0)]
    found = {"rules": [{"step": 2, "field": "reward", "trainer_rule": "a", "expected_rule": "b", "samples": 12}]}
    assert rules.values(found) == [({"step": 2, "field": "reward"}, 12)]


@pytest.mark.parametrize("command", COMMANDS)
def test_fail_on_help_lists_every_name_with_its_meaning(command):
    text = names_help(command)
    for name, fig in catalogue(command).items():
        line = next(x for x in text.splitlines() if x.split()[:1] == [name])
        assert line.strip().endswith(fig.meaning)
    assert "< <= > >= == !=" in text
    assert max(len(x) for x in text.splitlines()) <= 80


def test_unknown_command():
    with pytest.raises(ValueError, match="no figures for command 'verify'"):
        catalogue("verify")


def test_readme_has_no_stale_name():
    """Names the docs use as examples are valid (a renamed figure breaks them)."""
    root = Path(__file__).resolve().parents[2]
    valid = {n for c in COMMANDS for n in catalogue(c)}
    for page in ("README.md", "docs/ci.md"):
        text = (root / page).read_text(encoding="utf-8")
        used = set(re.findall(r'"([a-z_][\w.]*) (?:<|<=|>|>=|==|!=) [-\d.e]+"', text))
        assert used, page
        assert used <= valid, (page, used - valid)
