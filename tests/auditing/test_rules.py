"""audit names the rule the trainer ran: train dumps built by the stand-in of slime's payload
builder (tests/helpers/train_dumps.py) with rewards from each reward rule and ids from each id rule,
on batches where the rules agree and where they differ (compact rollouts, mixed explicit and
missing ids, uneven groups)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import slime_reference as ref
import train_dumps as T
from rollout_cli.auditing import AuditOptions, audit_paths
from rollout_cli.cli.app import app
from rollout_cli.inspection.loss_weight import MODES

N = 2  # --n-samples-per-prompt
PROMPTS = 3  # --rollout-batch-size of the stand-in


uniform, compact, mixed_ids = T.uniform, T.compact, T.mixed_ids


def _audit(root: Path, samples: list[dict], *, n: int = N, rbs: int = PROMPTS, step: int = 0, opts: dict | None = None,
           edit=None, **train) -> dict:
    T.write_train(root / "train_data", samples, step, n=n, rbs=rbs, edit=edit, **train)
    T.write_rollout(root / "rollout_data", samples, step, "pt")
    return audit_paths([str(root / "rollout_data")], [str(root / "train_data")],
                       AuditOptions(n_samples_per_prompt=n, **(opts or {})))


def _rules(r: dict) -> dict[tuple, dict]:
    return {(e["step"], e["field"]): e for e in r["rules"]}


def _named(r: dict, fld: str) -> str:
    return r["steps"][0]["trainer_rules"][fld]["trainer_rule"]


# ------------------------------------------------------------------------------ the done-when run


def test_a_clean_compact_slime_run_names_slime_positional_and_exits_0(tmp_path):
    r = _audit(tmp_path, compact())
    assert r["summary"]["divergences"] == 0 and r["divergences"] == []
    e = _rules(r)[(0, "reward")]
    assert e["trainer_rule"] == "slime_positional" and e["expected_rule"] == "group"
    assert e["case"] == "the whole batch as one row"
    assert e["samples"] == 7 and e["positions"] == list(range(7)) and e["max_abs_delta"] > 0.1
    assert "_post_process_rewards" in e["source"] and "624b824a" in e["source"]
    # the whole batch is one row: every prompt group was normalised with the others' samples
    assert e["cost"]["groups_normalised_with_others"] == [0, 1, 2]
    group = np.asarray(ref.group_index_rewards(compact()))
    slime = np.asarray(ref.post_process_rewards(compact(), n_samples_per_prompt=N, rollout_batch_size=PROMPTS)[1])
    flips = np.flatnonzero(np.sign(np.round(group, 5)) != np.sign(np.round(slime, 5))).tolist()
    assert flips and e["cost"]["advantage_sign_changes"] == flips
    assert r["summary"]["rule_differences"] == 1 and (0, "rollout_id") not in _rules(r)


def _cli(root: Path, *extra: str):
    return CliRunner().invoke(app, ["audit", str(root / "rollout_data"), "--train", str(root / "train_data"),
                                    "--n-samples-per-prompt", str(N), *extra])


def test_cli_exit_codes_and_rule_lines_first(tmp_path):
    _audit(tmp_path, compact(), id_rule="first_sample")
    res = _cli(tmp_path)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("step 0: reward: the trainer ran slime_positional (slime's _post_process_rewards")
    assert lines[1].startswith("step 0: rollout_id: the trainer ran first_sample (slime 09c704501 (#1965))")
    assert "of the step's loss weight (rollout_mean)" in lines[1]
    assert lines[2].startswith("audit: 1 paired step(s)")  # above the mismatch table
    assert _cli(tmp_path, "--strict").exit_code == 4
    js = json.loads(_cli(tmp_path, "--json").stdout)
    assert [(e["field"], e["trainer_rule"], e["samples"]) for e in js["rules"]] == [
        ("reward", "slime_positional", 7), ("rollout_id", "first_sample", 5)]


def test_an_injected_change_is_still_found_and_the_rule_still_named(tmp_path):
    def edit(p):
        p["samples"][4]["rewards"] = 9.0
    r = _audit(tmp_path, compact(), edit=edit)
    assert [(d["rollout_position"], d["field"]) for d in r["divergences"]] == [(4, "reward")]
    assert _rules(r)[(0, "reward")]["trainer_rule"] == "slime_positional"
    # compared under the trainer's rule: expected is slime's value, not rollout-cli's
    slime = ref.post_process_rewards(compact(), n_samples_per_prompt=N, rollout_batch_size=PROMPTS)[1]
    assert r["divergences"][0]["expected"] == pytest.approx(slime[4], abs=1e-6)
    res = _cli(tmp_path)
    assert res.exit_code == 4 and res.stdout.index("the trainer ran slime_positional") < res.stdout.index("divergence(s) (")


def test_a_uniform_grpo_batch_has_no_rule_entry(tmp_path):
    """slime's rows are the prompt groups: every rule that normalises by them agrees."""
    r = _audit(tmp_path, uniform())
    assert r["rules"] == [] and r["summary"]["divergences"] == 0
    assert _named(r, "reward") == "group"  # ties go to the expected rule
    assert _named(r, "rollout_id") == "fill"


