"""Loss weight: each rollout's share under every aggregation of the "Loss
denominators" table, held to the table's formulas applied to token-level losses directly."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.inspection.loss_weight import MODES, MOVERS, from_rows, loss_weight
from rollout_cli.inspection.rows import ROW_SCHEMA

SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=200)

rows_st = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.lists(st.integers(0, 1), max_size=6)),
                   min_size=1, max_size=12)


def _table(rows) -> pa.Table:
    n = len(rows)
    cols = {f.name: pa.nulls(n, f.type) for f in ROW_SCHEMA}
    cols["rollout_id"] = pa.array([r for r, _, _ in rows], pa.int64())
    cols["pgroup"] = pa.array([g for _, g, _ in rows], pa.int64())
    cols["mask_sum"] = pa.array([sum(m) for _, _, m in rows], pa.int64())
    return pa.table(cols, schema=ROW_SCHEMA)


def _direct(rows, mode: str, rollout: int, L: float = 7.0) -> float:
    """The table's aggregation of x = 1 on the tokens of `rollout`, 0 elsewhere."""
    ids = np.array([r for r, _, _ in rows])
    groups = np.array([g for _, g, _ in rows])
    M = np.array([sum(m) for _, _, m in rows], dtype=float)
    x = [np.array(m, dtype=float) * (r == rollout) for r, _, m in rows]  # x*m per token
    xm = np.array([v.sum() for v in x])
    S, R, G = len(rows), len(set(ids.tolist())), len(set(groups.tolist()))
    rms = np.array([M[ids == i].sum() for i in ids])
    gms = np.array([M[groups == g].sum() for g in groups])
    grs = np.array([len(set(ids[groups == g].tolist())) for g in groups])
    with np.errstate(divide="ignore", invalid="ignore"):
        per_g = np.where(gms > 0, xm / np.where(gms > 0, gms, 1), 0.0)
    return {
        "token_mean": xm.sum() / max(M.sum(), 1),
        "seq_mean_token_mean": (xm / np.maximum(M, 1)).sum() / S,
        "rollout_mean": (xm / np.maximum(rms, 1)).sum() / R,
        "seq_mean_token_sum": xm.sum() / S,
        "prompt_mean": per_g.sum() / G,
        "prompt_mean_by_rollouts": (per_g * grs).sum() / R,
        "constant": xm.sum() / (S * L),
    }[mode]


@settings(**SETTINGS)
@given(rows_st)
def test_shares_follow_the_formula_table(rows):
    lw = from_rows(_table(rows), full=True)
    ids = sorted({r for r, _, _ in rows})
    assert [x["rollout_id"] for x in lw["rollouts"]] == ids
    for mode in MODES:
        weights = np.array([_direct(rows, mode, r) for r in ids])
        total = weights.sum()
        got = np.array([x["share"][mode] for x in lw["rollouts"]])
        if total > 0:
            assert got == pytest.approx(weights / total, abs=1e-12)
            assert got.sum() == pytest.approx(1.0)
            if mode != "constant":
                assert lw["modes"][mode]["total_weight"] == pytest.approx(total)
        else:
            assert (got == 0).all()
    spreads = [x["spread"] for x in lw["rollouts"]]
    assert [m["spread"] for m in lw["movers"]] == sorted(spreads, reverse=True)[:MOVERS]


def test_modes_disagree_where_lengths_differ():
    # rollout 0: one long sample; rollout 1: two short ones, each its own prompt group
    rows = [(0, 0, [1] * 6), (1, 1, [1, 1]), (1, 1, [1])]
    lw = from_rows(_table(rows), full=True)
    share = {x["rollout_id"]: x["share"] for x in lw["rollouts"]}
    assert share[0]["token_mean"] == pytest.approx(6 / 9)
    assert share[0]["seq_mean_token_mean"] == pytest.approx(1 / 3)
    assert share[0]["rollout_mean"] == pytest.approx(1 / 2)
    assert share[0]["constant"] == share[0]["token_mean"] == share[0]["seq_mean_token_sum"]
    assert lw["movers"][0]["spread"] == pytest.approx(6 / 9 - 1 / 3)


def test_a_step_without_trained_tokens():
    lw = loss_weight([0, 1], [0, 0], [0, 0], [0, 0], [2, 2],
                     {"step_mask_sum": 0, "step_samples": 2, "step_rollouts": 2, "step_groups": 1}, full=True)
    assert all(v == 0 for x in lw["rollouts"] for v in x["share"].values())
    assert lw["modes"]["token_mean"]["total_weight"] == 0
