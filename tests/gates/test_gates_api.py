"""rollout_cli.gates.api: the plan of a command (checks file then flags, top-level entries skipped
with a note by a command without the name), each check evaluated on a result (run-wide,
per-step, anomaly, mismatch and rule figures; the worst value; the crossing steps) and its line."""
from __future__ import annotations

import pytest

from rollout_cli.core.errors import UsageError
from rollout_cli.gates import brief, evaluate, line, plan

FILE = '''
fail_on = ["anomalies.id_reused_across_groups > 0", "mismatch.k3 > 0.01"]

[inspect]
fail_on = ["step.truncation_rate > 0.2"]

[audit]
fail_on = ["mismatch.mean_abs_diff > 0.05"]
'''

INSPECT = {"summary": {
    "rows": 40, "truncation_rate": 0.15, "rewards": {"reward": {"std": 0.7}}, "status": {"completed": 40},
    "anomaly_counts": {"mixed_ids": 1},
    "per_step": [{"step": 1, "truncation_rate": 0.1875, "zero_variance_share": 0.5},
                 {"step": 2, "truncation_rate": 0.0, "zero_variance_share": 0.25},
                 {"step": 3, "truncation_rate": 0.3, "zero_variance_share": 0.25}],
    "notes": []}}
AUDIT = {"summary": {"steps": 3, "divergences": 0, "notes": []},
         "steps": [{"step": 0, "mismatch": {"mean_abs_diff": 0.03, "k3": 0.001}},
                   {"step": 1, "mismatch": {"mean_abs_diff": 0.07, "k3": 0.002}},
                   {"step": 2, "mismatch": {"mean_abs_diff": 0.06, "k3": 0.004}}]}


def gates(tmp_path, text=FILE):
    f = tmp_path / "gates.toml"
    f.write_text(text)
    return str(f)


def test_file_then_flags_each_command_its_own(tmp_path):
    f = gates(tmp_path)
    ins = plan("inspect", ["rows < 50", "step.truncation_rate > 0.2"], f)
    assert [c.expr for c in ins.checks] == ["anomalies.id_reused_across_groups > 0", "step.truncation_rate > 0.2",
                                            "rows < 50"]  # the repeat of a file's check counts once
    assert ins.skipped == [{"expr": "mismatch.k3 > 0.01", "note": f"{f}: fail_on 'mismatch.k3 > 0.01' skipped: "
                                                                  "inspect has no figure 'mismatch.k3' (it gates audit)"}]
    aud = plan("audit", ["mismatch.k3 > 0.01"], f)
    assert [c.expr for c in aud.checks] == ["mismatch.k3 > 0.01", "mismatch.mean_abs_diff > 0.05"]
    assert [s["expr"] for s in aud.skipped] == ["anomalies.id_reused_across_groups > 0"]
    assert aud.notes() == [f"{f}: fail_on 'anomalies.id_reused_across_groups > 0' skipped: audit has no figure "
                           "'anomalies.id_reused_across_groups' (it gates inspect)"]


def test_flags_alone_and_nothing():
    assert [c.expr for c in plan("inspect", ["rows>1"]).checks] == ["rows > 1"]
    assert plan("audit").checks == []


@pytest.mark.parametrize("text, command, message", [
    ('[audit]\nfail_on = ["step.truncation_rate > 0.2"]\n', "audit",
     "{f}: audit table fail_on 'step.truncation_rate > 0.2': audit has no figure 'step.truncation_rate' "
     "(only inspect has it)"),
    ('[inspect]\nfail_on = ["step.truncation_rate >> 0.2"]\n', "inspect",
     "{f}: inspect table fail_on 'step.truncation_rate >> 0.2': expected NAME OP NUMBER"),
    ('fail_on = ["mismatch.kk3 > 0.1"]\n', "inspect",
     "{f}: fail_on 'mismatch.kk3 > 0.1': no command has a figure 'mismatch.kk3'; closest: mismatch.k3"),
    ('fail_on = ["rows 3"]\n', "audit", "{f}: fail_on 'rows 3': expected NAME OP NUMBER"),
])
def test_a_bad_entry_exits_2_naming_file_table_entry_and_command(tmp_path, text, command, message):
    f = gates(tmp_path, text)
    with pytest.raises(UsageError) as e:
        plan(command, [], f)
    assert str(e.value).startswith("--checks " + message.format(f=f)), str(e.value)


def test_a_flag_the_command_does_not_have_names_both():
    with pytest.raises(UsageError, match=r"^--fail-on 'mismatch.mean_abs_diff > 0.05': inspect has no figure "
                                         r"'mismatch.mean_abs_diff' \(only audit has it\)"):
        plan("inspect", ["mismatch.mean_abs_diff > 0.05"])


def _one(command, expr, result):
    (c,) = evaluate(plan(command, [expr]), result)
    return c


