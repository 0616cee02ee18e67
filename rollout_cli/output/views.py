"""Arrow buffers -> numpy views: a shard's record batch unpacked into the flat arrays a
PackedBatch holds, each a view of the mapped file where it can be (no copy), checked on the way
(columns and types, list lengths, nulls, one step, one value per step of the denominators).
Also the mapping itself: a private copy-on-write map of the IPC copy, asked to be read in huge
pages where shards are written past the page cache. No torch here: loader/batch.py wraps the arrays as tensors, output/batches.py hands them
out as numpy batches.

Every column of the row schema reaches the batch: the ones the loader knows by name (tokens,
loss_mask, rewards, ...) as PackedBatch's fields, every other one generically by its Arrow
type into `extras` (name -> value, the column's own name), so that a column added to the
schema appears without a change here: integers as int64 arrays (-1 where null), floats as
arrays (NaN where null), booleans as bool arrays (false where null), strings and lists of
strings as Python lists (None where null, None for a column null on every row), numeric lists
as `Ragged` (flat values and offsets); `multimodal_train_inputs` as a list of per-sample dicts
(core/tensors.decode_row: arrays viewing the file's bytes; None for a sample without)."""
from __future__ import annotations

import mmap
import warnings

import numpy as np
import pyarrow as pa

from ..core import storage, tensors, tuning
from ..core.arrays import numpy_dtype
from ..core.errors import IntegrityError
from ..core.schema import COLUMNS_SINCE, SCHEDULE_COLUMNS, train_schema
from ..pipeline.fields import STEP_FIELDS
from .files import map_regular

__all__ = ["Region", "Reader", "Ragged", "large_folios", "check_schema", "unpack", "one_batch", "READ_COLUMNS"]

# The columns the loader reads; their Arrow types come from the train-row schema.
_NEEDED = ("step", "rollout_id", "sample_index", "group_index", "tokens", "response_length", "total_length",
           "loss_mask", "reward", "raw_reward", "truncated", "rollout_mask_sum", "group_mask_sum", "group_rollouts",
           "step_mask_sum", "step_rollouts", "step_samples", "step_groups", "rollout_log_probs",
           "teacher_log_probs", "round_number", "source_name", "rollout_position")
_COLUMNS: dict[str, pa.DataType] = {f.name: f.type for f in train_schema() if f.name in _NEEDED}
assert len(_COLUMNS) == len(_NEEDED), "the train-row schema lost a column the loader reads"
# Read where present (outputs written before they existed lack them); set under --schedule slime.
_SCHEDULE = tuple(f.name for f in SCHEDULE_COLUMNS)
# Columns of later schema versions (core.schema.COLUMNS_SINCE): read where present, their
# default where an older output lacks them.
_LATER: dict[str, pa.DataType] = {f.name: f.type for f in train_schema() if f.name in COLUMNS_SINCE}
# every column the loader reads where present, in the order a Parquet read asks for them
READ_COLUMNS = (*_COLUMNS, *_LATER, *_SCHEDULE)
# the columns unpack() gives their own PackedBatch field (the rest go to `extras`)
NAMED = frozenset({*_COLUMNS, "remove_sample", "rollout_position", *_SCHEDULE})


class Ragged:
    """A numeric list column of n rows: `values` (flat) and `offsets` [n+1] from 0; row i is
    values[offsets[i]:offsets[i+1]]. numpy arrays, or torch tensors in a PackedBatch."""

    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        self.values = values
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int):
        return self.values[int(self.offsets[i]):int(self.offsets[i + 1])]

    def __repr__(self) -> str:
        return f"Ragged(rows={len(self)}, values={len(self.values)})"

    def slice(self, start: int, end: int) -> "Ragged":
        lo, hi = int(self.offsets[start]), int(self.offsets[end])
        return Ragged(self.values[lo:hi], self.offsets[start:end + 1] - lo)

    def map(self, fn) -> "Ragged":
        return Ragged(fn(self.values), fn(self.offsets))

    def tolist(self) -> list:
        return [self[i].tolist() for i in range(len(self))]


def large_folios(mm: mmap.mmap) -> None:
    """Ask, before the first touch, that the file's pages be read in huge pages (Linux's
    MADV_HUGEPAGE; a no-op where transparent huge pages are off or the file system has no large
    folios). Asked where shards are written with O_DIRECT (core/tuning.py): a shard whose pages
    are not cached yet is otherwise read into the page cache 4 KiB at a time by the faults of
    the first load, and every later load maps those small pages one fault per 64 KiB (478
    faults for a 37 MB shard, against 20 for pages cached in large folios)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            mm.madvise(advice)
        except OSError:  # a kernel without transparent huge pages refuses the advice
            pass


class Region:
    """A private (copy-on-write) mapping of a whole file; views into it keep it alive. A local
    file is mapped only when it is a regular file inside `root` (output/files.check_regular)."""

    def __init__(self, path: str, root: str | None = None):
        if storage.is_uri(path):  # an object store has nothing to map: the file is read into memory once
            with storage.open_read(path, seekable=True) as f:
                self.mm = bytearray(f.size())
                if f.readinto(self.mm) != len(self.mm):
                    raise OSError(f"{path}: short read")
        else:
            self.mm = map_regular(path, root, access=mmap.ACCESS_COPY)
            if tuning.direct_io():  # shards written past the page cache: see large_folios
                large_folios(self.mm)
        self.buffer = pa.py_buffer(self.mm)
        self.address = self.buffer.address
        self.size = self.buffer.size

    def owns(self, buf: pa.Buffer) -> bool:
        return self.address <= buf.address and buf.address + buf.size <= self.address + self.size


class Reader:
    """Builds numpy views (then tensors) of one record batch's buffers."""

    def __init__(self, batch: pa.RecordBatch, region: Region | None, path: str):
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



