"""`audit_paths`: rollout dumps (three formats) against train dumps built by the stand-in of
slime's payload builder (tests/helpers/train_dumps.py), clean and with each kind of fault, dp 1 and 2."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import train_dumps as T
from rollout_cli.auditing import AuditOptions, audit_paths
from rollout_cli.core.errors import InvalidInputError

SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=15,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FORMATS = ("pt", "jsonl", "parquet")
PROMPTS, N = 3, 2


def _run(root: Path, steps=(0, 1), fmt: str = "pt", dp: int = 1, per_rank: bool = False, edit=None, removed=(3,),
         mutate=None, **opts) -> dict:
    """Write a run (each step's rollout dump and train dump) and audit it. `edit(step, payload)`
    changes a train payload; `mutate(step, samples)` the rollout samples after the trainer saw them."""
    for step in steps:
        samples = T.rollout_samples(step, prompts=PROMPTS, n=N, removed=removed)
        T.write_train(root / "train_data", samples, step, n=N, rbs=PROMPTS, dp=dp, per_rank=per_rank,
                      edit=None if edit is None else (lambda p, s=step: edit(s, p)))
        if mutate is not None:
            mutate(step, samples)
        T.write_rollout(root / "rollout_data", samples, step, fmt)
    return audit_paths([str(root / "rollout_data")], [str(root / "train_data")], AuditOptions(**opts))


def _found(result: dict) -> list[tuple]:
    return [(r["step"], r["rollout_position"], r["field"]) for r in result["divergences"]]


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("fmt", FORMATS)
def test_clean_run_has_no_divergence(tmp_path, fmt, dp):
    r = _run(tmp_path, fmt=fmt, dp=dp)
    assert r["divergences"] == [] and r["summary"]["divergences"] == 0
    assert r["summary"]["paired_steps"] == 2 and r["summary"]["samples"] == 2 * PROMPTS * N
    st0 = r["steps"][0]
    assert st0["samples"] == {"rollout": 6, "train": 6, "paired": 6}
    # 6 samples x 4 response tokens, the first masked, sample 3 removed: 5 x 3 trained tokens
    assert st0["mismatch"]["tokens"] == 15 and st0["ref_mismatch"]["tokens"] == 15
    assert st0["advantages"]["tokens"] == 15 and st0["entropy"]["tokens"] == 15
    assert st0["rollout_log_probs_from"] == "rollout dump"


def test_per_rank_files_are_merged(tmp_path):
    r = _run(tmp_path, dp=2, per_rank=True)
    assert r["divergences"] == [] and r["steps"][0]["train_file"].count(" + ") == 1


def _set(key, value, pos=2):
    def edit(step, p):
        if step == 1:
            p["samples"][pos][key] = value
    return edit


def _poke(key, index, value, pos=2):
    def edit(step, p):
        if step == 1:
            a = p["samples"][pos][key].clone()
            a[index] = value
            p["samples"][pos][key] = a
    return edit


def _raw(step, p):
    if step == 1:
        p["raw_reward"] = list(p["raw_reward"])
        p["raw_reward"][4] = 99.0


def _drop(step, p):
    if step == 1:
        del p["samples"][2]


def _extra(step, p):
    if step == 1:
        s = dict(p["samples"][0])
        s["rollout_position"] = 9
        p["samples"].append(s)


FAULTS = {
    "tokens": (_poke("tokens", 4, 77), (1, 2, "tokens")),
    "loss_mask": (_poke("loss_masks", 2, 0), (1, 2, "loss_mask")),
    "loss_mask of a removed sample": (_poke("loss_masks", 1, 1, pos=3), (1, 3, "loss_mask")),
    "rollout_log_probs": (_poke("rollout_log_probs", 1, -9.0), (1, 2, "rollout_log_probs")),
    "reward": (_set("rewards", 5.0), (1, 2, "reward")),
    "rollout_id": (_set("rollout_ids", 42), (1, 2, "rollout_id")),
    "raw_reward": (_raw, (1, 4, "raw_reward")),
    "remove_sample of a removed sample": (_set("remove_sample", False, pos=3), (1, 3, "remove_sample")),
    "remove_sample of a kept sample": (_set("remove_sample", True), (1, 2, "remove_sample")),
    "missing": (_drop, (1, 2, "missing")),
    "extra": (_extra, (1, 9, "extra")),
}


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_is_named_with_step_position_and_field(tmp_path, fault, fmt, dp):
    edit, expected = FAULTS[fault]
    r = _run(tmp_path, fmt=fmt, dp=dp, edit=edit)
    assert _found(r) == [expected]
    rec = r["divergences"][0]
    assert rec["train"].endswith("train_data/1.pt")
    pos = expected[1]
    where = {"jsonl": f"line {pos + 1}", "parquet": f"row {pos}", "pt": f"sample {pos}"}[fmt]
    assert rec["rollout"] == (None if fault == "extra" else str(tmp_path / "rollout_data" / f"1.{fmt}") + ":" + where)


def test_remove_sample_is_compared_where_the_train_dump_carries_it(tmp_path):
    """slime's train dumps carry no remove_sample (the clean runs above); a train dump that does
    is compared with the rollout's flag: agreeing, nothing; the record says what each side holds."""
    def carry(step, p):
        for s in p["samples"]:
            s["remove_sample"] = s["rollout_position"] == 3

    assert _run(tmp_path / "a", edit=carry)["divergences"] == []

    def flip(step, p):
        carry(step, p)
        if step == 0:
            p["samples"][3]["remove_sample"] = 0  # not a bool: never equal
    r = _run(tmp_path / "b", edit=flip)
    assert _found(r) == [(0, 3, "remove_sample")]
    rec = r["divergences"][0]
    assert (rec["expected"], rec["got"], rec["train_field"]) == (True, 0, "remove_sample")


def test_array_divergence_says_where(tmp_path):
    r = _run(tmp_path, edit=_poke("tokens", 4, 77))
    rec = r["divergences"][0]
    assert rec["index"] == 4 and rec["got"] == 77 and rec["expected"] == 100 + 10 * 2 + 1 and rec["differing"] == 1
    assert rec["train_field"] == "tokens" and rec["rollout"].endswith("1.pt:sample 2")


def test_response_length(tmp_path):
    def edit(step, p):
        if step == 1:
            s = p["samples"][2]
            s["response_lengths"] = 3
            for k in ("loss_masks", "rollout_log_probs", "log_probs", "ref_log_probs", "advantages", "entropy"):
                s[k] = s[k][:3]

    fields = {f for _, pos, f in _found(_run(tmp_path, edit=edit)) if pos == 2}
    assert {"response_length", "loss_mask", "rollout_log_probs"} == fields


def test_rollout_changed_after_training(tmp_path):
    def mutate(step, samples):
        if step == 0:
            samples[5]["reward"] = 10.0  # the group's normalised rewards all move

    r = _run(tmp_path, mutate=mutate)
    assert {(s, f) for s, _, f in _found(r)} == {(0, "reward"), (0, "raw_reward")}
    assert (0, 5, "raw_reward") in _found(r)


def test_unpaired_steps_are_reported(tmp_path):
    _run(tmp_path, steps=(0, 1))
    (tmp_path / "rollout_data" / "1.pt").unlink()
    T.write_rollout(tmp_path / "rollout_data", T.rollout_samples(2), 2, "pt")
    r = audit_paths([str(tmp_path / "rollout_data")], [str(tmp_path / "train_data")])
    assert _found(r) == [(1, None, "extra"), (2, None, "missing")]
    assert r["summary"]["rollout_only_steps"] == [2] and r["summary"]["train_only_steps"] == [1]


def test_pairs_by_payload_step_not_name(tmp_path):
    samples = T.rollout_samples(3)
    T.write_rollout(tmp_path / "r", samples, 3, "pt")
    (p,) = T.write_train(tmp_path / "t", samples, 3, n=N, rbs=PROMPTS)
    p.rename(tmp_path / "t" / "train_three.pt")
    r = audit_paths([str(tmp_path / "r")], [str(tmp_path / "t")])
    assert r["divergences"] == [] and r["steps"][0]["step"] == 3


def test_a_prime_rl_run_says_it_has_no_trainer_dumps():
    """prime-rl writes nothing the train side reads: the error says so and what auditing it
    would take, not 'train steps none'."""
    run = Path(__file__).resolve().parents[2] / "sample_data" / "prime_rl" / "outputs" / "run"
    with pytest.raises(InvalidInputError) as e:
        audit_paths([str(run)], [str(run)])
    msg = str(e.value)
    assert "train steps none" not in msg
    assert f"no train dump under --train {run} (rollout steps [1, 2])" in msg
    assert "prime-rl writes no trainer dump rollout-cli reads" in msg and "Other readers of the train side" in msg


def test_no_train_dump_of_slime_names_what_audit_reads(tmp_path):
    T.write_rollout(tmp_path / "r", T.rollout_samples(3), 3, "pt")
    (tmp_path / "t").mkdir()
    with pytest.raises(InvalidInputError, match=r"no train dump under --train .*--save-debug-train-data") as e:
        audit_paths([str(tmp_path / "r")], [str(tmp_path / "t")])
    assert "prime-rl" not in str(e.value)


def test_another_steps_train_dump_is_invalid_input(tmp_path):
    T.write_rollout(tmp_path / "r", T.rollout_samples(3), 3, "pt")
    T.write_train(tmp_path / "t", T.rollout_samples(5), 5, n=N, rbs=PROMPTS)
    with pytest.raises(InvalidInputError, match=r"no step is in both inputs: rollout steps \[3\], train steps \[5\]"):
        audit_paths([str(tmp_path / "r" / "3.pt")], [str(tmp_path / "t" / "5.pt")])


def test_truncated_train_dump(tmp_path):
    _run(tmp_path, steps=(0,))
    p = tmp_path / "train_data" / "0.pt"
    p.write_bytes(p.read_bytes()[:200])
    with pytest.raises(InvalidInputError, match=r"0\.pt: not a readable torch dump"):
        audit_paths([str(tmp_path / "rollout_data")], [str(tmp_path / "train_data")])


def test_train_samples_without_rollout_position(tmp_path):
    def edit(step, p):
        for s in p["samples"]:
            s.pop("rollout_position")

    with pytest.raises(InvalidInputError, match=r"sample 0: rollout_position: missing"):
        _run(tmp_path, steps=(0,), edit=edit)


def test_invalid_rollout_sample_is_invalid_input(tmp_path):
    def mutate(step, samples):
        samples[1]["status"] = "weird"

    with pytest.raises(InvalidInputError, match=r"1 invalid sample\(s\) in .*0\.pt: .*sample 1: status"):
        _run(tmp_path, steps=(0,), mutate=mutate)


def test_max_divergences_lists_fewer_counts_all(tmp_path):
    def edit(step, p):
        for s in p["samples"]:
            s["rewards"] = 7.0

    r = _run(tmp_path, edit=edit, max_divergences=2)
    assert r["summary"]["divergences"] == 12 and len(r["divergences"]) == 4
    assert r["steps"][0]["divergences_by_field"] == {"reward": 6}


def test_loss_weight_shares_per_step(tmp_path):
    r = _run(tmp_path, steps=(0,))
    lw = r["steps"][0]["loss_weight"]
    for mode in lw["modes"]:
        assert sum(x["share"][mode] for x in lw["rollouts"]) == pytest.approx(1.0)
    removed = next(x for x in lw["rollouts"] if x["rollout_id"] == 3)
    assert all(v == 0 for v in removed["share"].values())  # sample 3 is removed: no weight anywhere


CHANGES = ("tokens", "loss_mask", "rollout_log_probs", "reward", "raw_reward", "rollout_id")


@settings(**SETTINGS)
@given(prompts=st.integers(1, 4), n=st.integers(1, 3), rl=st.integers(1, 5), dp=st.sampled_from([1, 2]),
       seed=st.integers(0, 1000), data=st.data())
def test_property_clean_pair_never_diverges_and_one_change_is_found(tmp_path_factory, prompts, n, rl, dp, seed, data):
    root = tmp_path_factory.mktemp("prop")
    total = prompts * n
    if total < dp:
        dp = 1
    removed = tuple(data.draw(st.sets(st.integers(0, total - 1), max_size=2)))
    samples = T.rollout_samples(0, prompts=prompts, n=n, rl=rl, seed=seed, removed=removed)
    T.write_rollout(root / "r", samples, 0, "pt")
    T.write_train(root / "t", samples, 0, n=n, rbs=prompts, dp=dp)
    clean = audit_paths([str(root / "r")], [str(root / "t")])
    assert clean["divergences"] == []
    fld = data.draw(st.sampled_from(CHANGES))
    pos = data.draw(st.integers(0, total - 1))
    tok = data.draw(st.integers(0, rl - 1))

    def edit(p):
        s = p["samples"][pos]
        if fld == "tokens":
            s["tokens"] = s["tokens"].clone()
            s["tokens"][3 + tok] += 1
        elif fld == "loss_mask":
            s["loss_masks"] = s["loss_masks"].clone()
            s["loss_masks"][tok] = 1 - s["loss_masks"][tok]
        elif fld == "rollout_log_probs":
            s["rollout_log_probs"] = s["rollout_log_probs"].clone()
            s["rollout_log_probs"][tok] -= 1.0
        elif fld == "reward":
            s["rewards"] = float(s["rewards"]) + 0.5
        elif fld == "raw_reward":
            p["raw_reward"] = list(p["raw_reward"])
            p["raw_reward"][pos] = float(p["raw_reward"][pos]) + 0.5
        else:
            s["rollout_ids"] = s["rollout_ids"] + 100

    T.write_train(root / "t", samples, 0, n=n, rbs=prompts, dp=dp, edit=edit)
    r = audit_paths([str(root / "r")], [str(root / "t")])
    assert _found(r) == [(0, pos, fld)]
    if fld in ("tokens", "loss_mask", "rollout_log_probs"):
        assert r["divergences"][0]["index"] == (3 + tok if fld == "tokens" else tok)


def test_masked_positions_never_count(tmp_path):
    """The trainer's 0.0 at masked positions would be a large |d| against the rollout's real
    log-probs: none of them may reach the figures."""
    r = _run(tmp_path, steps=(0,))
    m = r["steps"][0]["mismatch"]
    assert m["max_abs_diff"] < 0.5  # the stand-in's noise; a masked 0.0 against ~-1.5 would exceed it
    assert all(t["token"] != 0 for t in m["top_tokens"])  # token 0 is masked in every sample
    assert all(t["rollout_position"] != 3 for t in m["top_tokens"])  # sample 3 is removed


def test_mismatch_against_direct_numpy(tmp_path):
    _run(tmp_path, steps=(0,))
    import torch

    p = torch.load(str(tmp_path / "train_data" / "0.pt"), weights_only=False)
    samples = T.rollout_samples(0, prompts=PROMPTS, n=N, removed=(3,))
    d = []
    for s in p["samples"]:
        m = s["loss_masks"].numpy().astype(bool)
        rlp = np.asarray(samples[s["rollout_position"]]["rollout_log_probs"], dtype=np.float32)
        d.append(s["log_probs"].numpy()[m].astype(np.float64) - rlp[m].astype(np.float64))
    d = np.concatenate(d)
    m = audit_paths([str(tmp_path / "rollout_data")], [str(tmp_path / "train_data")])["steps"][0]["mismatch"]
    assert m["tokens"] == len(d)
    assert m["mean_abs_diff"] == pytest.approx(np.abs(d).mean(), rel=1e-12)
    assert m["max_abs_diff"] == pytest.approx(np.abs(d).max(), rel=1e-12)
    assert m["k1"] == pytest.approx(np.mean(-d), rel=1e-9)
    assert m["k3"] == pytest.approx(np.mean(np.exp(d) - 1 - d), rel=1e-6)
    assert m["ratio_above_2"] == np.mean(np.exp(d) > 2) and m["ratio_below_0.5"] == np.mean(np.exp(d) < 0.5)
    assert m["top_tokens"][0]["abs_diff"] == pytest.approx(np.abs(d).max(), rel=1e-12)


@pytest.mark.parametrize("fmt", FORMATS)
def test_loss_weight_is_inspects(tmp_path, fmt):
    """audit (from compute_step's denominators) and inspect (from its rows) agree."""
    from rollout_cli.inspection import InspectOptions, inspect_paths

    r = _run(tmp_path, fmt=fmt)
    ins = inspect_paths([str(tmp_path / "rollout_data")], options=InspectOptions())
    assert [w["step"] for w in ins["loss_weight"]] == [0, 1]
    for st_, w in zip(r["steps"], ins["loss_weight"]):
        mine = st_["loss_weight"]
        assert [m["rollout_id"] for m in mine["movers"]] == [m["rollout_id"] for m in w["movers"]]
        for a, b in zip(mine["movers"], w["movers"]):
            assert a["share"] == pytest.approx(b["share"], abs=1e-6)


JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10**20), st.floats(allow_nan=True), st.text(max_size=3),
    st.lists(st.integers(-2, 3), max_size=5), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from(["tensor2d", "tensor_float", "tensor_bool", "tensor_empty", "tensor0d"]),
)
TRAIN_KEYS = ("tokens", "response_lengths", "loss_masks", "rewards", "rollout_ids", "rollout_log_probs", "log_probs",
              "ref_log_probs", "advantages", "entropy", "rollout_position", "rollout_mask_sums")