def test_run_wide_figures():
    c = _one("inspect", "truncation_rate > 0.1", INSPECT)
    assert c == {"expr": "truncation_rate > 0.1", "name": "truncation_rate", "op": ">", "threshold": 0.1, "value": 0.15,
                 "passed": False, "checked": 1, "steps": [], "worst_at": None}
    assert _one("inspect", "rewards.reward.std >= 0.7", INSPECT)["passed"] is False
    assert _one("inspect", "rewards.reward.std < 0.7", INSPECT)["passed"] is True
    assert _one("inspect", "status.completed == 40", INSPECT)["passed"] is False
    assert line(_one("inspect", "truncation_rate > 0.2", INSPECT)) == \
        "check passed: truncation_rate > 0.2: value 0.15, threshold 0.2"


def test_per_step_figures_name_each_crossing_step():
    c = _one("inspect", "step.truncation_rate > 0.15", INSPECT)
    assert (c["passed"], c["value"], c["checked"]) == (False, 0.3, 3)
    assert c["steps"] == [{"step": 1, "value": 0.1875}, {"step": 3, "value": 0.3}]
    assert line(c) == ("check FAILED: step.truncation_rate > 0.15: value 0.3 (largest of 3), threshold 0.15; "
                       "crossed at step 1 (0.1875), step 3 (0.3)")
    assert c["worst_at"] == {"step": 3} and brief(c) == "FAILED step.truncation_rate > 0.15: worst 0.3 at step 3"
    assert brief(_one("inspect", "step.truncation_rate > 0.5", INSPECT)) == \
        "passed step.truncation_rate > 0.5: worst 0.3 at step 3"
    c = _one("inspect", "step.truncation_rate < 0.1", INSPECT)
    assert (c["value"], c["steps"]) == (0.0, [{"step": 2, "value": 0.0}])  # the smallest
    c = _one("inspect", "step.zero_variance_share >= 0.5", INSPECT)
    assert c["steps"] == [{"step": 1, "value": 0.5}]
    c = _one("inspect", "step.zero_variance_share != 0.25", INSPECT)
    assert (c["value"], c["steps"]) == (0.5, [{"step": 1, "value": 0.5}])
    c = _one("inspect", "step.truncation_rate > 0.5", INSPECT)
    assert (c["passed"], c["steps"]) == (True, [])


def test_per_step_check_without_steps_fails():
    c = _one("inspect", "step.truncation_rate > 0.5", {"summary": {"per_step": []}})
    assert (c["passed"], c["value"], c["checked"]) == (False, None, 0)
    assert line(c) == "check FAILED: step.truncation_rate > 0.5: value null (no step to check), threshold 0.5"


def test_anomaly_counts_are_0_when_absent():
    assert _one("inspect", "anomalies.mixed_ids > 0", INSPECT)["passed"] is False
    c = _one("inspect", "anomalies.id_reused_across_groups > 0", INSPECT)
    assert (c["passed"], c["value"]) == (True, 0)


def test_mismatch_of_any_step():
    c = _one("audit", "mismatch.mean_abs_diff > 0.05", AUDIT)
    assert (c["passed"], c["value"]) == (False, 0.07)
    assert c["steps"] == [{"step": 1, "value": 0.07}, {"step": 2, "value": 0.06}]
    assert _one("audit", "mismatch.k3 > 0.01", AUDIT)["passed"] is True
    unpaired = {"summary": {}, "steps": [*AUDIT["steps"][:1], {"step": 5, "mismatch": None}]}
    c = _one("audit", "mismatch.k3 > 0.01", unpaired)  # a step without the figure fails the check
    assert (c["passed"], c["value"], c["steps"]) == (False, None, [{"step": 5, "value": None}])
    assert line(c).endswith("value null (null or NaN fails), threshold 0.01; crossed at step 5 (null)")


def test_rules_samples_per_entry_and_0_without_rules():
    rules = [{"step": 1, "field": "reward", "trainer_rule": "x", "expected_rule": "y", "samples": 6},
             {"step": 2, "field": "loss_mask", "trainer_rule": "x", "expected_rule": "y", "samples": 1}]
    c = _one("audit", "rules.samples > 2", {**AUDIT, "rules": rules})
    assert (c["passed"], c["value"], c["steps"]) == (False, 6, [{"step": 1, "field": "reward", "value": 6}])
    assert line(c).endswith("crossed at step 1 reward (6)")
    for result in (AUDIT, {**AUDIT, "rules": []}):
        c = _one("audit", "rules.samples > 0", result)
        assert (c["passed"], c["value"], c["steps"]) == (True, 0, [])


def test_long_crossings_are_cut_in_the_line_only():
    r = {"summary": {"per_step": [{"step": i, "rows": i} for i in range(25)]}}
    c = _one("inspect", "step.rows >= 0", r)
    assert len(c["steps"]) == 25
    assert line(c).endswith("step 9 (9) and 15 more")
