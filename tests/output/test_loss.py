"""output/loss.py: `token_weights` of the numpy Batch and the torch PackedBatch.

The property: for each aggregation, Σ token_weights × per-token loss over every micro-batch of
every rank of a step equals the step's loss computed here straight from the shards' rows (its
definition in docs/loss.md, not the weights' formula), at world sizes 1-16, with and without a
token budget, with the stream cut and resumed from a state_dict anywhere."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import write_jsonl
from rollout_cli.output import loss
from rollout_cli.output.batches import Batch
from rollout_cli.output.model import open_output
from rollout_cli.run.convert import ConvertOptions, convert

CONSTANT = 512.0
AGGREGATIONS = [("token_mean", None), ("sample_mean", None), ("rollout_mean", None), ("group_mean", None),
                ("constant", CONSTANT)]
SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=15,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def per_token_loss(position: int, offset: np.ndarray) -> np.ndarray:
    """A made-up loss of each token of the sample at `position` of its step (by its offset in
    the sample), the same wherever the sample lands."""
    return 0.1 + ((position * 31 + offset * 7) % 13) / 13.0


def _dump(rng: np.random.Generator, step: int, groups: int, first: int) -> list[dict]:
    """Prompt groups of 1-5 samples; compact rollouts (siblings sharing an explicit id); masked
    spans; removed samples; a zero-length response now and then."""
    out, index, next_id = [], first, 100 * step
    for g in range(groups):
        compact = rng.random() < 0.5
        left, rid = 0, None
        prompt = rng.integers(5, 1000, int(rng.integers(1, 20))).tolist()
        for _ in range(int(rng.integers(1, 6))):
            if compact and left == 0:
                left, next_id = int(rng.integers(1, 4)), next_id + 1
            if compact:
                rid, left = next_id, left - 1
            resp = int(rng.integers(0, 200)) if rng.random() < 0.9 else int(rng.integers(300, 600))
            mask = (rng.random(resp) < 0.8).astype(int).tolist()
            out.append({"group_index": g, "index": index, "rollout_id": rid, "status": "completed", "metadata": {},
                        "tokens": prompt + rng.integers(5, 1000, resp).tolist(), "response_length": resp,
                        "reward": float(rng.integers(0, 2)), "loss_mask": mask,
                        "remove_sample": bool(rng.random() < 0.08)})
            index += 1
    return out


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("loss")
    rng = np.random.default_rng(48)
    first = 0
    for step, groups in {1: 14, 2: 3}.items():
        samples = _dump(rng, step, groups, first)
        first += len(samples)
        write_jsonl(root / "dumps" / f"{step}.jsonl", samples)
    convert([str(root / "dumps")], str(root / "out"), ConvertOptions(overwrite=True, workers=1, shards=4))
    return str(root / "out")


@pytest.fixture(scope="module")
def truth(out) -> dict[int, dict[str, float]]:
    """Per step, the step's loss under each aggregation, from the shards' rows by definition."""
    o = open_output(out)
    result = {}
    for step in o.step_numbers():
        rows = []
        for sh in o.step(step).shards:
            t = pq.read_table(f"{out}/{sh.path}").to_pylist()
            rows += t
        xm, m = {}, {}
        for r in rows:
            mask = np.asarray(r["loss_mask"], dtype=np.float64)
            resp, total = r["response_length"], r["total_length"]
            x = per_token_loss(r["rollout_position"], np.arange(total - resp, total))
            xm[r["rollout_position"]], m[r["rollout_position"]] = float((x * mask).sum()), float(mask.sum())
        by_rollout, by_group = defaultdict(list), defaultdict(list)
        for r in rows:
            by_rollout[r["rollout_id"]].append(r["rollout_position"])
            by_group[r["group_index"]].append(r["rollout_position"])

        def mean_of(parts):
            vals = [sum(xm[p] for p in ps) / sum(m[p] for p in ps) if sum(m[p] for p in ps) else 0.0
                    for ps in parts]
            return sum(vals) / len(vals)

        result[step] = {
            "token_mean": sum(xm.values()) / sum(m.values()),
            "sample_mean": mean_of([[p] for p in xm]),
            "rollout_mean": mean_of(by_rollout.values()),
            "group_mean": mean_of(by_group.values()),
            "constant": sum(xm.values()) / (CONSTANT * len(rows)),
        }
    return result


def batch_loss(batch, aggregation: str, constant) -> float:
    """Σ token_weights × per-token loss over the batch."""
    w = np.asarray(batch.token_weights(aggregation, constant), dtype=np.float64)
    assert w.shape == (batch.num_tokens,) and (w >= 0).all()
    cu = np.asarray(batch.cu_seqlens, dtype=np.int64)
    x = np.zeros(batch.num_tokens)
    for i, pos in enumerate(np.asarray(batch.rollout_positions).tolist()):
        x[cu[i]:cu[i + 1]] = per_token_loss(pos, np.arange(cu[i + 1] - cu[i]))
    return float((w * x).sum())


@settings(**SETTINGS)
@given(world=st.integers(1, 16), budget=st.one_of(st.none(), st.integers(32, 3000)), cut=st.integers(0, 12),
       torch_backend=st.booleans())
def test_micro_batched_losses_add_up_to_the_step_loss(out, truth, world, budget, cut, torch_backend):
    o = open_output(out)
    if torch_backend:
        from rollout_cli.loader import open_dataset
        make = lambda r: open_dataset(o).iter_batches(r, world_size=world, max_tokens=budget)  # noqa: E731
    else:
        make = lambda r: o.iter_batches(r, world_size=world, max_tokens=budget)  # noqa: E731
    got = defaultdict(float)
    for rank in range(world):
        it = make(rank)
        batches = []
        for k, b in enumerate(it):
            batches.append(b)
            if k == cut:  # the stream cut here: a fresh iterator resumes from its state_dict
                state = it.state_dict()
                it = make(rank)
                it.load_state_dict(state)
                batches += list(it)
                break
        for b in batches:
            for agg, c in AGGREGATIONS:
                got[(b.step, agg)] += batch_loss(b, agg, c)
    for step, want in truth.items():
        for agg, _ in AGGREGATIONS:
            assert math.isclose(got[(step, agg)], want[agg], rel_tol=1e-5, abs_tol=1e-9), (step, agg)


def test_prompt_and_masked_tokens_weigh_nothing():
    # two samples: prompt 2 + response 3 (mask 1 0 1), prompt 1 + response 2 (mask 1 1); one
    # rollout each, one group, a step of these two samples only
    b = Batch(tokens=np.arange(8, dtype=np.int32), cu_seqlens=np.array([0, 5, 8], np.int32),
              loss_mask=np.array([1, 0, 1, 1, 1], np.uint8), response_lengths=np.array([3, 2], np.int32),
              total_lengths=np.array([5, 3], np.int32), rewards=np.zeros(2, np.float32), raw_rewards=np.zeros(2),
              rollout_ids=np.array([0, 1]), sample_indices=np.array([0, 1]), group_indices=np.array([0, 0]),
              rollout_mask_sums=np.array([2, 2]), group_mask_sums=np.array([4, 4]), group_rollouts=np.array([2, 2]),
              truncated=np.zeros(2, bool), remove_samples=np.zeros(2, bool), rollout_log_probs=None,
              teacher_log_probs=None, step_mask_sum=4, step_rollouts=2, step_samples=2, step_groups=1)
    q = 0.25
    assert b.token_weights("token_mean").tolist() == [0, 0, q, 0, q, 0, q, q]
    assert b.token_weights("sample_mean").tolist() == [0, 0, q, 0, q, 0, q, q]
    assert b.token_weights("group_mean").tolist() == [0, 0, q, 0, q, 0, q, q]
    assert b.token_weights("constant", 2).tolist() == [0, 0, q, 0, q, 0, q, q]
    b.rollout_mask_sums = np.array([2, 0])  # a divisor 0 gives weight 0
    assert b.token_weights("rollout_mean").tolist() == [0, 0, q, 0, q, 0, 0, 0]
    assert b.token_weights("token_mean").dtype == np.float32


def test_an_empty_micro_batch_has_no_weights_and_bad_arguments_are_refused():
    z = np.zeros(0, np.int64)
    b = Batch(tokens=z.astype(np.int32), cu_seqlens=np.zeros(1, np.int32), loss_mask=z.astype(np.uint8),
              response_lengths=z.astype(np.int32), total_lengths=z.astype(np.int32), rewards=z.astype(np.float32),
              raw_rewards=z.astype(float), rollout_ids=z, sample_indices=z, group_indices=z, rollout_mask_sums=z,
              group_mask_sums=z, group_rollouts=z, truncated=z.astype(bool), remove_samples=z.astype(bool),
              rollout_log_probs=None, teacher_log_probs=None, step_mask_sum=9, step_samples=3)
    assert b.token_weights("sample_mean").shape == (0,)
    with pytest.raises(ValueError, match="token_mean, sample_mean"):
        b.token_weights("seq_mean")
    with pytest.raises(ValueError, match="positive number"):
        b.token_weights("constant")
    with pytest.raises(ValueError, match="only the 'constant'"):
        b.token_weights("token_mean", 3)


def test_torch_and_numpy_give_the_same_weights(out):
    torch = pytest.importorskip("torch")
    from rollout_cli.loader import open_dataset

    o = open_output(out)
    for a, b in zip(o.iter_batches(1, world_size=3, max_tokens=400),
                    open_dataset(o).iter_batches(1, world_size=3, max_tokens=400)):
        for agg, c in AGGREGATIONS:
            t = b.token_weights(agg, c)
            assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device == b.tokens.device
            assert np.array_equal(t.numpy(), a.token_weights(agg, c))


def test_the_aggregations_are_the_documented_ones():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "loss.md").read_text()
    for agg in loss.AGGREGATIONS:
        assert f"`{agg}`" in doc