# ------------------------------------------------------------------------------ each rule named


BATCHES = {"uniform": uniform, "compact": compact, "mixed_ids": mixed_ids}


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("rule", T.REWARD_RULES)
def test_each_reward_rule_is_named(tmp_path, rule, batch):
    samples = BATCHES[batch]()
    rbs = len({s["group_index"] for s in samples})
    r = _audit(tmp_path, samples, rbs=rbs, reward_rule=rule)
    assert r["summary"]["divergences"] == 0, r["divergences"]
    named = _named(r, "reward")
    built = np.asarray(T.rule_rewards(samples, rule, n=N, rbs=rbs))
    if named != rule:  # another rule giving the same values on this batch
        assert np.allclose(np.asarray(T.rule_rewards(samples, named, n=N, rbs=rbs)), built, atol=1e-6)
    entry = _rules(r).get((0, "reward"))
    expected = np.asarray(T.rule_rewards(samples, "group", n=N, rbs=rbs))
    differ = np.flatnonzero(~np.isclose(built, expected, atol=1e-6, rtol=1e-6)).tolist()
    assert (entry is None) == (not differ)
    if entry:
        assert entry["positions"] == differ and entry["samples"] == len(differ)


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("rule", list(ref.ROLLOUT_ID_RULES))
def test_each_id_rule_is_named(tmp_path, rule, batch):
    samples = BATCHES[batch]()
    r = _audit(tmp_path, samples, id_rule=rule, reward_rule="group")
    assert r["summary"]["divergences"] == 0, r["divergences"]
    built = ref.ROLLOUT_ID_RULES[rule](samples)
    named = _named(r, "rollout_id")
    assert ref.ROLLOUT_ID_RULES[named](samples) == built
    fill = ref.fill_rollout_ids(samples)
    entry = _rules(r).get((0, "rollout_id"))
    differ = [i for i, (a, b) in enumerate(zip(fill, built)) if a != b]
    assert (entry is None) == (not differ)
    if entry:
        assert entry["positions"] == differ and entry["trainer_rule"] == rule


def test_first_sample_rule_counts_siblings_as_rollouts(tmp_path):
    """#1965's figure: with a default first sample, compact siblings become separate rollouts,
    each carrying its own share of the loss under the per-rollout mean."""
    s = compact()
    s[0]["rollout_id"] = s[1]["rollout_id"] = None  # first sample default
    s[2]["rollout_id"] = s[3]["rollout_id"] = 9  # group 1 a compact rollout
    s[3]["reward"] = s[2]["reward"]
    r = _audit(tmp_path, s, id_rule="first_sample")
    e = _rules(r)[(0, "rollout_id")]
    # fill: [0, 1, 9, 9, 2, 3, 4]; the trainer's: [0, 1, 2, 3, 4, 5, 6]
    assert e["trainer_rule"] == "first_sample" and e["positions"] == [2, 3, 4, 5, 6]
    moved = {tuple(m["positions"]): m for m in e["cost"]["loss_weight"]}
    sib = moved[(2, 3)]  # rollout 9: one rollout expected, two under the trainer's ids
    assert sib["rollout_id"] == 9 and sib["trainer_rollout_ids"] == [2, 3]
    # expected: 6 rollouts, so 1/6 of the per-rollout mean; the trainer's 7: 2/7
    assert sib["share"]["rollout_mean"] == pytest.approx(1 / 6)
    assert sib["trainer_share"]["rollout_mean"] == pytest.approx(2 / 7)
    assert set(sib["share"]) == set(MODES) == set(sib["trainer_share"])
    assert sib["share"]["token_mean"] == pytest.approx(sib["trainer_share"]["token_mean"])  # ids do not enter it
    assert r["summary"]["divergences"] == 0


def test_sample_index_rule_merges_an_explicit_id_with_an_index(tmp_path):
    r = _audit(tmp_path, mixed_ids(), id_rule="sample_index", reward_rule="group")
    e = _rules(r)[(0, "rollout_id")]
    assert e["trainer_rule"] == "sample_index" and "7405851ff (#1933)" in e["source"]
    # every default sample's id is its index: fill [0, 1, 2, 2, 3, 4, 7, 5], #1933 [100, 101, 2, 2, 2, 105, 7, 107]
    assert e["positions"] == [0, 1, 4, 5, 7]
    # sample 4 (index 2) joins rollout 2 of another prompt: one rollout of three samples
    (moved,) = [m for m in e["cost"]["loss_weight"] if m["positions"] == [4]]
    assert moved["trainer_rollout_ids"] == [2] and moved["rollout_id"] == 3
    assert moved["share"]["rollout_mean"] == pytest.approx(1 / 7)  # one of 7 rollouts expected
    assert moved["trainer_share"]["rollout_mean"] == pytest.approx(1 / 6 / 3)  # a third of one of 6
    (two,) = [m for m in e["cost"]["loss_weight"] if m["positions"] == [2, 3]]  # rollout 2 loses a third
    assert two["share"]["rollout_mean"] == pytest.approx(1 / 7) and two["trainer_share"]["rollout_mean"] == pytest.approx(2 / 18)
    assert r["summary"]["divergences"] == 0


