"""The trainer side: open a converted output directory and hand out packed batches.

    ds = open_dataset("out/")                   # reads and validates out/manifest.json
    batch = ds.load(step, shard=rank)           # zero-copy CPU views of the shard
    batch = batch.to("cuda")                    # one pinned staging copy, one async H2D copy
    train_data = batch.to_slime_train_data()    # slime's tensorize_rollout_data_for_training form

Fast path: each shard's uncompressed Arrow IPC copy (`OUT/mmap/...arrow`, written by `convert`
unless `--no-mmap`) is memory-mapped and every tensor is a view of the mapped file: opening a
shard costs microseconds, whatever its size, and the bytes are read from the page cache on first
touch (the pinned staging copy in `.to("cuda")`, or whatever the trainer does with them).  The
mapping is private copy-on-write (`mmap.ACCESS_COPY`), so the tensors are writable and writing
into them never reaches the file.

Fallback: when the IPC copy is absent, the Parquet shard is read with
`pq.read_table(memory_map=True)`: every column is decoded (and decompressed) into fresh memory,
which runs at about 0.1x memcpy speed (0.6-1 GB/s of list payload on a 2-vCPU machine), plus one concatenation
when the shard has several row groups.  The tensors are then views of that decoded Arrow memory.

On an object store (`s3://` OUT) nothing can be mapped: a shard's IPC copy (or Parquet file) is
read into private memory in one request and the tensors are views of it; the paths are the
manifest's (core/layout.py's generation folders).

Nothing here loops in Python over tokens (or over samples, except to build the Python lists of
`to_slime_train_data()`).
"""
from __future__ import annotations

import mmap
import os
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ModuleNotFoundError as e:  # torch is an extra: say which
    if e.name != "torch":
        raise
    raise ModuleNotFoundError("the loader (open_dataset, PackedBatch, RankDataset) hands out torch tensors and needs "
                              "torch: pip install 'rollout-cli[torch]'", name="torch") from None

from ..core import layout, slime_keys as K, storage
from ..output import manifest as manifest_mod
from ..core import hashing
from ..core.arrays import numpy_dtype
from ..core.errors import IntegrityError, UsageError
from ..pipeline.fields import STEP_FIELDS
from ..core.schema import COLUMNS_SINCE, SCHEDULE_COLUMNS, train_schema

__all__ = ["open_dataset", "Dataset", "PackedBatch", "RankDataset", "SPLITS"]

# split name -> top folder of its Parquet shards
SPLITS = layout.SPLIT_TREES  # split -> the folder its shards live in
SOURCES = ("auto", "arrow", "parquet")

# The columns the loader reads; their Arrow types come from the train-row schema.
_NEEDED = ("step", "rollout_id", "sample_index", "group_index", "tokens", "response_length", "total_length",
           "loss_mask", "reward", "raw_reward", "truncated", "rollout_mask_sum", "group_mask_sum", "group_rollouts",
           "step_mask_sum", "step_rollouts", "step_samples", "step_groups", "rollout_log_probs",
           "teacher_log_probs", "round_number", "source_name")
_COLUMNS: dict[str, pa.DataType] = {f.name: f.type for f in train_schema() if f.name in _NEEDED}
assert len(_COLUMNS) == len(_NEEDED), "the train-row schema lost a column the loader reads"
# Read where present (outputs written before they existed lack them); set under --schedule slime.
_SCHEDULE = tuple(f.name for f in SCHEDULE_COLUMNS)
# Columns of later schema versions (core.schema.COLUMNS_SINCE): read where present, their
# default where an older output lacks them.
_LATER: dict[str, pa.DataType] = {f.name: f.type for f in train_schema() if f.name in COLUMNS_SINCE}


_STAGING_ALIGN = 64


