"""The trainer's data path without torch: `open_output(OUT).iter_batches(rank, ...)` hands one
batch per micro-batch, in step order, for any data-parallel world size and token budget, and
resumes exactly from its `state_dict()`. The torch face is loader/dataset.py's
`open_dataset(OUT).iter_batches`, the same iterator making PackedBatch.

    it = open_output(OUT).iter_batches(rank, world_size=8, max_tokens=16384)
    for batch in it:                 # a Batch of numpy arrays, PackedBatch's field names
        ...
        ckpt = it.state_dict()       # JSON: the next batch's step and micro-batch, ...
    it = open_output(OUT).iter_batches(rank, world_size=8, max_tokens=16384)
    it.load_state_dict(ckpt)         # continues with exactly the next batch

Which rows each rank gets and how they split into micro-batches is output/partition.py's
plan. Rows are read from the memory-mapped Arrow IPC copies (the Parquet shard where there
is none): a rank reads the planning columns of the step's shards (rollout_position,
rollout_id, group_index, total_length, the schedule columns) when it has to plan over the
whole step (another world size, or a budget), and only its own rows of every other column.
Each step is planned once (once per opened output: its iterators share the mapped shards and
the plans, output/stepcache.py), and the rank's rows of it (those of the micro-batches this
worker hands out) are gathered once, in micro-batch order, into one copy in which each
micro-batch is one block (output/gather.take_blocks: PackedBatch's staging layout, so moving a
batch is one copy), in fresh memory the batch owns; or not copied at all where they are one
run of one shard's rows (views of the mapped file).

Each batch carries the whole step's denominators (step_mask_sum, step_rollouts,
step_samples, step_groups, from the manifest, checked against the rows) and each sample its
rollout's and group's (rollout_mask_sums, group_mask_sums, group_rollouts), whichever rank
and micro-batch it lands on; `rollout_positions` names each sample's row in the step.
`batch.token_weights(aggregation)` turns them into each token's weight in the step's loss
(output/loss.py).
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..core import tensors
from ..core.errors import IntegrityError, UsageError
from ..pipeline.fields import STEP_FIELDS
from . import gather, loss, partition, stepcache, views
from .batch_fields import ARRAY_FIELDS, batch_dataclass
from .files import check_arrow, check_digest, check_rows, check_size, ranges, read_parquet

__all__ = ["Batch", "BatchIterator", "read_shard", "identity", "BACKENDS", "STATE_FORMAT", "ARRAY_FIELDS"]

BACKENDS = ("numpy", "torch")
STATE_FORMAT = "rollout_cli.batches/1"


@batch_dataclass("np.ndarray")
class Batch:
    """One micro-batch as numpy arrays: PackedBatch's fields and layout (loader/batch.py), both
    declared by output/batch_fields.FIELDS, without torch. Arrays are views of the mapped shard
    where the micro-batch is one run of one shard's rows, else of one gathered copy."""

    # the one buffer every array lies in (output/gather.take_blocks), None for views of a shard
    _block: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any], **meta) -> "Batch":
        extras = arrays.get("extras") or {}
        per = extras.get("multimodal_train_inputs")
        if per:
            per = [tensors.as_numpy(d) for d in per]
            extras = {**extras, "multimodal_train_inputs": per}
            arrays = {**arrays, "extras": extras}
        return cls(**arrays, **meta, multimodal_train_inputs=tensors.concat(per or [], tensors.numpy_cat))

    def __getattr__(self, name: str):
        if not name.startswith("_") and name != "extras":
            extras = self.__dict__.get("extras")
            if extras is not None and name in extras:
                return extras[name]
        raise AttributeError(f"{type(self).__name__} has no field or column {name!r}")

    def __getstate__(self) -> dict:
        # pickled, each array travels on its own: the block too would send every byte twice
        return {**self.__dict__, "_block": None}

    def __repr__(self) -> str:
        return (f"Batch(split={self.split!r}, step={self.step}, rank={self.shard}, micro_batch={self.micro_batch_index}"
                f"/{self.num_micro_batches}, samples={self.num_samples}, tokens={self.num_tokens})")

    @property
    def num_samples(self) -> int:
        return len(self.response_lengths)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def response_cu_seqlens(self) -> np.ndarray:
        out = np.zeros(self.num_samples + 1, dtype=np.int32)
        np.cumsum(self.response_lengths, out=out[1:])
        return out

    def token_weights(self, aggregation: str, constant: float | None = None) -> np.ndarray:
        """float32 [num_tokens], aligned with `tokens`: each token's weight in the step's loss
        under `aggregation` ("token_mean", "sample_mean", "rollout_mean", "group_mean", or
        "constant" with `constant`), 0 on prompt tokens and masked ones; Σ weights × per-token
        loss over every micro-batch of every rank is the step's loss (docs/loss.md)."""
        return loss.of_batch(loss.NUMPY, self, aggregation, constant)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every numpy array of the batch by field name (None fields and extras left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "_block" and isinstance(getattr(self, f.name), np.ndarray)}

    def buffers(self) -> list[np.ndarray]:
        """The memory the batch's arrays lie in, as few contiguous uint8 arrays as there are:
        its one block (output/gather.block_layout over ARRAY_FIELDS, the gaps zeroed) where it was
        gathered, else each array; then each extra's. To move or checksum a batch whole."""
        out = [self._block] if self._block is not None else [a.reshape(-1).view(np.uint8) for a in self.arrays().values()]
        for v in self.extras.values():
            parts = (v.values, v.offsets) if isinstance(v, views.Ragged) else (v,)
            out.extend(p.reshape(-1).view(np.uint8) for p in parts if isinstance(p, np.ndarray))
        return out