def test_trainer_ids_none_under_first_sample_explicit(tmp_path):
    """#1965 with an explicit first sample: default samples keep None and merge into one rollout."""
    s = compact()  # sample 0 explicit
    r = _audit(tmp_path, s, id_rule="first_sample", reward_rule="group")
    e = _rules(r)[(0, "rollout_id")]
    merged = [m for m in e["cost"]["loss_weight"] if m["trainer_rollout_ids"] == [None]]
    assert len(merged) == 5 and all(m["trainer_share"]["rollout_mean"] < m["share"]["rollout_mean"] for m in merged)
    assert r["summary"]["divergences"] == 0


def test_slime_positional_rows_without_rollout_batch_size(tmp_path):
    """Both cases of slime's rule are tried: rows of n here (the stand-in's batch is n x rbs,
    with groups interleaved so the rows are not the prompt groups)."""
    s = uniform()
    for k, v in enumerate([0.0, 1.0, 5.0, 2.0, 3.0, 4.0]):
        s[k]["reward"] = v
    order = [0, 2, 1, 3, 4, 5]  # rows (0, 5) and (1, 2) mix groups 0 and 1
    s = [dict(s[k], index=i) for i, k in enumerate(order)]
    r = _audit(tmp_path, s)
    e = _rules(r)[(0, "reward")]
    assert e["trainer_rule"] == "slime_positional" and e["case"] == "rows of 2 consecutive samples"
    assert e["cost"]["groups_normalised_with_others"] == [0, 1]
    # by group: 0 -> -0.71, 5 -> +0.71, 1 -> +0.71, 2 -> -0.71; by rows: -, +, -, +
    assert e["positions"] == [2, 3] and e["cost"]["advantage_sign_changes"] == [2, 3]
    assert r["summary"]["divergences"] == 0


def test_expected_rule_follows_the_options(tmp_path):
    """With --slime-compat the expected rule is slime's own: nothing to report."""
    r = _audit(tmp_path, compact(), opts={"slime_compat": True, "rollout_batch_size": PROMPTS})
    assert r["rules"] == [] and r["summary"]["divergences"] == 0
    assert r["steps"][0]["trainer_rules"]["reward"]["expected_rule"] == "slime_positional"


# ------------------------------------------------------------------------------ the property

SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=20,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def batches(draw):
    """Prompt groups of 1-3 samples; some groups one compact rollout (explicit id, one reward)."""
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=4))
    out, k = [], 0
    for g, size in enumerate(sizes):
        is_compact = size > 1 and draw(st.booleans())
        reward = float(draw(st.integers(0, 4)))
        for j in range(size):
            out.append({"group_index": g, "index": k, "rollout_id": 50 + g if is_compact else None,
                        "tokens": [1, 2, 3, 4, 5], "response_length": 3, "loss_mask": [1, 1, 1],
                        "reward": reward if is_compact else float(draw(st.integers(0, 4))) + 0.5 * j,
                        "rollout_log_probs": [-0.5, -0.5, -0.5], "status": "completed", "metadata": {}})
            k += 1
    return out


@settings(**SETTINGS)
@given(samples=batches(), rule=st.sampled_from(T.REWARD_RULES), id_rule=st.sampled_from(list(ref.ROLLOUT_ID_RULES)),
       pick=st.integers(0, 100))
def test_property_a_rule_is_named_and_one_change_is_one_divergence(tmp_path_factory, samples, rule, id_rule, pick):
    root = tmp_path_factory.mktemp("prop")
    rbs = len({s["group_index"] for s in samples})
    r = _audit(root, samples, rbs=rbs, reward_rule=rule, id_rule=id_rule)
    assert r["summary"]["divergences"] == 0, r["divergences"]
    built = np.asarray(T.rule_rewards(samples, rule, n=N, rbs=rbs))
    named = _named(r, "reward")
    assert named == rule or np.allclose(T.rule_rewards(samples, named, n=N, rbs=rbs), built, atol=1e-6)
    assert ref.ROLLOUT_ID_RULES[_named(r, "rollout_id")](samples) == ref.ROLLOUT_ID_RULES[id_rule](samples)
    p = pick % len(samples)

    def edit(payload):
        payload["samples"][p]["rewards"] = 1000.0
    r2 = _audit(tmp_path_factory.mktemp("prop"), samples, rbs=rbs, reward_rule=rule, id_rule=id_rule, edit=edit)
    assert [(d["rollout_position"], d["field"]) for d in r2["divergences"]] == [(p, "reward")]