# ------------------------------------------------------------------------------------------
# PackedBatch
# ------------------------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class PackedBatch:
    """One shard of one step, packed: flat token and response streams plus per-sample arrays.

    Layout (n = num_samples):
      tokens            int32 [sum(total_lengths)]   every sample's prompt+response ids, concatenated
      cu_seqlens        int32 [n+1]                  sample i is tokens[cu_seqlens[i]:cu_seqlens[i+1]]
      loss_mask         uint8 [sum(response_lengths)] every sample's mask, concatenated
      rollout_log_probs, teacher_log_probs
                        float32, same layout as loss_mask, or None when the shard has none
                        (samples that lack them, in a shard where others have them, hold NaN)
      response_lengths, total_lengths                int32 [n]
      rewards float32, raw_rewards float64, rollout_ids int64, rollout_mask_sums int64,
      group_mask_sums, group_rollouts int64 (of the sample's prompt group),
      sample_indices / group_indices int64 (-1 where null), truncated bool,
      remove_samples bool (slime's remove_sample: the sample's loss mask is all zeros; false
                        for every sample of an output written before the column, schema 2),
      round_numbers int64 (-1 where null) or None      [n]
      source_names      list[str] or None (not a tensor)
      step_mask_sum, step_rollouts, step_samples, step_groups   int: the whole step's loss-mask
                        total, rollouts, samples and prompt groups (over all shards; README
                        "Loss denominators")

    On CPU after `load()` the tensors are views of the memory-mapped shard (no copy).
    """

    tokens: torch.Tensor
    cu_seqlens: torch.Tensor
    loss_mask: torch.Tensor
    response_lengths: torch.Tensor
    total_lengths: torch.Tensor
    rewards: torch.Tensor
    raw_rewards: torch.Tensor
    rollout_ids: torch.Tensor
    sample_indices: torch.Tensor
    group_indices: torch.Tensor
    rollout_mask_sums: torch.Tensor
    group_mask_sums: torch.Tensor
    group_rollouts: torch.Tensor
    truncated: torch.Tensor
    remove_samples: torch.Tensor
    rollout_log_probs: torch.Tensor | None
    teacher_log_probs: torch.Tensor | None
    round_numbers: torch.Tensor | None = None
    source_names: list[str] | None = None
    step: int = 0
    shard: int = 0
    split: str = "train"
    step_mask_sum: int = 0
    step_rollouts: int = 0
    step_samples: int = 0
    step_groups: int = 0
    # --schedule slime shards: per sample, its position in the step (slime's partition entry),
    # optimizer step and micro-batch within the rank's optimizer step (int64 each); else None
    rollout_positions: torch.Tensor | None = None
    optimizer_steps: torch.Tensor | None = None
    micro_batch_ids: torch.Tensor | None = None
    # the step's schedule record from the manifest, and a reader of its whole-batch lists
    schedule: dict | None = field(default=None, repr=False)
    _whole_batch: Any = field(default=None, repr=False)
    # the single pinned buffer every tensor is a view of, after pin_memory() (not public)
    _staging: torch.Tensor | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        opt = [k for k in ("rollout_log_probs", "teacher_log_probs", "round_numbers") if getattr(self, k) is not None]
        return (f"PackedBatch(split={self.split!r}, step={self.step}, shard={self.shard}, samples={self.num_samples}, "
                f"tokens={self.num_tokens}, response_tokens={int(self.loss_mask.numel())}, device={self.device}, "
                f"pinned={self._staging is not None}, optional={opt})")

    # -- shape ------------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return int(self.response_lengths.numel())

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.numel())

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    @property
    def response_cu_seqlens(self) -> torch.Tensor:
        """int32 [n+1] offsets of each sample's response span in loss_mask / log-probs."""
        out = torch.zeros(self.num_samples + 1, dtype=torch.int32, device=self.response_lengths.device)
        torch.cumsum(self.response_lengths, 0, out=out[1:])
        return out

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the batch by field name (None fields left out)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "_staging" and isinstance(v, torch.Tensor):
                out[f.name] = v
        return out

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    # -- moving -----------------------------------------------------------------------------
    def pin_memory(self) -> "PackedBatch":
        """A copy whose tensors are views of ONE page-locked host buffer (a single allocation,
        one memcpy per tensor).  Without CUDA it warns and returns self, as DataLoader does.
        Also what `DataLoader(pin_memory=True)` calls."""
        if self.device.type != "cpu":
            raise ValueError(f"pin_memory: the batch is on {self.device}, not the CPU")
        if self._staging is not None:
            return self
        if not torch.cuda.is_available():
            warnings.warn("pin_memory: no CUDA device, so the batch is left unpinned", RuntimeWarning, stacklevel=2)
            return self
        return self._stage(pin=True)

    def _stage(self, pin: bool) -> "PackedBatch":
        """Copy every tensor into one (pinned) host buffer; the result's tensors are views of it."""
        items = self.tensors()
        layout, total = _staging_layout(items)
        staging = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=pin)
        views = {}
        for name, t in items.items():
            off, nbytes = layout[name]
            v = staging[off:off + nbytes].view(t.dtype)
            v.copy_(t)
            views[name] = v
        return replace(self, _staging=staging, **views)

    def _views_of(self, buffer: torch.Tensor) -> "PackedBatch":
        """A batch whose tensors are views of `buffer`, a copy of this batch's staging buffer
        (on any device)."""
        layout, _ = _staging_layout(self.tensors())
        views = {name: buffer[off:off + nbytes].view(getattr(self, name).dtype) for name, (off, nbytes) in layout.items()}
        return replace(self, _staging=None, **views)

    def is_pinned(self) -> bool:
        if self.device.type != "cpu":
            return False
        if self._staging is not None:
            return self._staging.is_pinned()
        return all(t.is_pinned() for t in self.tensors().values())

    def to(self, device: str | torch.device, non_blocking: bool = True) -> "PackedBatch":
        """A new PackedBatch on `device`.

        CPU -> CUDA: pins once (one page-locked buffer holding every tensor, unless the batch is
        pinned already), then ONE `.to(device, non_blocking=True)` of that buffer; the device
        tensors are views of the one device buffer.  The copy is queued on the current stream:
        work on that stream sees the data, other streams must synchronise with it first.
        To the CPU the copy is always blocking (a non-blocking D2H copy would hand out memory
        that is not yet written).  Same device: returns a batch sharing the tensors.
        """
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if self.device == device:
            return replace(self)
        if device.type == "cpu":
            return self._map(lambda t: t.to(device))
        src = self.pin_memory() if (self.device.type == "cpu" and device.type == "cuda") else self
        if src._staging is not None:
            return src._views_of(src._staging.to(device, non_blocking=non_blocking))
        return src._map(lambda t: t.to(device, non_blocking=non_blocking))

    def cpu(self) -> "PackedBatch":
        return self.to("cpu")

    def cuda(self, device: int | None = None, non_blocking: bool = True) -> "PackedBatch":
        return self.to(torch.device("cuda", device) if device is not None else "cuda", non_blocking=non_blocking)

    def _map(self, fn) -> "PackedBatch":
        return replace(self, _staging=None, **{k: fn(v) for k, v in self.tensors().items()})

    # -- micro-batches ----------------------------------------------------------------------
    @property
    def scheduled(self) -> bool:
        """True for a shard written by `convert --schedule slime`."""
        return self.micro_batch_ids is not None

    def micro_batch_bounds(self) -> list[tuple[int, int]]:
        """(first, end) sample ranges of the micro-batches, in order (runs of equal
        (optimizer_step, micro_batch)). UsageError on a shard not written by --schedule slime."""
        if not self.scheduled:
            raise UsageError(f"{self.split} step {self.step} shard {self.shard}: no micro-batch layout "
                             "(converted with --schedule balanced; reconvert with --schedule slime)")
        n = self.num_samples
        if not n:
            return []
        key = self.optimizer_steps.cpu().to(torch.int64) * (1 << 32) + self.micro_batch_ids.cpu().to(torch.int64)
        change = torch.nonzero(key[1:] != key[:-1]).flatten() + 1
        cuts = [0] + change.tolist() + [n]
        return list(zip(cuts[:-1], cuts[1:]))

    def slice(self, start: int, end: int) -> "PackedBatch":
        """Samples [start, end) as a PackedBatch of views (no copy)."""
        cu = self.cu_seqlens
        rcu = self.response_cu_seqlens
        t0, t1 = int(cu[start]), int(cu[end])
        r0, r1 = int(rcu[start]), int(rcu[end])

        def per(t):
            return None if t is None else t[start:end]

        def resp(t):
            return None if t is None else t[r0:r1]

        return replace(
            self, _staging=None, tokens=self.tokens[t0:t1], cu_seqlens=cu[start:end + 1] - cu[start],
            loss_mask=resp(self.loss_mask), rollout_log_probs=resp(self.rollout_log_probs),
            teacher_log_probs=resp(self.teacher_log_probs),
            source_names=None if self.source_names is None else self.source_names[start:end],
            **{k: per(getattr(self, k)) for k in ("response_lengths", "total_lengths", "rewards", "raw_rewards",
                                                  "rollout_ids", "sample_indices", "group_indices",
                                                  "rollout_mask_sums", "truncated", "remove_samples", "round_numbers",
                                                  "rollout_positions", "optimizer_steps", "micro_batch_ids")},
        )

    def micro_batches(self) -> Iterator["PackedBatch"]:
        """One PackedBatch (views) per micro-batch, in the order slime's trainer runs them."""
        for a, b in self.micro_batch_bounds():
            yield self.slice(a, b)

    # -- slime ------------------------------------------------------------------------------
    def to_slime_train_data(self) -> dict[str, Any]:
        """This shard as slime's train_data dict after `tensorize_rollout_data_for_training`
        (slime-spec section 6): tokens list of int64 tensors, loss_masks list of int32 tensors,
        rollout/teacher log-probs lists of float32 tensors (when present), rollout_mask_sums one
        float32 tensor, and plain Python lists for response_lengths, rewards, raw_reward,
        truncated (0/1), sample_indices (None where null), rollout_ids, total_lengths,
        round_number and source_names (when present).  Keys in slime's order.

        The per-sample tensors are views of one tensor per key (contiguous each), on the batch's
        device.  raw_reward is always a float (slime's own fallback can put a reward dict there).
        The loss denominators (group_mask_sums, step_mask_sum, ...) are not slime keys (its
        trainer reads none of them): take them from the batch's own fields.
        """
        n = self.num_samples
        tot = self.total_lengths.tolist()
        resp = self.response_lengths.tolist()
        valid_idx = self.sample_indices >= 0
        d: dict[str, Any] = {
            K.TOKENS: list(torch.split(self.tokens.to(torch.int64), tot)) if n else [],
            K.RESPONSE_LENGTHS: resp,
            K.REWARDS: self.rewards.tolist(),
            K.RAW_REWARD: self.raw_rewards.tolist(),
            K.TRUNCATED: self.truncated.to(torch.int64).tolist(),
            K.SAMPLE_INDICES: [v if ok else None for v, ok in zip(self.sample_indices.tolist(), valid_idx.tolist())],
            K.ROLLOUT_IDS: self.rollout_ids.tolist(),
            K.LOSS_MASKS: list(torch.split(self.loss_mask.to(torch.int32), resp)) if n else [],
            K.ROLLOUT_MASK_SUMS: self.rollout_mask_sums.to(torch.float32),
        }
        if self.round_numbers is not None:
            d[K.ROUND_NUMBER] = [v if v >= 0 else None for v in self.round_numbers.tolist()]
        if self.rollout_log_probs is not None:
            d[K.ROLLOUT_LOG_PROBS] = list(torch.split(self.rollout_log_probs, resp)) if n else []
        if self.teacher_log_probs is not None:
            d[K.TEACHER_LOG_PROBS] = list(torch.split(self.teacher_log_probs, resp)) if n else []
        if self.source_names is not None:
            d[K.SOURCE_NAMES] = list(self.source_names)
        d[K.TOTAL_LENGTHS] = tot
        if self.scheduled:
            return self._with_schedule(d)
        return d

    def _with_schedule(self, d: dict[str, Any]) -> dict[str, Any]:
        """Rank r's payload as slime's trainer receives it (slime-spec section 6): the per-sample
        keys, then `partition`, the whole step's raw_reward and total_lengths (in position order,
        dropped trailing samples included), and the schedule keys."""
        if self.schedule is None or self._whole_batch is None:
            raise UsageError(f"{self.split} step {self.step} shard {self.shard}: the step's schedule record is "
                             "missing; load it through open_dataset(...).load()")
        raw_reward, total_lengths = self._whole_batch()
        d.pop(K.TOTAL_LENGTHS)
        d[K.PARTITION] = self.rollout_positions.tolist()
        d[K.RAW_REWARD] = raw_reward
        d[K.TOTAL_LENGTHS] = total_lengths
        d[K.GLOBAL_BATCH_SIZES] = list(self.schedule["global_batch_sizes"])
        d[K.NUM_MICROBATCHES] = list(self.schedule["num_microbatches"])
        d["micro_batch_indices"] = [list(range(a, b)) for a, b in self.micro_batch_bounds()]
        return d


