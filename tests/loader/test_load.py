"""The trainer-side loader (rollout_cli/load.py): exact equality with the Parquet rows, zero copy,
packing rules, slime's train_data form, the rank iterator, integrity checks and the CUDA path."""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_cli.run.convert import ConvertOptions, convert
from rollout_cli.core.errors import IntegrityError, UsageError
from rollout_cli.loader.load import PackedBatch, RankDataset, open_dataset

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SAMPLE_JSONL = os.path.join(REPO, "sample_data", "jsonl")

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


_OPTION_NAMES = {f.name for f in dataclasses.fields(ConvertOptions)}


def _convert(inputs, out, **kw) -> dict:
    """rollout_cli.run.convert.convert in this process (one worker: tiny inputs, no pool start-up)."""
    kw.setdefault("overwrite", True)
    if "workers" in _OPTION_NAMES:
        kw.setdefault("workers", 1)
    return convert([str(p) for p in inputs], str(out), ConvertOptions(**kw))


def write_jsonl(path, samples) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        for s in samples:
            f.write(orjson.dumps(s) + b"\n")
    return str(path)


def random_step(rng: np.random.Generator, *, n_groups: int, first_index: int = 0, log_probs: bool = True,
                teacher: bool = False, round_numbers: bool = False, null_index_p: float = 0.1,
                max_response: int = 20) -> list[dict]:
    """One step's samples: prompt groups of executions, some compact (1-3 siblings sharing an
    explicit rollout_id), random lengths, masks, statuses, removals, sources."""
    samples = []
    idx = first_index
    for g in range(n_groups):
        prompt = rng.integers(0, 50000, rng.integers(1, 12)).tolist()
        for _ in range(int(rng.integers(1, 4))):  # executions of this prompt
            compact = rng.random() < 0.4
            n_sib = int(rng.integers(1, 4)) if compact else 1
            rid = idx + 10_000 if compact else None
            for _ in range(n_sib):
                rl = int(rng.integers(0, max_response))
                mask = (rng.random(rl) < 0.8).astype(int).tolist()
                s = {
                    "group_index": g,
                    "index": None if rng.random() < null_index_p else idx,
                    "rollout_id": rid,
                    "tokens": prompt + rng.integers(0, 2**31 - 1, rl).tolist(),
                    "response_length": rl,
                    "reward": float(rng.integers(0, 3)) / 2,
                    "loss_mask": mask if rng.random() < 0.8 else None,
                    "remove_sample": bool(rng.random() < 0.1),
                    "status": str(rng.choice(["completed", "completed", "truncated", "aborted"])),
                    "metadata": {},
                }
                if log_probs:
                    s["rollout_log_probs"] = (-rng.random(rl)).astype(np.float32).tolist()
                if teacher:
                    s["teacher_log_probs"] = (-rng.random(rl)).astype(np.float32).tolist()
                if round_numbers:
                    s["metadata"]["round_number"] = int(rng.integers(0, 4))
                if rng.random() < 0.3:
                    s["metadata"]["source_name"] = str(rng.choice(["math", "code"]))
                if rng.random() < 0.2:
                    s["metadata"]["raw_reward"] = float(rng.random())
                samples.append(s)
                idx += 1
    return samples


def _split(flat: torch.Tensor, lengths) -> list[list]:
    return [t.tolist() for t in torch.split(flat, [int(x) for x in lengths])] if len(lengths) else []


