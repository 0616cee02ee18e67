"""output/batches.py: `open_output(OUT).iter_batches`: a 4-shard output at any world size
under a token budget (every sample once, rollouts whole, denominators intact, the budget held,
equal micro-batch counts), exact resume from state_dict, the numpy backend without torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
from conftest import ROOT, copts, make_sample, write_jsonl

from rollout_cli.core.errors import IntegrityError, UsageError
from rollout_cli.output import gather, views
from rollout_cli.output.batches import Batch, BatchIterator
from rollout_cli.output.model import open_output
from rollout_cli.run.convert import convert

BUDGET = 160


def write_steps(folder, steps=(1, 2, 3), groups=12, seed=0) -> str:
    """JSONL steps of prompt groups; some rollouts compact (2-3 samples sharing a rollout_id)."""
    rng = np.random.default_rng(seed)
    for step in steps:
        samples, idx = [], 0
        for g in range(groups):
            prompt = int(rng.integers(1, 20))
            for _ in range(int(rng.integers(1, 4))):
                sib = int(rng.integers(2, 4)) if rng.random() < 0.3 else 1
                rid = 100_000 + idx if sib > 1 else None
                for _ in range(sib):
                    rl = int(rng.integers(1, 60))
                    mask = (rng.random(rl) < 0.8).astype(int).tolist()
                    samples.append(make_sample(index=idx, group_index=g, rollout_id=rid, response_length=rl,
                                               prompt_len=prompt, loss_mask=mask, reward=float(rng.random()),
                                               log_probs=True))
                    idx += 1
        write_jsonl(os.path.join(folder, f"{step}.jsonl"), samples)
    return str(folder)


@pytest.fixture(scope="module")
def out4(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches")
    inp = write_steps(root / "in")
    out = root / "out4"
    convert([inp], str(out), copts(shards=4, mmap=True, overwrite=True))
    return str(out)


@pytest.fixture(scope="module")
def out_groups(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches_groups")
    inp = write_steps(root / "in", steps=(1, 2), groups=10, seed=3)
    out = root / "out"
    convert([inp], str(out), copts(shards=3, mmap=True, overwrite=True, keep_groups=True))
    return str(out)


def step_rows(o, step) -> dict[int, dict]:
    """rollout_position -> the row, of every shard of the step."""
    t = pa.concat_tables(list(o.tables(step)))
    return {r["rollout_position"]: r for r in t.to_pylist()}


def stream(o, rank, **kw) -> list:
    return list(o.iter_batches(rank, **kw))


def key(b) -> tuple:
    return (b.step, b.micro_batch_index, b.rollout_positions.tolist(), b.tokens.tolist())


@pytest.mark.parametrize("world_size", [None, 1, 2, 3, 4, 8])
def test_every_sample_once_rollouts_whole_denominators_intact_under_a_budget(out4, world_size):
    o = open_output(out4)
    ws = world_size or o.num_shards()
    seen = defaultdict(list)  # (step, position) -> (rank, micro-batch)
    counts = defaultdict(set)  # step -> micro-batch counts of its ranks
    for rank in range(ws):
        for b in stream(o, rank, world_size=world_size, max_tokens=BUDGET):
            assert isinstance(b, Batch) and b.shard == rank
            counts[b.step].add(b.num_micro_batches)
            assert b.num_tokens <= BUDGET or b.num_samples == 1
            assert len(b.cu_seqlens) == b.num_samples + 1 and b.cu_seqlens[-1] == b.num_tokens
            st = o.step(b.step)
            for k in ("step_mask_sum", "step_rollouts", "step_samples", "step_groups"):
                assert getattr(b, k) == st.denominators[k]
            rows = step_rows(o, b.step)
            rcu = b.response_cu_seqlens
            for i, pos in enumerate(b.rollout_positions.tolist()):
                seen[(b.step, pos)].append((rank, b.micro_batch_index))
                row = rows[pos]
                assert b.tokens[b.cu_seqlens[i]:b.cu_seqlens[i + 1]].tolist() == row["tokens"]
                assert b.loss_mask[rcu[i]:rcu[i + 1]].tolist() == row["loss_mask"]
                assert b.rollout_ids[i] == row["rollout_id"] and b.rewards[i] == np.float32(row["reward"])
                # the whole rollout's and group's denominators, wherever the sample landed
                whole = sum(sum(r["loss_mask"]) for r in rows.values() if r["rollout_id"] == row["rollout_id"])
                assert b.rollout_mask_sums[i] == whole == row["rollout_mask_sum"]
                assert b.group_mask_sums[i] == row["group_mask_sum"] and b.group_rollouts[i] == row["group_rollouts"]
    for step in o.step_numbers():
        rows = step_rows(o, step)
        assert sorted(p for (s, p) in seen if s == step) == sorted(rows), "every sample exactly once"
        assert all(len(seen[(step, p)]) == 1 for p in rows)
        ranks = defaultdict(set)
        for p, row in rows.items():
            ranks[row["rollout_id"]].add(seen[(step, p)][0][0])
        assert all(len(r) == 1 for r in ranks.values()), "a rollout spans two ranks"
        assert len(counts[step]) == 1, f"step {step}: ranks have different micro-batch counts {counts[step]}"


def test_keep_groups_output_keeps_prompt_groups_on_one_rank(out_groups):
    o = open_output(out_groups)
    for ws in (2, 5):
        owner = {}
        for rank in range(ws):
            for b in stream(o, rank, world_size=ws, max_tokens=BUDGET):
                for g in b.group_indices.tolist():
                    assert owner.setdefault((b.step, g), rank) == rank


def test_the_native_layout_without_a_budget_is_the_shard_mapped(out4):
    o = open_output(out4)
    for rank in range(4):
        batches = stream(o, rank)
        assert [b.step for b in batches] == o.step_numbers()
        for b in batches:
            t = o.table(b.step, rank)
            assert b.num_samples == t.num_rows and b.num_micro_batches == 1
            assert b.rollout_positions.tolist() == t.column("rollout_position").to_pylist()
            if b.num_tokens:
                assert not b.tokens.flags.owndata and isinstance(b.tokens.base, (memoryview, np.ndarray, object))
                assert b.tokens.flags.writeable  # the private copy-on-write map


def test_every_column_reaches_the_batch(out4):
    o = open_output(out4)
    b = next(iter(o.iter_batches(0, world_size=3, max_tokens=BUDGET)))
    t = step_rows(o, b.step)
    rows = [t[p] for p in b.rollout_positions.tolist()]
    assert b.status == [r["status"] for r in rows]  # an extra column, by its own name
    assert b.selected_reward.tolist() == [r["selected_reward"] for r in rows]
    assert b.extras["rollout_top_p_token_ids"] is None  # null on every row
    assert b.rollout_log_probs is not None and len(b.rollout_log_probs) == len(b.loss_mask)


def test_a_new_column_appears_without_a_loader_change(out4):
    """A list<string> column (as weight_versions is) becomes Python lists, a nullable float
    NaN where null, a numeric list a Ragged of flat values and offsets."""
    o = open_output(out4)
    t = o.table(1, 0)
    n = t.num_rows
    t = t.append_column("policy_tags", pa.array([["v1", "v2"] if i % 2 else None for i in range(n)], pa.list_(pa.string())))
    t = t.append_column("score", pa.array([None if i % 3 == 0 else float(i) for i in range(n)], pa.float64()))
    t = t.append_column("ids", pa.array([list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())))
    arrays = views.unpack(t.combine_chunks().to_batches()[0], None, "x", step=1, schema_version=o.schema_version)
    b = Batch.from_arrays(arrays)
    assert b.policy_tags == [["v1", "v2"] if i % 2 else None for i in range(n)]
    assert np.isnan(b.score[0]) and b.score[1] == 1.0
    assert isinstance(b.ids, views.Ragged) and b.ids.tolist() == [list(range(i % 4)) for i in range(n)]
    assert b.ids.slice(1, 3).tolist() == [[0], [0, 1]]


def test_state_dict_resumes_exactly_at_every_position(out4):
    o = open_output(out4)
    kw = dict(world_size=3, max_tokens=BUDGET)
    ref = [key(b) for b in stream(o, 1, **kw)]
    assert len(ref) > len(o.step_numbers())  # micro-batches, not just steps
    for k in range(len(ref) + 1):
        it = o.iter_batches(1, **kw)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))  # plain JSON
        fresh = o.iter_batches(1, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fresh.load_state_dict(state)
        assert [key(b) for b in fresh] == ref[k:], k


def test_a_state_of_another_world_size_resumes_at_the_next_step_boundary(out4):
    o = open_output(out4)
    it = o.iter_batches(0, world_size=2, max_tokens=BUDGET)
    first = next(it)
    assert first.num_micro_batches > 1  # mid-step now
    state = it.state_dict()
    assert state["step"] == first.step and state["micro_batch"] == 1
    other = o.iter_batches(0, world_size=3, max_tokens=BUDGET)
    with pytest.warns(RuntimeWarning, match=f"the rest of step {first.step} .* next step boundary"):
        other.load_state_dict(state)
    nxt = next(other)
    assert nxt.step == o.step_numbers()[1] and nxt.micro_batch_index == 0
    # at a step boundary: the same step, nothing skipped, nothing said
    it = o.iter_batches(0, world_size=2, max_tokens=BUDGET)
    for b in it:
        if b.micro_batch_index == b.num_micro_batches - 1:
            break
    other = o.iter_batches(0, world_size=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        other.load_state_dict(it.state_dict())
    assert next(other).step == o.step_numbers()[1]


def test_a_state_of_another_output_or_not_a_state_is_refused(out4, out_groups):
    state = open_output(out_groups).iter_batches(0).state_dict()
    with pytest.raises(UsageError, match="another output"):
        open_output(out4).iter_batches(0).load_state_dict(state)
    with pytest.raises(UsageError, match="not a batch iterator state"):
        open_output(out4).iter_batches(0).load_state_dict({"step": 1})


def test_arguments_are_checked(out4):
    o = open_output(out4)
    with pytest.raises(UsageError, match="rank 4"):
        o.iter_batches(4)
    assert isinstance(o.iter_batches(7, world_size=8), BatchIterator)
    for bad in ({"world_size": 0}, {"max_tokens": -1}, {"max_tokens": 1.5}):
        with pytest.raises(UsageError):
            o.iter_batches(0, **bad)
    with pytest.raises(UsageError, match="open_dataset"):
        o.iter_batches(0, backend="torch")
    with pytest.raises(UsageError, match="no train step"):
        o.iter_batches(0, steps=[99])


def test_a_rank_with_fewer_samples_than_the_count_gets_empty_micro_batches(tmp_path):
    inp = tmp_path / "in"
    compact = [make_sample(index=i, group_index=0, rollout_id=7, response_length=5) for i in range(3)]
    write_jsonl(inp / "1.jsonl", compact + [make_sample(index=3, group_index=1, response_length=2)])
    out = tmp_path / "out"
    convert([str(inp)], str(out), copts(shards=1, mmap=True))
    o = open_output(out)
    got = [stream(o, r, world_size=3, max_tokens=4) for r in range(3)]
    # the 3-sample rollout (over the budget each) makes 3 micro-batches; every rank has 3
    assert [len(g) for g in got] == [3, 3, 3]
    assert sorted([b.num_samples for b in g] for g in got) == [[0, 0, 0], [1, 0, 0], [1, 1, 1]]
    for b in (b for g in got for b in g if b.num_samples == 0):
        assert b.num_tokens == 0 and b.cu_seqlens.tolist() == [0] and b.loss_mask.sum() == 0
        assert b.step_mask_sum == o.step(1).denominators["step_mask_sum"] > 0
        assert b.step_rollouts == 2


def test_verify_checks_each_shard_read(out4, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(out4, out)
    _, ipc = open_output(out).paths(1, 2)
    data = bytearray(open(ipc, "rb").read())
    data[len(data) // 2] ^= 0xFF  # in the rows' buffers
    open(ipc, "wb").write(bytes(data))
    assert len(stream(open_output(out), 0, world_size=2)) == 3  # not verified: the flip goes unseen here
    with pytest.raises(IntegrityError, match="mismatch"):
        stream(open_output(out), 0, world_size=2, verify=True)


def test_the_numpy_backend_works_without_torch(out4):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, json\n"
            "from rollout_cli import open_output\n"
            f"it = open_output({out4!r}).iter_batches(1, world_size=3, max_tokens={BUDGET})\n"
            "b = next(it)\n"
            "assert type(b.tokens) is np.ndarray and type(b.cu_seqlens) is np.ndarray\n"
            "assert sys.modules['torch'] is None\n"
            "print(json.dumps([b.rollout_positions.tolist(), it.state_dict()]))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT),
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    positions, state = json.loads(p.stdout)
    it = open_output(out4).iter_batches(1, world_size=3, max_tokens=BUDGET)
    assert next(it).rollout_positions.tolist() == positions and it.state_dict() == state  # same in every process


def test_take_ordered_fills_what_one_shard_lacks_and_copies_once(out4):
    o = open_output(out4)
    t0, t1 = o.table(1, 0), o.table(1, 1)
    assert t0.num_rows >= 3 and t1.num_rows >= 2
    t0 = t0.set_column(t0.schema.get_field_index("rollout_log_probs"), "rollout_log_probs",
                       pa.nulls(t0.num_rows, pa.list_(pa.float32())))
    t0 = t0.set_column(t0.schema.get_field_index("source_name"), "source_name", pa.nulls(t0.num_rows, pa.string()))
    names = [f"s{i}" for i in range(t1.num_rows)]
    t1 = t1.set_column(t1.schema.get_field_index("source_name"), "source_name", pa.array(names, pa.string()))
    a0, a1 = (views.unpack(t.combine_chunks().to_batches()[0], None, "x", step=1, schema_version=o.schema_version)
              for t in (t0, t1))
    assert a0["rollout_log_probs"] is None and a0["source_names"] is None
    out = gather.take_ordered([a0, a1], np.array([0, 0, 1]), np.array([0, 2, 1]))
    b = Batch.from_arrays(out)
    rcu = b.response_cu_seqlens
    assert np.isnan(b.rollout_log_probs[:rcu[2]]).all() and rcu[2] == a0["response_lengths"][[0, 2]].sum()
    r1 = gather.slice_rows(a1, 1, 2)
    assert b.rollout_log_probs[rcu[2]:].tolist() == r1["rollout_log_probs"].tolist()
    assert b.source_names == [None, None, "s1"]
    assert b.tokens.tolist() == (gather.slice_rows(a0, 0, 1)["tokens"].tolist() + gather.slice_rows(a0, 2, 3)["tokens"].tolist()
                                 + r1["tokens"].tolist())
    assert b.cu_seqlens[-1] == len(b.tokens) and b.status == [a0["extras"]["status"][0], a0["extras"]["status"][2],
                                                             a1["extras"]["status"][1]]
    # one run of one shard: views, no copy
    run = gather.take_ordered([a0, a1], np.array([1, 1]), np.array([0, 1]))
    assert np.shares_memory(run["tokens"], a1["tokens"]) and not np.shares_memory(out["tokens"], a1["tokens"])


def test_the_parquet_shards_give_the_same_batches(out4):
    o = open_output(out4)
    for kw in (dict(world_size=3, max_tokens=BUDGET), dict()):
        arrow = [key(b) for b in o.iter_batches(1, **kw)]
        parquet = [key(b) for b in o.iter_batches(1, source="parquet", **kw)]
        assert arrow == parquet and arrow


def test_take_ordered_gives_the_rows_in_the_order_asked(out4):
    o = open_output(out4)
    t0, t1 = o.table(1, 0), o.table(1, 1)
    t0 = t0.set_column(t0.schema.get_field_index("rollout_log_probs"), "rollout_log_probs",
                       pa.nulls(t0.num_rows, pa.list_(pa.float32())))
    a0, a1 = (views.unpack(t.combine_chunks().to_batches()[0], None, "x", step=1, schema_version=o.schema_version)
              for t in (t0, t1))
    which, local = np.array([1, 0, 0, 1, 0]), np.array([1, 2, 0, 0, 1])
    got = Batch.from_arrays(gather.take_ordered([a0, a1], which, local))
    want = [Batch.from_arrays(gather.slice_rows((a0, a1)[w], r, r + 1)) for w, r in zip(which, local)]
    assert got.tokens.tolist() == [t for b in want for t in b.tokens.tolist()]
    assert got.cu_seqlens.tolist() == np.concatenate([[0], np.cumsum([b.num_tokens for b in want])]).tolist()
    lp = got.rollout_log_probs
    assert np.array_equal(lp, np.concatenate([b.rollout_log_probs if b.rollout_log_probs is not None
                                              else np.full(len(b.loss_mask), np.nan, np.float32) for b in want]),
                          equal_nan=True)
    assert np.isnan(lp).sum() == sum(int(a0["response_lengths"][r]) for w, r in zip(which, local) if w == 0)
    for name in ("loss_mask", "rollout_ids", "rollout_positions", "rewards", "truncated"):
        assert getattr(got, name).tolist() == [x for b in want for x in getattr(b, name).tolist()], name
    assert got.status == [b.status[0] for b in want]
    # one run of one shard's rows: views, no copy
    run = gather.take_ordered([a0, a1], np.array([1, 1]), np.array([0, 1]))
    assert np.shares_memory(run["tokens"], a1["tokens"])


def test_a_ranks_rows_of_a_step_are_gathered_once_and_served_as_views(out4):
    seen = defaultdict(set)
    n = 0
    for b in open_output(out4).iter_batches(1, world_size=3, max_tokens=BUDGET):
        if b.num_samples:
            for name in ("tokens", "loss_mask", "rollout_ids"):
                assert getattr(b, name).base is not None, name
                seen[(b.step, name)].add(id(getattr(b, name).base))
            n += 1
    assert n > len(seen) // 3  # several micro-batches a step
    assert all(len(bases) == 1 for bases in seen.values())  # each field of a step: one array, sliced


def test_the_data_path_does_not_import_pandas(out4):
    code = ("import sys\n"
            "from rollout_cli import open_output\n"
            f"o = open_output({out4!r})\n"
            "for kw in (dict(world_size=3, max_tokens=" + str(BUDGET) + "), dict(max_tokens=" + str(BUDGET) + "), {}):\n"
            "    for r in range(kw.get('world_size', 4)):\n"
            "        for b in o.iter_batches(r, **kw):\n"
            "            pass\n"
            "print('pandas' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT),
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