def identity(output, split: str) -> str:
    """The output's identity in a state_dict: a digest of the split's steps and every shard's
    path, size and digest as the manifest records them (another conversion gives another)."""
    rec = [output.schema_version, split]
    for s in output.steps:
        if s.split == split:
            rec.append([s.step, [[sh.path, sh.bytes, list(sh.digest) if sh.digest else None, sh.rows]
                                 for sh in s.shards]])
    return hashlib.sha256(json.dumps(rec, separators=(",", ":")).encode()).hexdigest()[:32]


@dataclass
class _Piece:
    """One shard of the step as read: its single record batch, the mapping its buffers lie in
    (None for Parquet) and the path read."""

    batch: pa.RecordBatch
    region: views.Region | None
    path: str
    arrays: dict | None = None  # unpacked, when rows of it are handed out


def read_shard(output, step: int, shard: int, split: str = "train", source: str = "auto",
               verify: bool = False) -> tuple[pa.RecordBatch, views.Region | None, str]:
    """One shard of `output` (output/model.py's Output) as (its rows as one record batch, the
    private mapping its buffers lie in or None, the path read): the Arrow IPC copy mapped
    where the manifest lists one (output/views.Region), else the Parquet file decoded. Its
    size and row count are checked against the manifest, its digest with verify=True, its file
    kind, schema and Arrow structure always (output/files.py); a shard gone or changed with its
    output says so (Output.check_current)."""
    sh = output.shard(step, shard, split)
    kind, path, entry = output.source(sh, source)
    region = None
    try:
        if kind == "arrow":
            try:
                region = views.Region(path, output.local_root)
            except (OSError, ValueError) as e:
                raise IntegrityError(f"{path}: cannot map: {e}") from None
            check_size(path, entry, region.size)
            if verify:
                check_digest(path, entry, region.mm)
            try:
                reader = pa.ipc.open_file(pa.BufferReader(region.buffer))
                batches = [reader.get_batch(j) for j in range(reader.num_record_batches)]
            except (pa.ArrowException, OSError) as e:
                raise IntegrityError(f"{path}: not a readable Arrow IPC file: {e}") from None
            for b in batches:  # before any concatenation reads through their offsets
                check_arrow(path, b, output.schema)
            batch = views.one_batch(batches, reader.schema)
        else:
            table = read_parquet(path, entry, verify, root=output.local_root, schema=output.schema).combine_chunks()
            batch = views.one_batch(table.to_batches(), table.schema)
    except IntegrityError:
        output.check_current(path)  # a file gone or changed with its output: say that
        raise
    output.check_current(path)
    check_rows(path, sh, batch.num_rows)
    return batch, region, path


def _positive(name: str, v, allow_none: bool = True) -> None:
    if v is None and allow_none:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise UsageError(f"{name}: expected a positive integer{' or None' if allow_none else ''}, got {v!r}")