def assert_batch_equals_parquet(batch: PackedBatch, parquet_path: str) -> None:
    """Every column the loader carries equals the Parquet rows, exactly."""
    t = pq.read_table(parquet_path)
    rows = t.to_pydict()
    n = t.num_rows
    assert batch.num_samples == n
    assert batch.tokens.dtype == torch.int32 and batch.cu_seqlens.dtype == torch.int32
    assert batch.loss_mask.dtype == torch.uint8
    assert batch.response_lengths.dtype == torch.int32 and batch.total_lengths.dtype == torch.int32
    assert batch.rewards.dtype == torch.float32 and batch.raw_rewards.dtype == torch.float64
    for name in ("rollout_ids", "sample_indices", "group_indices", "rollout_mask_sums", "group_mask_sums", "group_rollouts"):
        assert getattr(batch, name).dtype == torch.int64, name
    assert batch.truncated.dtype == torch.bool
    assert batch.group_mask_sums.tolist() == rows["group_mask_sum"]
    assert batch.group_rollouts.tolist() == rows["group_rollouts"]
    for name in ("step_mask_sum", "step_rollouts", "step_samples"):
        assert [getattr(batch, name)] * n == rows[name], name
    assert rows["step"] == [batch.step] * n
    cu = batch.cu_seqlens.tolist()
    assert [batch.tokens[cu[i]:cu[i + 1]].tolist() for i in range(n)] == rows["tokens"]
    assert _split(batch.tokens, batch.total_lengths.tolist()) == rows["tokens"]
    assert batch.response_lengths.tolist() == rows["response_length"]
    assert batch.total_lengths.tolist() == rows["total_length"]
    assert _split(batch.loss_mask, rows["response_length"]) == rows["loss_mask"]
    assert batch.rewards.tolist() == rows["reward"]
    assert batch.raw_rewards.tolist() == rows["raw_reward"]
    assert batch.truncated.tolist() == rows["truncated"]
    assert batch.truncated.tolist() == [s == "truncated" for s in rows["status"]]
    assert batch.remove_samples.dtype == torch.bool and batch.remove_samples.tolist() == rows["remove_sample"]
    for removed, mask in zip(rows["remove_sample"], rows["loss_mask"]):
        assert not removed or not any(mask)
    assert batch.rollout_mask_sums.tolist() == rows["rollout_mask_sum"]
    assert batch.rollout_ids.tolist() == rows["rollout_id"]
    assert batch.sample_indices.tolist() == [-1 if v is None else v for v in rows["sample_index"]]
    assert batch.group_indices.tolist() == [-1 if v is None else v for v in rows["group_index"]]
    for name in ("rollout_log_probs", "teacher_log_probs"):
        got = getattr(batch, name)
        want = rows[name]
        if all(v is None for v in want):
            assert got is None, name
        else:
            assert got.dtype == torch.float32
            assert got.numel() == batch.loss_mask.numel()
            parts = _split(got, rows["response_length"])
            for p, w in zip(parts, want):
                if w is None:
                    assert all(math.isnan(x) for x in p)
                else:
                    assert p == w, name
    if all(v is None for v in rows["round_number"]):
        assert batch.round_numbers is None
    else:
        assert batch.round_numbers.tolist() == [-1 if v is None else v for v in rows["round_number"]]
    if all(v is None for v in rows["source_name"]):
        assert batch.source_names is None
    else:
        assert batch.source_names == rows["source_name"]


def assert_packing_rules(b: PackedBatch) -> None:
    n = b.num_samples
    cu = b.cu_seqlens
    assert cu.dtype == torch.int32 and cu.dim() == 1 and cu.numel() == n + 1
    assert int(cu[0]) == 0 and int(cu[-1]) == b.tokens.numel()
    assert (cu[1:] - cu[:-1]).tolist() == b.total_lengths.tolist()
    assert b.tokens.dim() == 1 and b.loss_mask.dim() == 1
    assert int(b.response_lengths.sum()) == b.loss_mask.numel()
    assert bool((b.response_lengths <= b.total_lengths).all())
    rcu = b.response_cu_seqlens
    assert rcu.numel() == n + 1 and int(rcu[0]) == 0 and int(rcu[-1]) == b.loss_mask.numel()
    for name in ("rewards", "raw_rewards", "rollout_ids", "sample_indices", "group_indices", "rollout_mask_sums",
                 "truncated", "remove_samples", "total_lengths"):
        assert getattr(b, name).shape == (n,), name