def _junk_value(v):
    import torch

    return {"tensor2d": torch.zeros(2, 2), "tensor_float": torch.full((4,), 0.5), "tensor_bool": torch.ones(4, dtype=torch.bool),
            "tensor_empty": torch.zeros(0), "tensor0d": torch.tensor(3)}.get(v, v) if isinstance(v, str) else v


@settings(**{**SETTINGS, "max_examples": 40})
@given(data=st.data())
def test_fuzzed_train_payload_is_never_an_internal_error(tmp_path_factory, data):
    """Whatever a train dump holds, audit returns divergences or refuses it as invalid input."""
    root = tmp_path_factory.mktemp("fuzz")
    samples = T.rollout_samples(0, prompts=2, n=2)
    T.write_rollout(root / "r", samples, 0, "pt")
    changes = data.draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(TRAIN_KEYS + ("<drop>",)), JUNK),
                                 min_size=1, max_size=3))
    top = data.draw(st.one_of(st.none(), st.tuples(st.sampled_from(["raw_reward", "rollout_id", "samples", "dp_shards"]), JUNK)))

    def edit(p):
        for pos, key, value in changes:
            if key == "<drop>":
                p["samples"][pos] = _junk_value(value)
            elif isinstance(p["samples"][pos], dict):
                p["samples"][pos][key] = _junk_value(value)
        if top is not None:
            p[top[0]] = _junk_value(top[1])

    T.write_train(root / "t", samples, 0, n=2, rbs=2, edit=edit)
    try:
        r = audit_paths([str(root / "r")], [str(root / "t")])
    except InvalidInputError as e:
        assert str(e)
        return
    import json

    json.dumps(r, allow_nan=False)  # the --json object is valid JSON


def test_top_tokens_say_where_they_are(tmp_path):
    r = _run(tmp_path, steps=(0,), fmt="jsonl")
    for t in r["steps"][0]["mismatch"]["top_tokens"]:
        p = t["rollout_position"]
        assert t["rollout"] == f"{tmp_path / 'rollout_data' / '0.jsonl'}:line {p + 1}"
        assert t["rollout_id"] == p  # one sample per rollout, ids in order
        assert 1 <= t["token"] < 4 and t["abs_diff"] == abs(t["d"])


def test_eval_steps_are_not_audited(tmp_path):
    _run(tmp_path, steps=(0,))
    T.write_rollout(tmp_path / "rollout_data", T.rollout_samples(5), 5, "jsonl").rename(tmp_path / "rollout_data" / "eval_5.jsonl")
    r = audit_paths([str(tmp_path / "rollout_data")], [str(tmp_path / "train_data")])
    assert [s["step"] for s in r["steps"]] == [0] and r["divergences"] == []
    assert any("eval step 5" in n and "not audited" in n for n in r["summary"]["notes"])