class BatchIterator:
    """The batches of one rank of `output` (output/model.py's Output), one per micro-batch, in
    step order (this module's docstring). Iterable once; `state_dict()` / `load_state_dict()`
    save and restore where it is. `make(arrays, **meta)` makes a batch of unpacked arrays
    (Batch.from_arrays; the loader's makes PackedBatch); `workers` = (w, W): hand only the
    batches whose index in the rank's stream is w modulo W (one DataLoader worker's share)."""

    def __init__(self, output, rank: int, *, split: str = "train", world_size: int | None = None,
                 max_tokens: int | None = None, steps: list[int] | None = None, verify: bool = False,
                 source: str = "auto", make: Callable[..., Any] | None = None, workers: tuple[int, int] = (0, 1)):
        self.output = output
        self.split = split
        self.num_shards = output.num_shards(split)
        _positive("world_size", world_size)
        _positive("max_tokens", max_tokens)
        self.world_size = world_size if world_size is not None else self.num_shards
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.world_size:
            raise UsageError(f"{output.root}: rank {rank!r}: expected 0..{self.world_size - 1} (world size {self.world_size}"
                             + (", the output's shard count)" if world_size is None else ")"))
        self.rank = rank
        self.max_tokens = max_tokens
        self.verify = verify
        self.source = source
        self.make = make or Batch.from_arrays
        self.worker, self.num_workers = workers
        if not (isinstance(self.num_workers, int) and self.num_workers >= 1 and 0 <= self.worker < self.num_workers):
            raise UsageError(f"workers: expected (worker, count) with 0 <= worker < count, got {workers!r}")
        self.keep_groups = bool(output.options.get("keep_groups", False))
        all_steps = output.step_numbers(split)
        if steps is None:
            self.steps = list(all_steps)
        else:
            missing = [s for s in steps if not output.has_step(s, split)]
            if missing:
                raise UsageError(f"{output.root}: no {split} step(s) {missing[:10]} (steps: {ranges(all_steps)})")
            self.steps = list(steps)
        self.identity = identity(output, split)
        # where the next batch is: step index, micro-batch within the step, index in the stream
        self._i, self._k, self._g = 0, 0, 0
        self._plan_of: tuple[int, list[np.ndarray], np.ndarray] | None = None  # (step index, mbs, shard starts)
        self._take: _Take | None = None  # this rank's rows of the current step, gathered
        self._cache = stepcache.of(output)  # shards and plans shared with the output's other iterators

    def __repr__(self) -> str:
        return (f"BatchIterator({self.output.root!r}, split={self.split!r}, rank={self.rank}, world_size={self.world_size}, "
                f"max_tokens={self.max_tokens}, steps={ranges(self.steps)})")

    def __iter__(self) -> "BatchIterator":
        return self

    @property
    def native(self) -> bool:
        """The output's own layout: rank r reads shard r."""
        return self.world_size == self.num_shards

    # -- the stream ---------------------------------------------------------------------------
    def __next__(self):
        while True:
            if self._i >= len(self.steps):
                raise StopIteration
            count = len(self._plan(self._i)[0])
            if self._k >= count:
                self._i, self._k = self._i + 1, 0
                continue
            i, k, g = self._i, self._k, self._g
            self._k, self._g = k + 1, g + 1
            if self._k == count:  # the step's last: the next batch is the next step's first
                self._i, self._k = i + 1, 0
            if g % self.num_workers == self.worker:
                return self._batch(i, k, g)

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the iterator is, as plain JSON values: the next batch's step (None once every
        step was handed out) and micro-batch, its index in the rank's stream, and what the
        stream was made of (output identity, split, rank, world size, budget)."""
        done = self._i >= len(self.steps)
        return {"format": STATE_FORMAT, "output": self.identity, "split": self.split, "rank": self.rank,
                "world_size": self.world_size, "max_tokens": self.max_tokens,
                "step": None if done else self.steps[self._i], "micro_batch": 0 if done else self._k,
                "index": self._g}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state` (another iterator's state_dict()): with the same world size and
        budget, exactly with the batch it would have handed next; under another, at the next
        step boundary (a warning says so when that skips the rest of a step). UsageError when
        the state is of another output or split, or not a state_dict() at all."""
        keys = ("format", "output", "split", "world_size", "max_tokens", "step", "micro_batch", "index")
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT or any(k not in state for k in keys):
            raise UsageError(f"load_state_dict: not a batch iterator state ({STATE_FORMAT}): {str(state)[:200]}")
        if state["output"] != self.identity:
            raise UsageError(f"load_state_dict: the state is of another output (identity {state['output']}), "
                             f"not {self.output.root} ({self.identity})")
        if state["split"] != self.split:
            raise UsageError(f"load_state_dict: the state is of the {state['split']} split, this iterator reads {self.split}")
        step, k, g = state["step"], state["micro_batch"], state["index"]
        if step is None:
            self._i, self._k, self._g = len(self.steps), 0, g
            return
        if step not in self.steps:
            raise UsageError(f"load_state_dict: the state's next step {step} is not among this iterator's steps "
                             f"({ranges(self.steps)})")
        i = self.steps.index(step)
        same = state["world_size"] == self.world_size and state["max_tokens"] == self.max_tokens
        if not same and k:
            warnings.warn(f"load_state_dict: the state was saved at world size {state['world_size']}, max_tokens "
                          f"{state['max_tokens']}; this iterator has world size {self.world_size}, max_tokens "
                          f"{self.max_tokens}: the rest of step {step} (from micro-batch {k}) is skipped, it resumes "
                          f"at the next step boundary"
                          + (f" (step {self.steps[i + 1]})" if i + 1 < len(self.steps) else " (the end: no step left)"),
                          RuntimeWarning, stacklevel=2)
            i, k = i + 1, 0
        self._i, self._k, self._g = i, k, g

    # -- planning -----------------------------------------------------------------------------
    def _plan(self, i: int) -> tuple[list[np.ndarray], np.ndarray]:
        """This rank's micro-batches of step index i (row indices into the step's rows, shard
        after shard) and the shards' first rows; cached for the current step."""
        if self._plan_of is not None and self._plan_of[0] == i:
            return self._plan_of[1], self._plan_of[2]
        self._take = None
        step = self.steps[i]
        shards = self.output.step(step, self.split).shards
        if self.native and self.max_tokens is None:
            rows = [sh.rows if sh.rows is not None else self._piece(step, sh.index).batch.num_rows for sh in shards]
            starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
            piece = self._piece(step, self.rank)
            n = piece.batch.num_rows
            sched = self._schedule_columns(piece)
            local = partition.runs(*sched) if sched is not None and n else [list(range(n))]
            mbs = [starts[self.rank] + np.asarray(b, dtype=np.int64) for b in local] or [np.zeros(0, np.int64)]
        else:
            key = (self.split, step, self.source, self.world_size, self.max_tokens, self.keep_groups)
            plans, starts = self._cache.plan(key, lambda: self._plan_all(step, len(shards)))
            mbs = plans[self.rank]
        self._plan_of = (i, mbs, starts)
        return mbs, starts

    def _plan_all(self, step: int, num_shards: int) -> tuple[list[list[np.ndarray]], np.ndarray]:
        """Every rank's micro-batches of the step (partition.plan_step) and the shards' first rows."""
        pieces = [self._piece(step, r) for r in range(num_shards)]
        starts = np.concatenate([[0], np.cumsum([p.batch.num_rows for p in pieces])]).astype(np.int64)
        plans = partition.plan_step(self._columns(pieces), self.world_size, self.num_shards, self.max_tokens,
                                    self.keep_groups)
        return plans, starts

    @staticmethod
    def _schedule_columns(piece: _Piece) -> tuple[np.ndarray, np.ndarray] | None:
        b = piece.batch
        names = b.schema.names
        if "micro_batch" not in names or "optimizer_step" not in names or not b.num_rows:
            return None
        if b.column("micro_batch").null_count or b.column("optimizer_step").null_count:
            return None
        return (b.column("optimizer_step").to_numpy(), b.column("micro_batch").to_numpy())

    def _columns(self, pieces: list[_Piece]) -> partition.StepColumns:
        def col(name, fill=None):
            parts = [views.Reader(p.batch, p.region, p.path).fixed(name, fill) for p in pieces]
            return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

        sched = [self._schedule_columns(p) for p in pieces]
        scheduled = any(s is not None for s in sched) and all(s is not None or not p.batch.num_rows
                                                               for s, p in zip(sched, pieces))
        return partition.StepColumns(
            shard=np.concatenate([np.full(p.batch.num_rows, r, np.int64) for r, p in enumerate(pieces)]),
            position=col("rollout_position"), rollout_id=col("rollout_id"), group_index=col("group_index", -1),
            tokens=col("total_length"),
            optimizer_step=np.concatenate([s[0] for s in sched if s is not None]).astype(np.int64) if scheduled else None,
            micro_batch=np.concatenate([s[1] for s in sched if s is not None]).astype(np.int64) if scheduled else None)

    # -- reading ------------------------------------------------------------------------------
    def _piece(self, step: int, r: int) -> _Piece:
        key = (self.split, step, self.source)
        check = self.verify and not self._cache.verified(key + (r,))  # a digest is checked once per shard
        piece = self._cache.piece(key, r, lambda: _Piece(*read_shard(self.output, step, r, self.split, self.source,
                                                                     check)), fresh=check)
        if check:
            self._cache.mark_verified(key + (r,))
        return piece

    def _arrays(self, step: int, r: int) -> dict:
        """Shard r of the step unpacked (output/views.unpack: views of the mapped file), once."""
        p = self._piece(step, r)
        if p.arrays is None:
            p.arrays = views.unpack(p.batch, p.region, p.path, step=step, schema_version=self.output.schema_version)
        return p.arrays

    def _gather(self, i: int, k: int, g: int) -> "_Take":
        """This rank's rows of step index i that this worker hands out from micro-batch k on
        (k has index g in the stream), gathered once in micro-batch order: views of the mapped
        shard where they are one run of one shard's rows (output/gather.Slicer), else one copy
        in which each micro-batch is one block (output/gather.take_blocks)."""
        step = self.steps[i]
        mbs, starts = self._plan(i)
        ks = [j for j in range(k, len(mbs)) if (g + j - k) % self.num_workers == self.worker]
        sizes = [len(mbs[j]) for j in ks]
        rows = np.concatenate([mbs[j] for j in ks]) if ks else np.zeros(0, np.int64)
        if len(rows):
            shard_of = np.searchsorted(starts, rows, side="right") - 1
            sources = sorted(set(shard_of.tolist()))
        else:
            shard_of, sources = rows, [self.rank if self.rank < self.num_shards else 0]
        srcs = [self._arrays(step, r) for r in sources]
        which = np.searchsorted(np.asarray(sources, np.int64), shard_of)
        local = rows - starts[shard_of] if len(rows) else rows
        scheduled = self.native and self.max_tokens is None  # the converted schedule: slime's micro-batch ids
        ends = np.cumsum(sizes).tolist()
        if not len(rows) or (len(sources) == 1 and (np.diff(local) == 1).all()):
            slicer = gather.Slicer(gather.take_ordered(srcs, which, local))
            at = {j: (e - n, e) for j, n, e in zip(ks, sizes, ends)}
            serve, values = (lambda j: slicer(*at[j])), slicer.a
        else:
            blocks = gather.take_blocks(srcs, which, local, sizes, ARRAY_FIELDS, gather.aligned_empty,
                                       () if scheduled else ("optimizer_steps", "micro_batch_ids"))
            at = {j: x for x, j in enumerate(ks)}
            serve, values = (lambda j: dict(blocks[at[j]])), blocks[0]
        path = self._piece(step, sources[0]).path
        want = self.output.step(step, self.split).denominators
        fixed = {}
        for name in STEP_FIELDS:
            v = want.get(name)
            if not isinstance(v, int):
                continue
            if len(rows) and values[name] != v:
                raise IntegrityError(f"{path}: {name} {values[name]} in its rows, the manifest says {v}")
            fixed[name] = v
        if not scheduled:
            fixed["optimizer_steps"] = fixed["micro_batch_ids"] = None
        return _Take(i, at, serve, fixed, len(mbs))

    def _batch(self, i: int, k: int, g: int):
        t = self._take
        if t is None or t.i != i or k not in t.at:
            t = self._take = None
            t = self._take = self._gather(i, k, g)
        arrays = t.serve(k)
        arrays.update(t.fixed)
        return self.make(arrays, step=self.steps[i], shard=self.rank, split=self.split, micro_batch_index=k,
                         num_micro_batches=t.count)


@dataclass
class _Take:
    """One step's rows of a rank as gathered (BatchIterator._gather): the micro-batches it
    holds, `serve(k)` giving micro-batch k's arrays, the step's values to set, the micro-batch
    count."""

    i: int
    at: dict
    serve: Callable[[int], dict]
    fixed: dict
    count: int