def _staging_layout(items: dict[str, torch.Tensor]) -> tuple[dict[str, tuple[int, int]], int]:
    layout = {}
    off = 0
    for name, t in items.items():
        off = -(-off // _STAGING_ALIGN) * _STAGING_ALIGN
        nbytes = t.numel() * t.element_size()
        layout[name] = (off, nbytes)
        off += nbytes
    return layout, off


# ------------------------------------------------------------------------------------------
# Arrow buffers -> numpy views -> tensors
# ------------------------------------------------------------------------------------------


def _large_folios(mm: mmap.mmap) -> None:
    """Ask, before the first touch, that the file's pages be read in huge pages (Linux's
    MADV_HUGEPAGE; a no-op where transparent huge pages are off or the file system has no large
    folios). A shard whose pages are not cached yet (the converter writes it straight to the
    device, or it was copied in or evicted) is otherwise read into the page cache 4 KiB at a
    time by the faults of the first load, and every later load of it maps those small pages
    one fault per 64 KiB: 478 faults for a 37 MB shard, against 20 for pages cached in large
    folios, and a load + staging copy at 0.5 instead of 0.7 of a memcpy."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            mm.madvise(advice)
        except OSError:  # a kernel without transparent huge pages refuses the advice
            pass


class _Region:
    """A private (copy-on-write) mapping of a whole file; views into it keep it alive."""

    def __init__(self, path: str):
        if storage.is_uri(path):  # an object store has nothing to map: the file is read into memory once
            with storage.open_read(path, seekable=True) as f:
                self.mm = bytearray(f.size())
                if f.readinto(self.mm) != len(self.mm):
                    raise OSError(f"{path}: short read")
        else:
            with open(path, "rb") as f:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            _large_folios(self.mm)
        self.buffer = pa.py_buffer(self.mm)
        self.address = self.buffer.address
        self.size = self.buffer.size

    def owns(self, buf: pa.Buffer) -> bool:
        return self.address <= buf.address and buf.address + buf.size <= self.address + self.size


class _Reader:
    """Builds numpy views (then tensors) of one record batch's buffers."""

    def __init__(self, batch: pa.RecordBatch, region: _Region | None, path: str):
        self.batch = batch
        self.region = region
        self.path = path
        self.n = batch.num_rows

    def fail(self, msg: str) -> IntegrityError:
        return IntegrityError(f"{self.path}: {msg}", [{"path": self.path, "reason": msg}])

    def col(self, name: str) -> pa.Array:
        return self.batch.column(name)

    def _view(self, buf: pa.Buffer | None, dtype, start: int, count: int, what: str) -> np.ndarray:
        dtype = np.dtype(dtype)
        if count == 0:
            return np.empty(0, dtype)
        nbytes = count * dtype.itemsize
        off = start * dtype.itemsize
        if buf is None or start < 0 or off + nbytes > buf.size:
            raise self.fail(f"{what}: buffer too short for {count} values at {start}")
        if self.region is not None and self.region.owns(buf):
            return np.frombuffer(self.region.mm, dtype, count, offset=buf.address - self.region.address + off)
        a = np.frombuffer(buf, dtype, count, offset=off)
        return a if a.flags.writeable else a.copy()

    def validity(self, arr: pa.Array) -> np.ndarray | None:
        """bool [n], True where valid; None when the array has no nulls."""
        if arr.null_count == 0:
            return None
        bm = arr.buffers()[0]
        if bm is None:  # the null type: everything is null
            return np.zeros(len(arr), dtype=bool)
        nbytes = (arr.offset + len(arr) + 7) // 8
        bits = np.unpackbits(np.frombuffer(bm, np.uint8, nbytes), bitorder="little")
        return bits[arr.offset:arr.offset + len(arr)].astype(bool)

    def fixed(self, name: str, null_fill=None) -> np.ndarray:
        arr = self.col(name)
        dtype = numpy_dtype(arr.type)
        values = self._view(arr.buffers()[1], dtype, arr.offset, len(arr), name)
        valid = self.validity(arr)
        if valid is None:
            return values
        if null_fill is None:
            raise self.fail(f"{name}: {len(arr) - int(valid.sum())} null value(s) in a non-null column")
        return np.where(valid, values, np.asarray(null_fill, dtype=dtype))

    def bools(self, name: str) -> np.ndarray:
        arr = self.col(name)
        if arr.null_count:
            raise self.fail(f"{name}: {arr.null_count} null value(s) in a non-null column")
        buf = arr.buffers()[1]
        nbytes = (arr.offset + len(arr) + 7) // 8
        if len(arr) == 0:
            return np.zeros(0, dtype=bool)
        bits = np.unpackbits(np.frombuffer(buf, np.uint8, nbytes), bitorder="little")
        return bits[arr.offset:arr.offset + len(arr)].astype(bool)

    def list_parts(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(offsets [n+1] as stored, the values they index (the child's values buffer from the
        child's own offset), validity or None)."""
        arr = self.col(name)
        child = arr.values
        if child.null_count:
            raise self.fail(f"{name}: null values inside the lists")
        odt = np.int64 if pa.types.is_large_list(arr.type) else np.int32
        offsets = self._view(arr.buffers()[1], odt, arr.offset, len(arr) + 1, name) if len(arr) else np.zeros(1, odt)
        end = int(offsets[-1]) if len(offsets) else 0
        vdt = numpy_dtype(child.type)
        values = self._view(child.buffers()[1], vdt, child.offset, end, name) if end else np.empty(0, vdt)
        if len(offsets) and (int(offsets[0]) < 0 or (len(offsets) > 1 and (np.diff(offsets) < 0).any())):
            raise self.fail(f"{name}: list offsets are not non-decreasing from >= 0")
        return offsets, values, self.validity(arr)

    def flat(self, name: str, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A non-null list column as (flat values view, offsets rebased to 0 as int32);
        checks each list's length against `lengths`."""
        offsets, values, valid = self.list_parts(name)
        if valid is not None:
            raise self.fail(f"{name}: {int((~valid).sum())} null list(s) in a non-null column")
        lens = np.diff(offsets)
        if not np.array_equal(lens, lengths):
            i = int(np.flatnonzero(lens != lengths)[0])
            raise self.fail(f"{name}: row {i} has {int(lens[i])} values, expected {int(lengths[i])}")
        lo, hi = int(offsets[0]), int(offsets[-1])
        flat = values[lo:hi]
        if lo == 0 and offsets.dtype == np.int32:
            cu = offsets
        else:
            if hi - lo > np.iinfo(np.int32).max:
                raise self.fail(f"{name}: {hi - lo} values do not fit int32 offsets")
            cu = (offsets - lo).astype(np.int32)
        return flat, cu

    def optional_flat(self, name: str, lengths: np.ndarray, resp_cu: np.ndarray) -> np.ndarray | None:
        """A nullable list column laid out like loss_mask: None when every row is null; a view
        when no row is; else a new array with NaN over the null rows' spans."""
        arr = self.col(name)
        if len(arr) == 0 or arr.null_count == len(arr):
            return None
        if arr.null_count == 0:
            return self.flat(name, lengths)[0]
        offsets, values, valid = self.list_parts(name)
        lens = np.diff(offsets)
        bad = valid & (lens != lengths)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self.fail(f"{name}: row {i} has {int(lens[i])} values, expected {int(lengths[i])}")
        warnings.warn(f"{self.path}: {name}: {len(arr) - int(valid.sum())} of {len(arr)} samples lack it; "
                      "their spans hold NaN", RuntimeWarning, stacklevel=5)
        out = np.full(int(resp_cu[-1]), np.nan, dtype=values.dtype)
        rows = np.flatnonzero(valid)
        L = lengths[rows].astype(np.int64)
        total = int(L.sum())
        if total:
            within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(L) - L, L)
            out[np.repeat(resp_cu[rows].astype(np.int64), L) + within] = values[np.repeat(offsets[rows].astype(np.int64), L) + within]
        return out


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a)


def _check_schema(batch: pa.RecordBatch, path: str, schema_version: int) -> None:
    names = set(batch.schema.names)
    for name, typ in _COLUMNS.items():
        if name not in names:
            raise IntegrityError(f"{path}: column {name} is missing", [{"path": path, "reason": f"missing column {name}"}])
        got = batch.schema.field(name).type
        ok = got == typ
        if not ok and pa.types.is_list(typ) and pa.types.is_large_list(got):
            ok = got.value_type == typ.value_type
        if not ok and name == "source_name":
            ok = pa.types.is_string(got) or pa.types.is_large_string(got) or pa.types.is_dictionary(got)
        if not ok:
            raise IntegrityError(f"{path}: column {name}: expected {typ}, got {got}",
                                 [{"path": path, "reason": f"column {name}: expected {typ}, got {got}"}])
    for name, typ in _LATER.items():
        if name not in names and COLUMNS_SINCE[name] <= schema_version:
            raise IntegrityError(f"{path}: column {name} is missing (the manifest's schema version {schema_version} has it)",
                                 [{"path": path, "reason": f"missing column {name}"}])
        if name in names and batch.schema.field(name).type != typ:
            got = batch.schema.field(name).type
            raise IntegrityError(f"{path}: column {name}: expected {typ}, got {got}",
                                 [{"path": path, "reason": f"column {name}: expected {typ}, got {got}"}])


def _pack(batch: pa.RecordBatch, region: _Region | None, path: str, *, step: int, shard: int, split: str,
          schema_version: int) -> PackedBatch:
    _check_schema(batch, path, schema_version)
    r = _Reader(batch, region, path)
    steps = r.fixed("step")
    if len(steps) and (steps.min() != step or steps.max() != step):
        raise r.fail(f"step column holds {int(steps.min())}..{int(steps.max())}, expected {step}")
    resp_len = r.fixed("response_length")
    total_len = r.fixed("total_length")
    tokens, cu = r.flat("tokens", total_len)
    loss_mask, resp_cu = r.flat("loss_mask", resp_len)
    lp = r.optional_flat("rollout_log_probs", resp_len, resp_cu)
    tlp = r.optional_flat("teacher_log_probs", resp_len, resp_cu)
    rn = r.col("round_number")
    round_numbers = None if (len(rn) == 0 or rn.null_count == len(rn)) else r.fixed("round_number", -1)
    sn = r.col("source_name")
    source_names = None if (len(sn) == 0 or sn.null_count == len(sn)) else sn.to_pylist()
    sched: dict[str, torch.Tensor | None] = dict.fromkeys(("rollout_position", *_SCHEDULE))
    if all(c in batch.schema.names for c in _SCHEDULE) and len(batch) and not batch.column("micro_batch").null_count:
        sched = {c: _tensor(r.fixed(c).astype(np.int64)) for c in ("rollout_position", *_SCHEDULE)}
    return PackedBatch(
        tokens=_tensor(tokens),
        cu_seqlens=_tensor(cu),
        loss_mask=_tensor(loss_mask),
        response_lengths=_tensor(resp_len),
        total_lengths=_tensor(total_len),
        rewards=_tensor(r.fixed("reward")),
        raw_rewards=_tensor(r.fixed("raw_reward")),
        rollout_ids=_tensor(r.fixed("rollout_id")),
        sample_indices=_tensor(r.fixed("sample_index", -1)),
        group_indices=_tensor(r.fixed("group_index", -1)),
        rollout_mask_sums=_tensor(r.fixed("rollout_mask_sum")),
        group_mask_sums=_tensor(r.fixed("group_mask_sum")),
        group_rollouts=_tensor(r.fixed("group_rollouts")),
        truncated=_tensor(r.bools("truncated")),
        remove_samples=_tensor(r.bools("remove_sample") if "remove_sample" in batch.schema.names
                               else np.zeros(len(batch), dtype=bool)),
        rollout_log_probs=None if lp is None else _tensor(lp),
        teacher_log_probs=None if tlp is None else _tensor(tlp),
        round_numbers=None if round_numbers is None else _tensor(round_numbers),
        source_names=source_names,
        step=step,
        shard=shard,
        split=split,
        **_step_values(r),
        rollout_positions=sched["rollout_position"],
        optimizer_steps=sched["optimizer_step"],
        micro_batch_ids=sched["micro_batch"],
    )


def _step_values(r: "_Reader") -> dict[str, int]:
    """The step's denominators, the same on every row (0 for an empty shard)."""
    out = {}
    for name in STEP_FIELDS:
        v = r.fixed(name)
        if len(v) and v.min() != v.max():
            raise r.fail(f"{name} differs between rows ({int(v.min())}..{int(v.max())}); it is one value per step")
        out[name] = int(v[0]) if len(v) else 0
    return out


def _one_batch(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    # several batches: one concatenation (a copy)
    t = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    return t.to_batches()[0] if t.num_rows else _one_batch([], schema)


# ------------------------------------------------------------------------------------------
# Dataset
# ------------------------------------------------------------------------------------------


def _digest_check(path: str, info: dict, data=None) -> None:
    """Check `path` (or the bytes `data` already mapped from it) against the manifest entry."""
    recorded = hashing.digest_of(info)
    if recorded is None:
        raise IntegrityError(f"{path}: the manifest records no checksum for it ({'/'.join(hashing.DIGEST_KEYS)})",
                             [{"path": path, "reason": "no checksum in the manifest"}])
    key, want = recorded
    if data is not None:
        h = hashing.new(key)
        h.update(data)
        got = h.hexdigest()
    else:
        got = hashing.file_digest(path, key)
    if got != want:
        raise IntegrityError(f"{path}: {key} mismatch: the manifest says {want}, the file hashes to {got}",
                             [{"path": path, "reason": f"{key} mismatch", "expected": want, "got": got}])


class Dataset:
    """A converted output directory, one split of it.  Use `open_dataset`."""

    def __init__(self, out: str | os.PathLike, split: str = "train"):
        if split not in SPLITS:
            raise UsageError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        self.root = os.fspath(out)
        self.split = split
        self.manifest: dict = manifest_mod.read(self.root)
        mpath = layout.manifest_path(self.root)
        self._shards: dict[int, list[dict]] = {}
        self._entries: dict[int, dict] = {}
        self._schedules: dict[int, dict] = {}
        self._whole: dict[int, tuple[list, list]] = {}
        for entry in self.manifest.get("steps") or []:
            if not isinstance(entry, dict) or entry.get("split") != split:
                continue
            step = entry.get("step")
            shards = entry.get("shards")
            if not isinstance(step, int) or isinstance(step, bool) or not isinstance(shards, list) or not shards:
                raise IntegrityError(f"{mpath}: malformed step entry {str(entry)[:200]}")
            if step in self._shards:
                raise IntegrityError(f"{mpath}: {split} step {step} is listed twice")
            for info in shards:
                if not isinstance(info, dict) or not isinstance(info.get("path"), str):
                    raise IntegrityError(f"{mpath}: {split} step {step}: malformed shard entry {str(info)[:200]}")
                self._safe_path(info["path"], layout.split_tree(split))
                if isinstance(info.get("mmap"), dict):
                    self._safe_path(info["mmap"].get("path"), f"{layout.MMAP}/{layout.split_tree(split)}")
            self._shards[step] = shards
            self._entries[step] = entry
            if isinstance(entry.get("schedule"), dict):
                self._schedules[step] = entry["schedule"]
        self.steps: list[int] = sorted(self._shards)
        counts = {len(v) for v in self._shards.values()}
        if len(counts) > 1:
            raise IntegrityError(f"{mpath}: {split} steps have different shard counts {sorted(counts)}")
        opt_shards = (self.manifest.get("options") or {}).get("shards")
        self.num_shards: int = counts.pop() if counts else int(opt_shards or 0)
        self._warned_missing_ipc = False
        # inputs still being written when the output was made (convert --skip-incomplete): not in it
        self.pending: list[dict] = manifest_mod.pending_steps(self.manifest, split)
        if self.pending:
            more = f" (and {len(self.pending) - 1} more)" if len(self.pending) > 1 else ""
            warnings.warn(f"{self.root}: {manifest_mod.pending_message(self.pending[0])}{more}", stacklevel=3)

    def __repr__(self) -> str:
        return f"Dataset({self.root!r}, split={self.split!r}, steps={len(self.steps)}, num_shards={self.num_shards})"

    def __len__(self) -> int:
        return len(self.steps)

    def _safe_path(self, rel: Any, top: str) -> str:
        if not layout.is_safe(rel, (top,)):
            raise IntegrityError(f"{layout.manifest_path(self.root)}: shard path {rel!r} is outside {top}/ (or not a normalised relative path)")
        return storage.join(self.root, rel) if storage.is_uri(self.root) else os.path.join(self.root, rel)

    def shard_info(self, step: int, shard: int) -> dict:
        """The manifest entry of one shard (path, rows, bytes, checksum, mmap copy)."""
        if step not in self._shards:
            raise UsageError(f"{self.root}: no {self.split} step {step} (steps: {_ranges(self.steps)})")
        if not 0 <= shard < self.num_shards:
            raise UsageError(f"{self.root}: shard {shard} out of range: this output has {self.num_shards} shard(s) per step")
        return self._shards[step][shard]

    def paths(self, step: int, shard: int) -> tuple[str, str | None]:
        """(Parquet path, Arrow IPC path or None) of one shard."""
        info = self.shard_info(step, shard)
        parquet = self._safe_path(info["path"], layout.split_tree(self.split))
        m = info.get("mmap")
        ipc = self._safe_path(m["path"], f"{layout.MMAP}/{layout.split_tree(self.split)}") if isinstance(m, dict) else None
        return parquet, ipc

    def load(self, step: int, shard: int, device: str | torch.device = "cpu", pin_memory: bool = False,
             verify: bool = False, source: str = "auto") -> PackedBatch:
        """Shard `shard` of `step` as a PackedBatch.

        device="cpu" without pin_memory: zero-copy views of the memory-mapped Arrow IPC copy.
        pin_memory=True: the tensors are copied once into one page-locked buffer.
        device="cuda[:i]": pinned, then one non-blocking host-to-device copy.
        verify=True: the file read is hashed and checked against the manifest first
        (IntegrityError naming the file on mismatch); its size is checked always.
        source: "auto" (IPC copy if the manifest lists one, else Parquet), "arrow" or "parquet".
        """
        if source not in SOURCES:
            raise UsageError(f"source: expected one of {', '.join(SOURCES)}, got {source!r}")
        info = self.shard_info(step, shard)
        parquet, ipc = self.paths(step, shard)
        if source == "arrow" and ipc is None:
            raise UsageError(f"{parquet}: no Arrow IPC copy (converted with --no-mmap)")
        if source == "auto" and ipc is not None and not storage.exists(ipc):
            if not self._warned_missing_ipc:
                warnings.warn(f"{ipc}: listed in the manifest but missing; reading Parquet instead (slower)",
                              RuntimeWarning, stacklevel=2)
                self._warned_missing_ipc = True
            ipc = None
        if source != "parquet" and ipc is not None:
            batch = self._read_ipc(ipc, info["mmap"], verify, step, shard)
        else:
            batch = self._read_parquet(parquet, info, verify, step, shard)
        rows = info.get("rows")
        if isinstance(rows, int) and rows != batch.num_samples:
            raise IntegrityError(f"{parquet}: {batch.num_samples} rows, the manifest says {rows}")
        batch = self._with_step_values(batch, parquet)
        if step in self._schedules:
            batch.schedule = self._schedules[step]
            batch._whole_batch = lambda: self.whole_batch(step)
        device = torch.device(device)
        if device.type != "cpu":
            return batch.to(device, non_blocking=True)
        return batch.pin_memory() if pin_memory else batch

    def _with_step_values(self, batch: PackedBatch, path: str) -> PackedBatch:
        """The manifest's step denominators on the batch: they must match its rows', and an
        empty shard's rank gets them from there."""
        entry = self._entries[batch.step]
        want = {k: entry.get(k) for k in STEP_FIELDS}
        if batch.num_samples == 0:
            return replace(batch, **{k: v for k, v in want.items() if isinstance(v, int)})
        for k, v in want.items():
            if isinstance(v, int) and getattr(batch, k) != v:
                raise IntegrityError(f"{path}: {k} {getattr(batch, k)} in its rows, the manifest says {v}")
        return batch
    def schedule(self, step: int) -> dict | None:
        """The step's --schedule slime record (optimizer steps, num_microbatches,
        global_batch_sizes, dropped trailing rollouts), or None under the balanced layout."""
        self.shard_info(step, 0)
        return self._schedules.get(step)

    def whole_batch(self, step: int) -> tuple[list[float], list[int]]:
        """(raw_reward, total_lengths) of every sample of a scheduled step, in position order:
        what slime ships to every rank unsliced. Read from the step's shards (three columns) and
        the manifest's dropped rollouts; cached per step."""
        if step in self._whole:
            return self._whole[step]
        import pyarrow.parquet as pq

        sched = self.schedule(step)
        if sched is None:
            raise UsageError(f"{self.root}: {self.split} step {step} was not converted with --schedule slime")
        cols = ["rollout_position", "raw_reward", "total_length"]
        parts = []
        for r in range(self.num_shards):
            parquet, ipc = self.paths(step, r)
            if ipc is not None and storage.exists(ipc):
                with (storage.open_read(ipc, seekable=True) if storage.is_uri(ipc) else pa.memory_map(ipc)) as src:
                    t = pa.ipc.open_file(src).read_all().select(cols)
            else:
                t = pq.read_table(storage.open_read(parquet, seekable=True) if storage.is_uri(parquet) else parquet,
                                  columns=cols, memory_map=not storage.is_uri(parquet))
            parts.append(t)
        for d in sched.get("dropped", []):
            parts.append(pa.table({"rollout_position": pa.array(d["positions"], pa.int64()),
                                   "raw_reward": pa.array(d["raw_reward"], pa.float64()),
                                   "total_length": pa.array(d["total_lengths"], pa.int32())}))
        t = pa.concat_tables(parts, promote_options="permissive").sort_by("rollout_position")
        pos = t.column("rollout_position").to_numpy()
        if not np.array_equal(pos, np.arange(len(pos))):
            raise IntegrityError(f"{self.root}: {self.split} step {step}: rollout positions are not 0..{len(pos) - 1} "
                                 "once across shards and dropped rollouts")
        self._whole[step] = (t.column("raw_reward").to_pylist(), t.column("total_length").to_pylist())
        return self._whole[step]

    def _check_size(self, path: str, info: dict, size: int) -> None:
        want = info.get("bytes")
        if isinstance(want, int) and want != size:
            raise IntegrityError(f"{path}: {size} bytes, the manifest says {want} (truncated or rewritten)",
                                 [{"path": path, "reason": "size mismatch", "expected": want, "got": size}])

    def _read_ipc(self, path: str, info: dict, verify: bool, step: int, shard: int) -> PackedBatch:
        try:
            region = _Region(path)
        except (OSError, ValueError) as e:
            raise IntegrityError(f"{path}: cannot map: {e}") from None
        self._check_size(path, info, region.size)
        if verify:
            _digest_check(path, info, region.mm)
        try:
            reader = pa.ipc.open_file(pa.BufferReader(region.buffer))
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            batch = _one_batch(batches, reader.schema)
        except pa.ArrowInvalid as e:
            raise IntegrityError(f"{path}: not a readable Arrow IPC file: {e}") from None
        return _pack(batch, region, path, step=step, shard=shard, split=self.split,
                     schema_version=self.manifest["schema_version"])

    def _read_parquet(self, path: str, info: dict, verify: bool, step: int, shard: int) -> PackedBatch:
        import pyarrow.parquet as pq

        remote = storage.is_uri(path)
        try:
            data = storage.read_bytes(path) if remote else None  # an object is read once, then checked
            size = len(data) if remote else os.path.getsize(path)
        except OSError as e:
            raise IntegrityError(f"{path}: missing: {e}") from None
        self._check_size(path, info, size)
        if verify:
            _digest_check(path, info, data)
        source = pa.BufferReader(data) if remote else path
        try:
            present = pq.read_schema(source, memory_map=not remote).names
            table = pq.read_table(source, columns=[c for c in (*_COLUMNS, *_LATER, *_SCHEDULE) if c in present], memory_map=not remote)
        except (pa.ArrowInvalid, OSError) as e:
            raise IntegrityError(f"{path}: not a readable Parquet file: {e}") from None
        table = table.combine_chunks()
        batch = _one_batch(table.to_batches(), table.schema)
        return _pack(batch, None, path, step=step, shard=shard, split=self.split,
                     schema_version=self.manifest["schema_version"])

    def iter_rank(self, rank: int, device: str | torch.device = "cpu", pin_memory: bool = False, verify: bool = False,
                  steps: list[int] | None = None, source: str = "auto") -> Iterator[PackedBatch]:
        """One PackedBatch per step (in step order, or the given `steps`) for trainer rank `rank`,
        which reads shard `rank` of every step."""
        self._check_rank(rank)
        todo = self._select(steps)

        def gen():
            for s in todo:
                yield self.load(s, rank, device=device, pin_memory=pin_memory, verify=verify, source=source)

        return gen()

    def _check_rank(self, rank: int) -> None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.num_shards:
            raise UsageError(f"{self.root}: rank {rank!r} has no shard: this output was converted with "
                             f"--shards {self.num_shards} (ranks 0..{self.num_shards - 1}); convert with --shards = the data-parallel size")

    def _select(self, steps: list[int] | None) -> list[int]:
        if steps is None:
            return list(self.steps)
        missing = [s for s in steps if s not in self._shards]
        if missing:
            raise UsageError(f"{self.root}: no {self.split} step(s) {missing[:10]} (steps: {_ranges(self.steps)})")
        return list(steps)


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)})" if len(steps) > 3 else ", ".join(map(str, steps))


def open_dataset(out: str | os.PathLike, split: str = "train") -> Dataset:
    """Open a converted output directory (reads and validates OUT/manifest.json)."""
    return Dataset(out, split)


class RankDataset(IterableDataset):
    """torch IterableDataset: one PackedBatch per step, shard `rank` of each.

    Use with `DataLoader(ds, batch_size=None)` (each item is already a batch).  With
    num_workers > 0 the steps are dealt round-robin to the workers (so each step comes once),
    keep device="cpu" and let `DataLoader(pin_memory=True)` pin (it calls PackedBatch.pin_memory);
    the order across workers is then DataLoader's interleaving, which is step order.
    """

    def __init__(self, out: str | os.PathLike, rank: int, split: str = "train", device: str | torch.device = "cpu",
                 pin_memory: bool = False, verify: bool = False, steps: list[int] | None = None, source: str = "auto"):
        super().__init__()
        self.dataset = open_dataset(out, split)
        self.dataset._check_rank(rank)
        self.rank = rank
        self.device = device
        self.pin_memory = pin_memory
        self.verify = verify
        self.source = source
        self.steps = self.dataset._select(steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[PackedBatch]:
        steps = self.steps
        wi = get_worker_info()
        if wi is not None and wi.num_workers > 1:
            steps = steps[wi.id::wi.num_workers]
        return self.dataset.iter_rank(self.rank, device=self.device, pin_memory=self.pin_memory, verify=self.verify,
                                      steps=steps, source=self.source)