def check_schema(batch: pa.RecordBatch, path: str, schema_version: int) -> None:
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


def unpack(batch: pa.RecordBatch, region: Region | None, path: str, *, step: int, schema_version: int) -> dict:
    """One shard's record batch as PackedBatch's fields (name -> numpy array, None where the
    shard has no such values, a list for source_names, int for the step's denominators), each
    array a view of `region` where the batch's buffers lie in it. IntegrityError naming `path`
    and what is wrong when the rows are not the train-row schema's."""
    check_schema(batch, path, schema_version)
    r = Reader(batch, region, path)
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
    sn = r.col("source_name")
    sched: dict[str, np.ndarray | None] = dict.fromkeys(_SCHEDULE)
    if all(c in batch.schema.names for c in _SCHEDULE) and len(batch) and not batch.column("micro_batch").null_count:
        sched = {c: r.fixed(c).astype(np.int64) for c in _SCHEDULE}
    return {
        "tokens": tokens,
        "cu_seqlens": cu,
        "loss_mask": loss_mask,
        "response_lengths": resp_len,
        "total_lengths": total_len,
        "rewards": r.fixed("reward", np.nan),  # NaN: not recorded (schema version 4 on)
        "raw_rewards": r.fixed("raw_reward", np.nan),
        "rollout_ids": r.fixed("rollout_id"),
        "sample_indices": r.fixed("sample_index", -1),
        "group_indices": r.fixed("group_index", -1),
        "rollout_mask_sums": r.fixed("rollout_mask_sum"),
        "group_mask_sums": r.fixed("group_mask_sum"),
        "group_rollouts": r.fixed("group_rollouts"),
        "truncated": r.bools("truncated"),
        "remove_samples": (r.bools("remove_sample") if "remove_sample" in batch.schema.names
                           else np.zeros(len(batch), dtype=bool)),
        "rollout_log_probs": lp,
        "teacher_log_probs": tlp,
        "round_numbers": None if (len(rn) == 0 or rn.null_count == len(rn)) else r.fixed("round_number", -1),
        "source_names": None if (len(sn) == 0 or sn.null_count == len(sn)) else sn.to_pylist(),
        **step_values(r),
        "rollout_positions": r.fixed("rollout_position"),
        "optimizer_steps": sched["optimizer_step"],
        "micro_batch_ids": sched["micro_batch"],
        "extras": {name: extra(r, name) for name in batch.schema.names if name not in NAMED},
    }


def extra(r: "Reader", name: str):
    """A column the loader has no field for, by its Arrow type (the module's docstring)."""
    arr = r.col(name)
    t = arr.type
    if name == "multimodal_train_inputs":
        try:
            return tensors.decode_column(arr)
        except ValueError as e:
            raise r.fail(f"{name}: {e}") from None
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return r.bools(name) if arr.null_count == 0 else np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), bool)
    if pa.types.is_integer(t):
        return r.fixed(name, -1)
    if pa.types.is_floating(t):
        return r.fixed(name, np.nan)
    if len(arr) and arr.null_count == len(arr) and not pa.types.is_primitive(t):
        return None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        vt = t.value_type
        if pa.types.is_integer(vt) or pa.types.is_floating(vt):
            offsets, values, _ = r.list_parts(name)
            lo = int(offsets[0]) if len(offsets) else 0
            return Ragged(values[lo:int(offsets[-1])], (offsets - lo).astype(np.int64))
    return arr.to_pylist()


def step_values(r: "Reader") -> dict[str, int]:
    """The step's denominators, the same on every row (0 for an empty shard)."""
    out = {}
    for name in STEP_FIELDS:
        v = r.fixed(name)
        if len(v) and v.min() != v.max():
            raise r.fail(f"{name} differs between rows ({int(v.min())}..{int(v.max())}); it is one value per step")
        out[name] = int(v[0]) if len(v) else 0
    return out


def one_batch(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    # several batches: one concatenation (a copy)
    t = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    return t.to_batches()[0] if t.num_rows else one_batch([], schema)



# the fields laid out per token (tokens) or per response token (the rest), and the step's values
