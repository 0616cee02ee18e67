"""Stage 5 (plan.py): Karmarkar-Karp shard planning; every row once, rollouts whole, balance."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import copts, make_sample, read_rows, shard_paths, write_jsonl
from rollout_cli.run.convert import convert
from rollout_cli.pipeline.plan import karmarkar_karp, plan_shards


def _realistic(seed: int, n_samples: int = 500):
    """~n samples with lognormal token lengths of mean 2000, in compact rollouts of 1-4 samples."""
    rng = np.random.default_rng(seed)
    sigma = 1.0
    mu = np.log(2000) - sigma**2 / 2  # mean of lognormal = exp(mu + sigma^2/2) = 2000
    lengths = np.maximum(1, rng.lognormal(mu, sigma, n_samples).round()).astype(np.int64)
    sizes = []
    while sum(sizes) < n_samples:
        sizes.append(int(rng.integers(1, 5)))
    sizes[-1] -= sum(sizes) - n_samples
    rollout = np.repeat(np.arange(len(sizes)), sizes)
    # explicit-looking rollout ids (not 0..k-1) to make sure labels are not used as indices
    labels = (rollout * 37 + 11).astype(np.int64)
    return labels, lengths


def _check_partition(plan, units, tokens, k):
    assert len(plan.rows) == k
    allrows = np.concatenate(plan.rows) if plan.rows else np.zeros(0)
    assert sorted(allrows.tolist()) == list(range(len(units)))  # every row exactly once
    shard_of = {}
    for s, rows in enumerate(plan.rows):
        assert rows.tolist() == sorted(rows.tolist())  # input order within a shard
        for r in rows.tolist():
            shard_of.setdefault(int(units[r]), set()).add(s)
    assert all(len(v) == 1 for v in shard_of.values())  # units never split
    assert plan.tokens == [int(tokens[r].sum()) for r in plan.rows]
    assert sum(plan.tokens) == int(tokens.sum())


@pytest.mark.parametrize("seed", range(5))
def test_realistic_balance_within_1_02(seed):
    units, tokens = _realistic(seed)
    plan = plan_shards(units, tokens, 4)
    _check_partition(plan, units, tokens, 4)
    ratio = max(plan.tokens) / (sum(plan.tokens) / 4)
    assert ratio <= 1.02, (ratio, plan.tokens)
    assert plan.imbalance == pytest.approx(ratio)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
def test_every_row_once_and_rollouts_whole(k):
    units, tokens = _realistic(99, 200)
    _check_partition(plan_shards(units, tokens, k), units, tokens, k)


def test_more_shards_than_units():
    units = np.array([5, 5, 9], dtype=np.int64)
    tokens = np.array([10, 20, 30], dtype=np.int64)
    plan = plan_shards(units, tokens, 4)
    _check_partition(plan, units, tokens, 4)
    assert sorted(plan.tokens) == [0, 0, 30, 30]


def test_empty_step():
    plan = plan_shards(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 3)
    assert len(plan.rows) == 3 and all(len(r) == 0 for r in plan.rows)
    assert plan.tokens == [0, 0, 0]
    assert plan.imbalance == 1.0


def test_deterministic():
    units, tokens = _realistic(7)
    a, b = plan_shards(units, tokens, 4), plan_shards(units, tokens, 4)
    assert [r.tolist() for r in a.rows] == [r.tolist() for r in b.rows]


def test_karmarkar_karp_partitions():
    w = [8, 7, 6, 5, 4]
    parts = karmarkar_karp(w, 2)
    assert sorted(i for p in parts for i in p) == list(range(5))
    sums = sorted(sum(w[i] for i in p) for p in parts)
    # largest differencing by hand: 8-7=1, 6-5=1, 4-1=3, 3-1=2 -> sums differ by 2
    assert sums == [14, 16]
    assert karmarkar_karp(w, 1) == [[0, 1, 2, 3, 4]]


def test_karmarkar_karp_beats_round_robin():
    rng = np.random.default_rng(3)
    w = rng.integers(1, 10_000, 300).tolist()
    parts = karmarkar_karp(w, 8)
    sums = [sum(w[i] for i in p) for p in parts]
    rr = [sum(w[i::8]) for i in range(8)]
    assert max(sums) - min(sums) <= max(rr) - min(rr)
    assert max(sums) / (sum(w) / 8) <= 1.01


# ------------------------------------------------------------------------------ through convert


def _step_samples():
    """3 prompt groups; compact rollouts inside them; group 0's rollouts are short, group 2's long."""
    samples = []
    idx = 0
    spec = [  # (group, rollout id or None, response_length)
        (0, 50, 10), (0, 50, 11), (0, None, 12), (0, None, 13),
        (1, 60, 30), (1, 61, 31), (1, 61, 5), (1, None, 7),
        (2, None, 40), (2, 70, 41), (2, 70, 42), (2, 70, 3),
    ]
    for g, rid, rl in spec:
        samples.append(make_sample(index=idx, group_index=g, rollout_id=rid, response_length=rl,
                                   reward=float(idx % 2)))
        idx += 1
    return samples


def test_convert_shards_never_split_a_rollout(tmp_path):
    write_jsonl(tmp_path / "in" / "2.jsonl", _step_samples())
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(shards=3))
    paths = shard_paths(tmp_path / "out")
    assert [p.name for p in paths] == [f"shard-{r:05d}-of-00003.parquet" for r in range(3)]
    where = {}
    import pyarrow.parquet as pq

    seen = []
    for s, p in enumerate(paths):
        for row in pq.read_table(p).to_pylist():
            where.setdefault(row["rollout_id"], set()).add(s)
            seen.append(row["sample_index"])
    assert sorted(seen) == list(range(12))
    assert all(len(v) == 1 for v in where.values())


def test_convert_keep_groups(tmp_path):
    import pyarrow.parquet as pq

    write_jsonl(tmp_path / "in" / "2.jsonl", _step_samples())
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(shards=3, keep_groups=True))
    groups, rollouts = {}, {}
    for s, p in enumerate(shard_paths(tmp_path / "out")):
        for row in pq.read_table(p).to_pylist():
            groups.setdefault(row["group_index"], set()).add(s)
            rollouts.setdefault(row["rollout_id"], set()).add(s)
    assert set(groups) == {0, 1, 2}
    assert all(len(v) == 1 for v in groups.values())
    assert all(len(v) == 1 for v in rollouts.values())


def test_convert_keep_groups_joins_groups_linked_by_a_rollout(tmp_path):
    import pyarrow.parquet as pq

    # under --rollout-id-scope step, rollout 9 spans groups 0 and 1: both must share a shard
    samples = [make_sample(index=i, group_index=i // 2, rollout_id=(9 if i in (1, 2) else None), response_length=5)
               for i in range(8)]
    write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    convert([str(tmp_path / "in")], str(tmp_path / "out"),
            copts(shards=4, keep_groups=True, rollout_id_scope="step"))
    shard_of_group = {}
    for s, p in enumerate(shard_paths(tmp_path / "out")):
        for row in pq.read_table(p).to_pylist():
            shard_of_group.setdefault(row["group_index"], set()).add(s)
    assert all(len(v) == 1 for v in shard_of_group.values())
    assert shard_of_group[0] == shard_of_group[1]
    assert len(read_rows(tmp_path / "out")) == 8
