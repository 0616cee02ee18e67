"""The mismatch figures: per-sample sums combined equal a direct numpy computation over every
trained token; masked positions never count; the top tokens are the largest |d|."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.auditing.mismatch import KEYS, TOP_TOKENS, Pair, TokenStats, direct

SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=200)


def _numpy(d: np.ndarray) -> dict:
    """The definitions, written out."""
    r = np.exp(d)
    return {"tokens": len(d), "mean_abs_diff": np.abs(d).mean(), "max_abs_diff": np.abs(d).max(), "k1": np.mean(-d),
            "k3": np.mean(r - 1 - d), "ratio_above_2": np.mean(r > 2), "ratio_below_0.5": np.mean(r < 0.5)}


def _close(got: dict, want: dict) -> None:
    assert set(KEYS) <= set(got)
    for k in KEYS:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k


samples = st.lists(
    st.tuples(st.integers(0, 3),  # rollout id
              st.lists(st.tuples(st.floats(-8, 0, width=32), st.floats(-8, 0, width=32), st.booleans()),
                       min_size=0, max_size=12)),
    min_size=1, max_size=8)


@settings(**SETTINGS)
@given(samples)
def test_combined_sums_equal_direct_numpy_per_step_and_rollout(data):
    pair = Pair("log_probs", "rollout_log_probs")
    all_d, by_rollout, rollout_of, everything = [], {}, {}, []
    for pos, (rid, toks) in enumerate(data):
        scorer = np.array([t[0] for t in toks], dtype=np.float32)
        sampler = np.array([t[1] for t in toks], dtype=np.float32)
        mask = np.array([t[2] for t in toks], dtype=bool)
        scorer_masked = np.where(mask, scorer, 0.0).astype(np.float32)  # the trainer's 0.0 at masked positions
        pair.add(pos, scorer_masked, sampler, mask.astype(np.int32))
        d = scorer[mask].astype(np.float64) - sampler[mask].astype(np.float64)
        all_d.append(d)
        by_rollout.setdefault(rid, []).append(d)
        rollout_of[pos] = rid
        everything += [(abs(x), pos) for x in d]
    d = np.concatenate(all_d)
    out = pair.step()
    if not len(d):
        assert out["tokens"] == 0 and out["mean_abs_diff"] is None and out["top_tokens"] == []
        return
    _close(out, _numpy(d))
    want_top = sorted((a for a, _ in everything), reverse=True)[:TOP_TOKENS]
    assert [t["abs_diff"] for t in out["top_tokens"]] == pytest.approx(want_top)
    per = pair.by_rollout(rollout_of)
    for rid, ds in by_rollout.items():
        dd = np.concatenate(ds)
        if len(dd):
            _close(per[rid], _numpy(dd))
        else:
            assert per[rid]["tokens"] == 0


def test_masked_positions_never_count():
    pair = Pair("log_probs", "rollout_log_probs")
    scorer = np.array([0.0, -1.0, 0.0, -2.0], dtype=np.float32)  # 0.0 where masked
    sampler = np.array([-5.0, -1.5, -7.0, -2.0], dtype=np.float32)
    pair.add(0, scorer, sampler, np.array([0, 1, 0, 1], dtype=np.int32))
    out = pair.step()
    assert out["tokens"] == 2 and out["max_abs_diff"] == 0.5 and out["mean_abs_diff"] == 0.25
    assert out["k1"] == pytest.approx(-0.25) and out["ratio_above_2"] == 0.0
    assert out["top_tokens"][0] == {"rollout_position": 0, "token": 1, "d": 0.5, "abs_diff": 0.5, "log_probs": -1.0,
                                    "rollout_log_probs": -1.5}


def test_ratios_and_k3_on_known_values():
    d = np.array([np.log(3.0), np.log(0.25), 0.0, 0.0])
    out = direct(d)
    assert out["ratio_above_2"] == 0.25 and out["ratio_below_0.5"] == 0.25
    assert out["k3"] == pytest.approx(np.mean([3 - 1 - np.log(3), 0.25 - 1 - np.log(0.25), 0, 0]))
    assert out["k1"] == pytest.approx(-np.mean(d))


@settings(**SETTINGS)
@given(st.lists(st.tuples(st.floats(-50, 50, width=32), st.booleans()), max_size=40))
def test_token_stats_equal_numpy(vals):
    ts = TokenStats("advantages")
    v = np.array([x for x, _ in vals], dtype=np.float32)
    m = np.array([b for _, b in vals], dtype=np.int32)
    for a in range(0, len(v), 7):
        ts.add(v[a:a + 7], m[a:a + 7])
    kept = v[m.astype(bool)].astype(np.float64)
    r = ts.result()
    if not len(kept):
        assert r is None
        return
    assert r["tokens"] == len(kept) and r["min"] == kept.min() and r["max"] == kept.max()
    assert r["mean"] == pytest.approx(kept.mean(), abs=1e-9)
    assert r["std"] == pytest.approx(kept.std(), abs=1e-6)
