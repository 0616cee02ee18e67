"""Hypothesis invariants over random small steps, with random invalid samples under --on-error skip."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slime_reference as ref
from conftest import copts, make_sample, read_jsonl, read_rows, write_jsonl
from rollout_cli.run.convert import convert
from rollout_cli.pipeline.ids import assign_ids
from rollout_cli.pipeline.validate import ID_EXPLICIT, ID_MISSING
from rollout_cli.pipeline.rewards import normalize_rewards

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None)

# one rollout: (group, explicit?, siblings, rewards, mask lengths, which siblings are invalid and how)
_BREAKS = ("status", "reward", "loss_mask", "tokens")


@st.composite
def steps(draw, allow_invalid=True):
    n_groups = draw(st.integers(1, 4))
    rollouts = []
    for g in range(n_groups):
        for _ in range(draw(st.integers(1, 4))):
            explicit = draw(st.booleans())
            k = draw(st.integers(2, 3)) if explicit and draw(st.booleans()) else 1
            rollouts.append((g, explicit, k))
    # explicit ids: distinct per rollout, small so they collide with what the fill would hand out
    n_explicit = sum(1 for r in rollouts if r[1])
    ids = draw(st.lists(st.integers(0, 12), min_size=n_explicit, max_size=n_explicit, unique=True))
    interleave = draw(st.booleans())
    samples, meta = [], []
    it = iter(ids)
    for g, explicit, k in rollouts:
        rid = next(it) if explicit else None
        for _ in range(k):
            pos = len(samples)
            rl = draw(st.integers(0, 4))
            mask = draw(st.lists(st.integers(0, 1), min_size=rl, max_size=rl))
            s = make_sample(index=pos, group_index=g, rollout_id=rid, response_length=rl, loss_mask=mask,
                            reward=draw(st.sampled_from([0.0, 1.0, 0.5, 0.25])),
                            remove_sample=draw(st.booleans()) and draw(st.booleans()))
            brk = draw(st.sampled_from((None,) * 6 + _BREAKS)) if allow_invalid else None
            if brk == "status":
                s["status"] = "bogus"
            elif brk == "reward":
                s["reward"] = "high"
            elif brk == "loss_mask":
                s["loss_mask"] = [1] * (rl + 1)
            elif brk == "tokens":
                s["tokens"][0] = 2**31
            samples.append(s)
            meta.append(brk)
    if interleave and len(samples) > 1:
        # move one sample to the end: siblings may be non-adjacent, groups interleaved
        j = draw(st.integers(0, len(samples) - 2))
        samples.append(samples.pop(j))
        meta.append(meta.pop(j))
        for pos, s in enumerate(samples):
            s["index"] = pos
    return samples, meta


def _run(samples, **kw):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_jsonl(d / "in" / "1.jsonl", samples)
        res = convert([str(d / "in")], str(d / "out"), copts(**kw))
        rows = read_rows(d / "out")
        rej_path = d / "out" / "rejects.jsonl"
        rejects = read_jsonl(rej_path) if rej_path.exists() else []
    return res, rows, rejects


@settings(max_examples=40, **SETTINGS)
@given(steps())
def test_invariants_under_skip(step):
    samples, broken = step
    n = len(samples)
    res, rows, rejects = _run(samples, on_error="skip")

    # every input sample is either out or rejected, never both
    out_pos = [r["sample_index"] for r in rows]
    rej_pos = [r["line"] - 1 for r in rejects]
    assert len(set(out_pos)) == len(out_pos) and len(set(rej_pos)) == len(rej_pos)
    assert set(out_pos).isdisjoint(rej_pos)
    assert sorted(out_pos + rej_pos) == list(range(n))
    c = res["counts"]
    assert c["input_samples"] == n == c["rows"] + c["rejected"]
    assert c["rows"] == len(rows) and c["rejected"] == len(rejects)

    # every broken sample is rejected, and with it its whole rollout
    expected_ids = ref.fill_rollout_ids(samples)  # all samples parse as dicts: ids over all of them
    bad_ids = {expected_ids[i] for i in range(n) if broken[i]}
    assert set(rej_pos) == {i for i in range(n) if expected_ids[i] in bad_ids}

    # explicit ids kept; filled ids follow slime's rule over all parsed samples, never reuse explicit ones
    explicit = {s["rollout_id"] for s in samples if s["rollout_id"] is not None}
    for r in rows:
        s = samples[r["sample_index"]]
        assert r["rollout_id"] == expected_ids[r["sample_index"]]
        if s["rollout_id"] is not None:
            assert r["rollout_id"] == s["rollout_id"]
        else:
            assert r["rollout_id"] not in explicit
    filled = [r["rollout_id"] for r in rows if samples[r["sample_index"]]["rollout_id"] is None]
    assert len(set(filled)) == len(filled)

    # siblings share id and mask sum; the mask sum is the siblings' mask total (remove_sample zeroed)
    by_id: dict = {}
    for r in rows:
        by_id.setdefault(r["rollout_id"], []).append(r)
    for sibs in by_id.values():
        total = sum(sum(r["loss_mask"]) for r in sibs)
        assert {r["rollout_mask_sum"] for r in sibs} == {total}
    for r in rows:
        s = samples[r["sample_index"]]
        assert r["loss_mask"] == ([0] * s["response_length"] if s["remove_sample"] else s["loss_mask"])

    # group means ~0 after GRPO normalisation over the survivors; one-sample groups give 0.0
    by_group: dict = {}
    for r in rows:
        by_group.setdefault(r["group_index"], []).append(r["reward"])
    for vals in by_group.values():
        assert not np.isnan(vals).any()
        assert abs(float(np.mean(vals))) < 1e-5
        if len(vals) == 1:
            assert vals == [0.0]


@settings(max_examples=15, **SETTINGS)
@given(steps(allow_invalid=False))
def test_valid_steps_match_oracle(step):
    samples, _ = step
    res, rows, rejects = _run(samples, rollout_id_scope="strict")
    assert not rejects and len(rows) == len(samples)
    td = ref.convert_samples_to_train_data(samples, n_samples_per_prompt=1, rollout_batch_size=len(samples),
                                           advantage_estimator="ppo")
    assert [r["rollout_id"] for r in rows] == td["rollout_ids"]
    assert [r["rollout_mask_sum"] for r in rows] == td["rollout_mask_sums"]
    assert [r["loss_mask"] for r in rows] == td["loss_masks"]


@st.composite
def id_lists(draw):
    n = draw(st.integers(0, 40))
    return draw(st.lists(st.one_of(st.none(), st.integers(0, 2**40), st.integers(0, 10)), min_size=n, max_size=n))


@settings(max_examples=100, **SETTINGS)
@given(id_lists())
def test_assign_ids_matches_slime_fill(rids):
    state = np.array([ID_MISSING if r is None else ID_EXPLICIT for r in rids], dtype=np.int8)
    explicit = np.array([0 if r is None else r for r in rids], dtype=np.int64)
    res = assign_ids(state, explicit, [0] * len(rids), "strict")
    assert res.ids.tolist() == ref.fill_rollout_ids([{"rollout_id": r} for r in rids])
    assert not res.problems


@settings(max_examples=100, **SETTINGS)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-20, 20).map(lambda v: v / 4)), min_size=1, max_size=40),
       st.sampled_from(["grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"]))
def test_group_means_are_zero(pairs, estimator):
    """Realistic rewards (multiples of 1/4): every group's mean is ~0 after normalisation."""
    keys = [k for k, _ in pairs]
    values = np.array([v for _, v in pairs], dtype=np.float64)
    out = normalize_rewards(values, keys, advantage_estimator=estimator)
    assert out.dtype == np.float32 and np.isfinite(out).all()
    for k in set(keys):
        members = [i for i, kk in enumerate(keys) if kk == k]
        g = out[members].astype(np.float64)
        assert abs(g.mean()) <= 1e-5
        if len(members) == 1:
            assert g[0] == 0.0
        if estimator != "reinforce_plus_plus_baseline" and len(members) > 1 and len(set(values[members])) > 1:
            # std-scaled: unit sample std (up to the 1e-6 eps)
            assert abs(g.std(ddof=1) - 1.0) < 1e-4