def _all_shards(out: str, split: str = "train"):
    ds = open_dataset(out, split)
    for step in ds.steps:
        for shard in range(ds.num_shards):
            yield ds, step, shard


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    """Address ranges of the current process's mappings of `path` (Linux /proc/self/maps)."""
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() == real:
                lo, hi = parts[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


# ------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("load") / "out"
    _convert([SAMPLE_JSONL], out, shards=2)
    return str(out)


@pytest.fixture(scope="module")
def sample_out_nommap(tmp_path_factory):
    out = tmp_path_factory.mktemp("load") / "out_nommap"
    _convert([SAMPLE_JSONL], out, shards=3, mmap=False)
    return str(out)


@pytest.fixture(scope="module")
def random_out(tmp_path_factory):
    """Three random steps (one with teacher log-probs and round numbers, one without any
    log-probs), 3 shards, several row groups per Parquet shard."""
    d = tmp_path_factory.mktemp("rand")
    rng = np.random.default_rng(1234)
    write_jsonl(d / "in" / "4.jsonl", random_step(rng, n_groups=12, teacher=True, round_numbers=True))
    write_jsonl(d / "in" / "5.jsonl", random_step(rng, n_groups=9, log_probs=False))
    write_jsonl(d / "in" / "7.jsonl", random_step(rng, n_groups=15, first_index=500, max_response=1500))
    _convert([d / "in"], d / "out", shards=3, row_group_bytes=1 << 16)
    _convert([d / "in"], d / "out_nommap", shards=3, mmap=False, compression="none", row_group_bytes=1 << 16)
    return str(d / "out"), str(d / "out_nommap")


# ------------------------------------------------------------------------------------------
# equality with the Parquet rows
# ------------------------------------------------------------------------------------------


def _vm_flags(path: str) -> list[set[str]]:
    """VmFlags of each of the current process's mappings of `path` (Linux /proc/self/smaps)."""
    real = os.path.realpath(path)
    out, mine = [], False
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if "-" in parts[0] and len(parts) >= 5 and parts[1][:1] in "r-":
                mine = len(parts) == 6 and parts[5].strip() == real
            elif mine and line.startswith("VmFlags:"):
                out.append(set(line.split()[1:]))
    return out


def _first_shard(out):
    """(dataset, its first step, that step's first IPC copy, the batch loaded from it)."""
    ds = open_dataset(out)
    step = ds.steps[0]
    _, ipc = ds.paths(step, 0)
    return ds, step, ipc, ds.load(step, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("direct", ["1", "0"])
def test_the_mapped_file_is_read_in_huge_pages_where_shards_skip_the_cache(sample_out, monkeypatch, direct):
    # a shard not yet in the page cache (written with O_DIRECT, ROLLOUT_CLI_DIRECT_IO) is read by
    # the load's faults: asked before the first touch, they read it in large folios, which later
    # loads map in few faults; through the page cache, no advice
    monkeypatch.setenv("ROLLOUT_CLI_DIRECT_IO", direct)
    monkeypatch.setenv("ROLLOUT_CLI_STEP_CACHE", "0")  # a fresh mapping under this setting
    ds, step, ipc, b = _first_shard(sample_out)
    flags = _vm_flags(ipc)
    assert flags, "the IPC file is not memory-mapped"
    assert all(("hg" in f) == (direct == "1") for f in flags), flags
    assert int(b.tokens.sum()) == int(ds.load(step, 0).tokens.sum())


@pytest.mark.parametrize("split", ["train", "eval"])
def test_sample_data_equals_parquet_every_shard(sample_out, split):
    n = 0
    for ds, step, shard in _all_shards(sample_out, split):
        parquet, ipc = ds.paths(step, shard)
        assert ipc is not None and os.path.exists(ipc)
        b = ds.load(step, shard)
        assert (b.step, b.shard, b.split) == (step, shard, split)
        assert_batch_equals_parquet(b, parquet)
        assert_packing_rules(b)
        # the Parquet path gives the same tensors
        bp = ds.load(step, shard, source="parquet")
        assert_batch_equals_parquet(bp, parquet)
        n += b.num_samples
    m = open_dataset(sample_out).manifest
    assert n == sum(s["rows"] for s in m["steps"] if s["split"] == split)


def test_sample_data_without_ipc_copy(sample_out_nommap):
    assert not os.path.exists(os.path.join(sample_out_nommap, "mmap"))
    ds = open_dataset(sample_out_nommap)
    assert ds.num_shards == 3
    for _, step, shard in _all_shards(sample_out_nommap):
        parquet, ipc = ds.paths(step, shard)
        assert ipc is None
        b = ds.load(step, shard)
        assert_batch_equals_parquet(b, parquet)
        assert_packing_rules(b)
    with pytest.raises(UsageError, match="no Arrow IPC copy"):
        ds.load(ds.steps[0], 0, source="arrow")


def test_random_data_equals_parquet(random_out):
    out, out_nommap = random_out
    seen_opt = set()
    for o in (out, out_nommap):
        for ds, step, shard in _all_shards(o):
            parquet, _ = ds.paths(step, shard)
            b = ds.load(step, shard)
            assert_batch_equals_parquet(b, parquet)
            assert_packing_rules(b)
            seen_opt |= {k for k in ("rollout_log_probs", "teacher_log_probs", "round_numbers") if getattr(b, k) is not None}
            if o == out:
                assert_batch_equals_parquet(ds.load(step, shard, source="parquet"), parquet)
    assert seen_opt == {"rollout_log_probs", "teacher_log_probs", "round_numbers"}
    # the fixture really has several row groups per Parquet shard (the concatenating path)
    ds = open_dataset(out_nommap)
    assert max(pq.ParquetFile(ds.paths(s, r)[0]).num_row_groups for _, s, r in _all_shards(out_nommap)) > 1


def test_partial_log_probs_hold_nan(tmp_path):
    rng = np.random.default_rng(5)
    samples = random_step(rng, n_groups=6)
    for s in samples[::3]:
        s["rollout_log_probs"] = None
    write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    _convert([tmp_path / "in"], tmp_path / "out", shards=1)
    ds = open_dataset(tmp_path / "out")
    with pytest.warns(RuntimeWarning, match="rollout_log_probs"):
        b = ds.load(1, 0)
    assert_batch_equals_parquet(b, ds.paths(1, 0)[0])


def test_empty_shard(tmp_path):
    rng = np.random.default_rng(2)
    samples = random_step(rng, n_groups=1)
    write_jsonl(tmp_path / "in" / "3.jsonl", samples)
    n_rollouts = len({s["rollout_id"] if s["rollout_id"] is not None else ("x", i) for i, s in enumerate(samples)})
    _convert([tmp_path / "in"], tmp_path / "out", shards=n_rollouts + 2)
    ds = open_dataset(tmp_path / "out")
    sizes = []
    for shard in range(ds.num_shards):
        b = ds.load(3, shard)
        assert_packing_rules(b)
        assert_batch_equals_parquet(b, ds.paths(3, shard)[0])
        sizes.append(b.num_samples)
    assert 0 in sizes and sum(sizes) == len(samples)
    empty = ds.load(3, sizes.index(0))
    assert empty.cu_seqlens.tolist() == [0] and empty.tokens.numel() == 0
    assert empty.to_slime_train_data()["tokens"] == []


# ------------------------------------------------------------------------------------------
# zero copy, writability
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_tokens_are_a_view_of_the_mapped_file(sample_out):
    ds, step, ipc, b = _first_shard(sample_out)
    ranges = _mapped_ranges(ipc)
    assert ranges, "the IPC file is not memory-mapped"

    def inside(t: torch.Tensor) -> bool:
        p = t.data_ptr()
        return any(lo <= p and p + t.numel() * t.element_size() <= hi for lo, hi in ranges)

    for name in ("tokens", "cu_seqlens", "loss_mask", "rollout_log_probs", "response_lengths", "total_lengths",
                 "rewards", "raw_rewards", "rollout_ids", "rollout_mask_sums"):
        assert inside(getattr(b, name)), f"{name} was copied"
    # and it is the file's token buffer: same bytes as Arrow's own reading of the file
    col = pa.ipc.open_file(pa.memory_map(ipc)).read_all().column("tokens").combine_chunks()
    assert b.tokens.numpy().tobytes() == col.values.to_numpy().tobytes()


def test_writing_a_view_never_touches_the_file(sample_out, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out, out)
    ds = open_dataset(out)
    step = ds.steps[0]
    _, ipc = ds.paths(step, 0)
    before = hashlib.sha256(open(ipc, "rb").read()).hexdigest()
    b = ds.load(step, 0)
    first = int(b.tokens[0])
    b.tokens[0] = first + 1  # copy-on-write: private to this process
    b.loss_mask.zero_()
    assert int(b.tokens[0]) == first + 1
    assert hashlib.sha256(open(ipc, "rb").read()).hexdigest() == before
    assert int(ds.load(step, 0, verify=True).tokens[0]) == first


def test_to_cpu_and_pin_without_cuda(sample_out):
    ds = open_dataset(sample_out)
    b = ds.load(ds.steps[-1], 1)
    c = b.to("cpu")
    assert isinstance(c, PackedBatch) and c is not b
    assert c.device.type == "cpu"
    for name, t in b.tensors().items():
        assert torch.equal(t, c.tensors()[name]), name
    assert (c.step, c.shard, c.source_names) == (b.step, b.shard, b.source_names)
    assert c.to_slime_train_data().keys() == b.to_slime_train_data().keys()
    if not torch.cuda.is_available():
        with pytest.warns(RuntimeWarning, match="no CUDA"):
            p = ds.load(ds.steps[0], 0, pin_memory=True)
        assert not p.is_pinned()


def test_staging_layout_round_trips(random_out):
    """The one-buffer staging that pin_memory() and .to(cuda) use (run unpinned, on the CPU)."""
    ds = open_dataset(random_out[0])
    for _, step, shard in _all_shards(random_out[0]):
        b = ds.load(step, shard)
        s = b._stage(pin=False)
        assert s._staging is not None and s._staging.dim() == 1 and s._staging.dtype == torch.uint8
        assert s._staging.numel() >= b.nbytes
        for name, t in s.tensors().items():
            assert t.untyped_storage().data_ptr() == s._staging.untyped_storage().data_ptr(), name
        moved = s._views_of(s._staging.clone())  # what the device side does with its one copy
        for src in (s, moved):
            assert src.tensors().keys() == b.tensors().keys()
            for name, t in b.tensors().items():
                u = src.tensors()[name]
                assert u.dtype == t.dtype and u.shape == t.shape and torch.equal(u, t), name
        assert moved.to_slime_train_data()["rewards"] == b.to_slime_train_data()["rewards"]


# ------------------------------------------------------------------------------------------
# shards: every sample once, no rollout split
# ------------------------------------------------------------------------------------------


@st.composite
def dumps(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    n_steps = draw(st.integers(1, 3))
    groups = [draw(st.integers(1, 6)) for _ in range(n_steps)]
    shards = draw(st.integers(1, 5))
    keep_groups = draw(st.booleans())
    return seed, groups, shards, keep_groups


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dumps())
def test_every_sample_in_exactly_one_shard_and_no_rollout_split(case):
    seed, groups, shards, keep_groups = case
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        expected = {}
        first = 0
        for k, g in enumerate(groups):
            samples = random_step(rng, n_groups=g, first_index=first, null_index_p=0.0)
            first += len(samples)
            expected[k + 1] = samples
            write_jsonl(os.path.join(d, "in", f"{k + 1}.jsonl"), samples)
        _convert([os.path.join(d, "in")], os.path.join(d, "out"), shards=shards, keep_groups=keep_groups)
        ds = open_dataset(os.path.join(d, "out"))
        assert ds.steps == sorted(expected) and ds.num_shards == shards
        for step, samples in expected.items():
            where: dict[int, int] = {}
            rollout_shard: dict[int, int] = {}
            group_shards: dict[int, set] = {}
            for b in (ds.load(step, r) for r in range(shards)):
                assert_packing_rules(b)
                for idx, rid, gi in zip(b.sample_indices.tolist(), b.rollout_ids.tolist(), b.group_indices.tolist()):
                    assert idx not in where, f"sample {idx} in shards {where[idx]} and {b.shard}"
                    where[idx] = b.shard
                    assert rollout_shard.setdefault(rid, b.shard) == b.shard, f"rollout {rid} split across shards"
                    group_shards.setdefault(gi, set()).add(b.shard)
            assert sorted(where) == [s["index"] for s in samples]
            # siblings that share an explicit id all kept it and sit together
            for s in samples:
                if s["rollout_id"] is not None:
                    assert rollout_shard[s["rollout_id"]] == where[s["index"]]
            if keep_groups:
                assert all(len(v) == 1 for v in group_shards.values())


# ------------------------------------------------------------------------------------------
# rank iteration
# ------------------------------------------------------------------------------------------


def test_iter_rank_and_rank_dataset(sample_out):
    ds = open_dataset(sample_out)
    for rank in range(ds.num_shards):
        got = list(ds.iter_rank(rank))
        assert [b.step for b in got] == ds.steps
        assert all(b.shard == rank for b in got)
        rd = RankDataset(sample_out, rank)
        assert isinstance(rd, torch.utils.data.IterableDataset)
        assert len(rd) == len(ds.steps)
        assert [b.step for b in rd] == ds.steps
        loader = torch.utils.data.DataLoader(rd, batch_size=None)
        batches = list(loader)
        assert [b.step for b in batches] == ds.steps and all(isinstance(b, PackedBatch) for b in batches)
    with pytest.raises(UsageError, match="rank 2"):
        ds.iter_rank(2)
    with pytest.raises(UsageError, match="rank 5"):
        RankDataset(sample_out, 5)
    with pytest.raises(UsageError):
        ds.iter_rank(-1)
    assert [b.step for b in ds.iter_rank(0, steps=[3, 1])] == [3, 1]
    with pytest.raises(UsageError, match="no train step"):
        ds.load(99, 0)
    with pytest.raises(UsageError, match="split"):
        open_dataset(sample_out, split="trian")


def test_rank_dataset_with_workers_yields_each_step_once(sample_out):
    rd = RankDataset(sample_out, 1)
    loader = torch.utils.data.DataLoader(rd, batch_size=None, num_workers=2)
    got = list(loader)
    assert sorted(b.step for b in got) == open_dataset(sample_out).steps
    ref = {b.step: b for b in open_dataset(sample_out).iter_rank(1)}
    for b in got:
        for name, t in b.tensors().items():
            assert torch.equal(t, ref[b.step].tensors()[name]), name


# ------------------------------------------------------------------------------------------
# integrity
# ------------------------------------------------------------------------------------------


def _flip_byte(path: str, at: float = 0.5) -> None:
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        f.seek(int(size * at))
        b = f.read(1)
        f.seek(int(size * at))
        f.write(bytes([b[0] ^ 0x01]))


def test_verify_detects_a_corrupted_byte_in_the_ipc_copy(sample_out, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out, out)
    ds = open_dataset(out)
    step = ds.steps[1]
    ds.load(step, 1, verify=True)  # intact: passes
    _, ipc = ds.paths(step, 1)
    _flip_byte(ipc)
    with pytest.raises(IntegrityError, match=os.path.basename(ipc)) as e:
        ds.load(step, 1, verify=True)
    assert e.value.exit_code == 4
    # the Parquet copy is intact and still verifies
    ds.load(step, 1, verify=True, source="parquet")
    ds.load(step, 0, verify=True)


def test_verify_detects_a_corrupted_byte_in_parquet(sample_out_nommap, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out_nommap, out)
    ds = open_dataset(out)
    step = ds.steps[0]
    parquet, _ = ds.paths(step, 2)
    _flip_byte(parquet, 0.3)
    with pytest.raises(IntegrityError, match=os.path.basename(parquet)):
        ds.load(step, 2, verify=True)
    ds.load(step, 1, verify=True)


def test_verify_reads_sha256_and_blake3_manifests(sample_out, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out, out)
    mpath = out / "manifest.json"
    m = orjson.loads(mpath.read_bytes())
    for entry in m["steps"]:
        for info in entry["shards"]:
            for d, rel in ((info, info["path"]), (info.get("mmap"), (info.get("mmap") or {}).get("path"))):
                if d is None:
                    continue
                d.pop("blake3", None)
                d["sha256"] = hashlib.sha256((out / rel).read_bytes()).hexdigest()
    mpath.write_bytes(orjson.dumps(m))
    ds = open_dataset(out)
    step = ds.steps[0]
    ds.load(step, 0, verify=True)
    ds.load(step, 0, verify=True, source="parquet")
    _flip_byte(ds.paths(step, 0)[1])
    with pytest.raises(IntegrityError, match="sha256 mismatch"):
        ds.load(step, 0, verify=True)
    # no checksum at all: verify refuses rather than passing silently
    for entry in m["steps"]:
        for info in entry["shards"]:
            info.pop("sha256", None)
            (info.get("mmap") or {}).pop("sha256", None)
    mpath.write_bytes(orjson.dumps(m))
    with pytest.raises(IntegrityError, match="no checksum"):
        open_dataset(out).load(step, 1, verify=True)
    open_dataset(out).load(step, 1)


def test_size_mismatch_is_caught_without_verify(sample_out, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out, out)
    ds = open_dataset(out)
    _, ipc = ds.paths(ds.steps[0], 0)
    with open(ipc, "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(IntegrityError, match="bytes"):
        ds.load(ds.steps[0], 0)


def test_missing_ipc_copy_falls_back_to_parquet(sample_out, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out, out)
    shutil.rmtree(out / "mmap")
    ds = open_dataset(out)
    with pytest.warns(RuntimeWarning, match="missing"):
        b = ds.load(ds.steps[0], 0)
    assert_batch_equals_parquet(b, ds.paths(ds.steps[0], 0)[0])


def test_open_requires_a_manifest(tmp_path):
    with pytest.raises(IntegrityError, match="manifest"):
        open_dataset(tmp_path)


def test_manifest_paths_must_stay_inside_the_output(sample_out, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(sample_out, out)
    m = orjson.loads((out / "manifest.json").read_bytes())
    m["steps"][0]["shards"][0]["path"] = "../../etc/passwd"
    (out / "manifest.json").write_bytes(orjson.dumps(m))
    with pytest.raises(IntegrityError, match="outside"):
        open_dataset(out)


def test_import_rollout_cli_and_cli_do_not_import_torch_or_load():
    import subprocess

    code = ("import sys, rollout_cli, rollout_cli.cli.app; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'rollout_cli.loader.dataset' not in sys.modules, 'the loader imported'; "
            "rollout_cli.open_dataset; assert 'rollout_cli.loader.dataset' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ------------------------------------------------------------------------------------------
# slime's train_data form
# ------------------------------------------------------------------------------------------

sys.path.insert(0, HERE)
import slime_cases  # noqa: E402
import slime_reference as ref  # noqa: E402

_CORRECT = [name for name, c in slime_cases.CASES.items() if c["slime_groups_correctly"]]


def _slime_expected(case: dict) -> dict:
    a = case["args"]
    return ref.tensorize(ref.convert_samples_to_train_data(case["samples"], **a))


def _ours(case: dict, tmp_path, **extra) -> dict:
    a = case["args"]
    write_jsonl(tmp_path / "in" / "1.jsonl", case["samples"])
    _convert([tmp_path / "in" / "1.jsonl"], tmp_path / "out", n_samples_per_prompt=a["n_samples_per_prompt"],
             reward_key=a["reward_key"], advantage_estimator=a["advantage_estimator"], **extra)
    ds = open_dataset(tmp_path / "out")
    assert ds.steps == [1] and ds.num_shards == 1
    return ds.load(1, 0).to_slime_train_data()


def _compare(ours: dict, want: dict, case: dict, reward_tol: float) -> None:
    assert set(ours) - {"total_lengths"} == set(want) - {"metadata"}
    assert ours["total_lengths"] == [len(t) for t in want["tokens"]]
    for key in ("tokens", "loss_masks", "rollout_log_probs", "teacher_log_probs"):
        if key not in want:
            continue
        assert len(ours[key]) == len(want[key]), key
        for o, w in zip(ours[key], want[key]):
            assert o.dtype == w.dtype and o.is_contiguous(), key
            assert torch.equal(o, w), key
    assert ours["rollout_mask_sums"].dtype == torch.float32
    assert torch.equal(ours["rollout_mask_sums"], want["rollout_mask_sums"])
    for key in ("response_lengths", "truncated", "sample_indices", "rollout_ids", "round_number", "source_names"):
        if key in want:
            assert ours[key] == want[key], key
            assert [type(v) for v in ours[key]] == [type(v) for v in want[key]], key
    assert all(type(v) is float for v in ours["rewards"])
    assert ours["rewards"] == pytest.approx(want["rewards"], abs=reward_tol, rel=0)
    # raw_reward: slime falls back to the raw reward dict on samples without metadata raw_reward
    rk = case["args"]["reward_key"]
    want_raw = [w[rk] if isinstance(w, dict) else w for w in want["raw_reward"]]
    assert ours["raw_reward"] == want_raw


@pytest.mark.parametrize("name", _CORRECT)
def test_to_slime_train_data_equals_slime(name, tmp_path):
    case = slime_cases.fresh_case(name)
    want = _slime_expected(case)
    _compare(_ours(case, tmp_path), want, case, reward_tol=2e-6)


@pytest.mark.parametrize("name", _CORRECT)
def test_to_slime_train_data_equals_slime_exactly_in_compat_mode(name, tmp_path):
    case = slime_cases.fresh_case(name)
    want = _slime_expected(case)
    ours = _ours(case, tmp_path, slime_compat=True, rollout_batch_size=case["args"]["rollout_batch_size"])
    _compare(ours, want, case, reward_tol=0.0)
    assert ours["rewards"] == [float(np.float32(w)) for w in want["rewards"]]


# ------------------------------------------------------------------------------------------
# CUDA
# ------------------------------------------------------------------------------------------


@needs_cuda
def test_pinned_load(sample_out):
    ds = open_dataset(sample_out)
    b = ds.load(ds.steps[0], 0)
    p = ds.load(ds.steps[0], 0, pin_memory=True)
    assert p.is_pinned() and p.device.type == "cpu"
    assert all(t.is_pinned() for t in p.tensors().values() if t.numel())
    for name, t in b.tensors().items():
        assert torch.equal(t, p.tensors()[name]), name
    assert p.pin_memory() is p


@needs_cuda
@pytest.mark.parametrize("pinned_first", [False, True])
def test_to_cuda_non_blocking_values_equal(sample_out, pinned_first):
    ds = open_dataset(sample_out)
    for _, step, shard in _all_shards(sample_out):
        b = ds.load(step, shard)
        src = b.pin_memory() if pinned_first else b
        g = src.to("cuda", non_blocking=True)
        assert g.device.type == "cuda"
        assert all(t.device.type == "cuda" for t in g.tensors().values())
        torch.cuda.current_stream().synchronize()
        back = g.cpu()
        for name, t in b.tensors().items():
            assert torch.equal(t, back.tensors()[name]), name
            assert back.tensors()[name].dtype == t.dtype
        assert_packing_rules(g)
        d = g.to_slime_train_data()
        assert d["tokens"][0].device.type == "cuda" and d["tokens"][0].dtype == torch.int64


@needs_cuda
def test_load_to_cuda_and_rank_dataset_on_cuda(sample_out):
    ds = open_dataset(sample_out)
    g = ds.load(ds.steps[0], 1, device="cuda")
    assert g.device.type == "cuda"
    b = ds.load(ds.steps[0], 1)
    assert torch.equal(g.tokens.cpu(), b.tokens) and torch.equal(g.loss_mask.cpu(), b.loss_mask)
    got = list(RankDataset(sample_out, 0, device="cuda"))
    assert [x.step for x in got] == ds.steps and all(x.device.type == "cuda" for x in got)
    loader = torch.utils.data.DataLoader(RankDataset(sample_out, 0), batch_size=None, pin_memory=True)
    for x in loader:
        assert x.is_pinned()


def test_step_denominators_add_up_over_a_steps_shards(tmp_path):
    """Each rank's batch carries the whole step's totals: its local sums over all ranks equal them."""
    out = tmp_path / "out"
    convert([str(SAMPLE_JSONL)], str(out), ConvertOptions(shards=16, workers=1))  # some shards empty
    ds = open_dataset(str(out))
    assert any(ds.load(s, r).num_samples == 0 for s in ds.steps for r in range(16))
    for step in ds.steps:
        batches = [ds.load(step, r) for r in range(16)]
        mask, samples = sum(int(b.loss_mask.sum()) for b in batches), sum(b.num_samples for b in batches)
        rollouts = len({i for b in batches for i in b.rollout_ids.tolist()})
        for b in batches:
            assert (b.step_mask_sum, b.step_samples, b.step_rollouts) == (mask, samples, rollouts)


# ------------------------------------------------------------------------------------------
# an output on an object store
# ------------------------------------------------------------------------------------------


def test_an_object_store_output_loads_as_the_local_one(s3, sample_out):
    """open_dataset("s3://...") follows the manifest's generation paths and reads each file
    into memory once (nothing to map): the same PackedBatch as the local output of the same
    input, from the IPC copy and from Parquet; the tensors are writable, and verify=True
    checks the bytes read."""
    from rollout_cli.core import storage

    _convert([SAMPLE_JSONL], "s3://bkt/load-out", shards=2)
    remote, local = open_dataset("s3://bkt/load-out"), open_dataset(sample_out)
    assert remote.steps == local.steps and remote.num_shards == local.num_shards
    for split in ("train", "eval"):
        r_ds, l_ds = open_dataset("s3://bkt/load-out", split), open_dataset(sample_out, split)
        for step in l_ds.steps:
            for shard in range(l_ds.num_shards):
                want = l_ds.load(step, shard)
                for source in ("arrow", "parquet"):
                    got = r_ds.load(step, shard, verify=True, source=source)
                    assert (got.step, got.shard, got.split, got.num_samples) == (want.step, want.shard, want.split, want.num_samples)
                    assert got.tensors().keys() == want.tensors().keys()
                    for k, t in want.tensors().items():
                        assert torch.equal(got.tensors()[k], t), (split, step, shard, source, k)
    b = remote.load(remote.steps[0], 0)
    b.tokens[0] = -1  # a private copy: writing never reaches the object
    assert open_dataset("s3://bkt/load-out").load(remote.steps[0], 0).tokens[0] != -1
    # a changed object fails verify=True with the file named; a missing IPC copy falls back to Parquet
    parquet, ipc = remote.paths(remote.steps[0], 1)
    data = bytearray(storage.read_bytes(ipc))
    data[-100] ^= 0xFF
    storage.write_bytes(ipc, bytes(data))
    with pytest.raises(IntegrityError, match="blake3 mismatch"):
        remote.load(remote.steps[0], 1, verify=True)
    storage.delete_file(ipc)
    with pytest.warns(RuntimeWarning, match="reading Parquet instead"):
        assert remote.load(remote.steps[0], 1).num_samples == local.load(local.steps[0], 1).num_samples


# ------------------------------------------------------------------------------------------
# remove_sample
# ------------------------------------------------------------------------------------------


def _flagged(out: str, source: str = "auto") -> list[tuple[int, int, int]]:
    """(step, rollout id, loss-mask total) of every sample the loader says is removed."""
    found = []
    for ds, step, shard in _all_shards(out):
        b = ds.load(step, shard, source=source)
        masks = _split(b.loss_mask, b.response_lengths.tolist())
        for k in torch.nonzero(b.remove_samples).flatten().tolist():
            found.append((step, int(b.rollout_ids[k]), sum(masks[k])))
    return sorted(found)


def test_remove_samples_marks_the_removed_sample(sample_out):
    """sample_data step 1, sample 10 (rollout 10) has remove_sample: the loader says so, from the
    IPC copy and from Parquet, with its mask of zeros; a slice keeps the flags; slime's
    train_data has no such key (its loss_masks carry it, zeroed)."""
    for source in ("arrow", "parquet"):
        assert _flagged(sample_out, source) == [(1, 10, 0)], source
    ds = open_dataset(sample_out)
    b = next(ds.load(1, r) for r in range(ds.num_shards) if bool(ds.load(1, r).remove_samples.any()))
    k = int(torch.nonzero(b.remove_samples)[0])
    assert b.slice(k, k + 1).remove_samples.tolist() == [True]
    assert not b.slice(0, k).remove_samples.any()
    d = b.to_slime_train_data()
    assert "remove_sample" not in d and "remove_samples" not in d
    assert d["loss_masks"][k].tolist() == [0] * int(b.response_lengths[k])
    assert b._stage(pin=False).remove_samples.tolist() == b.remove_samples.tolist()


def test_an_output_of_schema_version_2_loads_with_no_removed_sample(sample_out, tmp_path):
    """An output written before the column: every sample's remove_samples is false (the masks
    were zeroed then too, so the train data is the same)."""
    from old_outputs import as_schema_version_2

    old = tmp_path / "old"
    shutil.copytree(sample_out, old)
    as_schema_version_2(old)
    for source in ("arrow", "parquet"):
        assert _flagged(str(old), source) == [], source
    for ds, step, shard in _all_shards(str(old)):
        new, was = open_dataset(sample_out).load(step, shard), ds.load(step, shard, verify=True)
        assert was.remove_samples.dtype == torch.bool and was.remove_samples.shape == (was.num_samples,)
        assert torch.equal(was.loss_mask, new.loss_mask)
        assert was.to_slime_train_data().keys() == new.to_slime_train_data().keys()


def test_a_shard_without_remove_sample_in_an_output_of_schema_version_3_is_refused(sample_out, tmp_path):
    """Only an output of schema version 2 may lack the column: in a version-3 output its absence
    is damage, named (IntegrityError, exit 4), not read as false."""
    from rollout_cli.core.schema import train_schema

    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    m = orjson.loads((out / "manifest.json").read_bytes())
    entry = next(s for s in m["steps"] if s["step"] == 1 and s["split"] == "train")["shards"][0]
    path = out / entry["path"]
    v2 = train_schema(False, 2)
    pq.write_table(pq.read_table(path).select(v2.names), path)
    entry["bytes"] = path.stat().st_size
    (out / "manifest.json").write_bytes(orjson.dumps(m))
    with pytest.raises(IntegrityError, match="column remove_sample is missing") as e:
        open_dataset(str(out)).load(1, 0, source="parquet")
    assert e.value.exit_code == 4
def test_without_torch_the_error_names_the_extra():
    """torch is an extra: the loader's import, with torch missing, says what to install."""
    import subprocess

    code = ("import sys; sys.modules['torch'] = None\n"
            "import rollout_cli\n"
            "try:\n"
            "    rollout_cli.open_dataset\n"
            "except ModuleNotFoundError as e:\n"
            "    print(e.name); print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr
    name, message = p.stdout.splitlines()
    assert name == "torch" and "pip install 'rollout-cli[torch]'" in message


def test_rewards_not_recorded_load_as_nan_and_a_schema_3_output_loads(tmp_path, monkeypatch):
    from lineage_cases import REWARDS, jsonl_without_rewards, write_unrecorded
    from old_outputs import schema_3_output

    jsonl_without_rewards(monkeypatch)
    write_unrecorded(tmp_path / "in")
    _convert([tmp_path / "in"], tmp_path / "out", shards=1)
    b = open_dataset(tmp_path / "out").load(1, 0)
    raw = b.raw_rewards.tolist()
    assert [math.isnan(x) for x in raw] == [r is None for r in REWARDS]
    assert [math.isnan(x) for x in b.rewards.tolist()] == [r is None for r in REWARDS]
    assert raw[3] == 1.0 and raw[5] == 0.0
    old = open_dataset(schema_3_output(tmp_path / "v3")).load(3, 0)  # written by schema version 3
    assert old.raw_rewards.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0] and not torch.isnan(old.rewards).any()
    assert old.remove_samples.tolist() == [False] * 5 + [True]
