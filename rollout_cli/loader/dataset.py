"""The trainer side: a converted output (output/model.py's Output) handing out packed batches.

    ds = open_dataset("out/")                   # the output's manifest, read and checked once
    batch = ds.load(step, shard=rank)           # zero-copy CPU views of the shard
    batch = batch.to("cuda")                    # one pinned staging copy, one async H2D copy
    train_data = batch.to_slime_train_data()    # slime's tensorize_rollout_data_for_training form

    it = ds.iter_batches(rank, world_size=8, max_tokens=16384)   # one PackedBatch per micro-batch,
    it.state_dict(); it.load_state_dict(state)  # any world size, exact resume (output/batches.py)

Fast path: each shard's uncompressed Arrow IPC copy (`OUT/mmap/...arrow`, written by `convert`
unless `--no-mmap`) is memory-mapped and every tensor is a view of the mapped file: opening a
shard costs microseconds, whatever its size, and the bytes are read from the page cache on first
touch (the pinned staging copy in `.to("cuda")`, or whatever the trainer does with them).  The
mapping is private copy-on-write (`mmap.ACCESS_COPY`), so the tensors are writable and writing
into them never reaches the file (output/views.py; output/batches.read_shard reads a shard).

Fallback: when the IPC copy is absent, the Parquet shard is read with
`pq.read_table(memory_map=True)`: every column is decoded (and decompressed) into fresh memory,
which runs at about 0.1x memcpy speed (0.6-1 GB/s of list payload on a 2-vCPU machine), plus one concatenation
when the shard has several row groups.  The tensors are then views of that decoded Arrow memory.

On an object store (`s3://` OUT) nothing can be mapped: a shard's IPC copy (or Parquet file) is
read into private memory in one request and the tensors are views of it; the paths are the
manifest's (core/layout.py's generation folders).

The manifest's checks (steps, shards, paths inside OUT, sizes, digests) are the model's; the
loader checks the rows it unpacks against them (row count, step denominators). Nothing here
loops in Python over tokens (or over samples, except to build the Python lists of
`to_slime_train_data()`).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import replace
from typing import Iterator

import numpy as np
import pyarrow as pa

# the output's model before torch: imported after it, the model's classes were built while
# the collector walked torch's objects (a full collection, 65 ms of an epoch's 0.8 s open)
from ..core import layout
from ..core.errors import IntegrityError, UsageError
from ..output.batches import BACKENDS, Batch, BatchIterator, read_shard
from ..output.model import SOURCES, Output, open_output, ranges
from ..pipeline.fields import STEP_FIELDS
from ..output import views
from .batch import PackedBatch  # before torch: it names the torch extra when torch is missing
import torch
from torch.utils.data import IterableDataset, get_worker_info

__all__ = ["open_dataset", "Dataset", "RankDataset", "BatchDataset", "SPLITS", "SOURCES"]

SPLITS = layout.SPLIT_TREES  # split -> the folder its shards live in


class Dataset:
    """A converted output, one split of it, as torch batches. Use `open_dataset`. `output` is
    its model (output/model.py), `manifest` the manifest as read."""

    def __init__(self, out: str | os.PathLike | Output, split: str = "train"):
        if split not in SPLITS:
            raise UsageError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        self.output: Output = out if isinstance(out, Output) else open_output(out)
        self.root = self.output.root
        self.split = split
        self.manifest: dict = self.output.manifest
        self.steps: list[int] = self.output.step_numbers(split)
        self.num_shards: int = self.output.num_shards(split)
        self._whole: dict[int, tuple[list, list]] = {}
        # inputs still being written when the output was made (convert --skip-incomplete): not in it
        self.pending: list[dict] = [p.as_dict() for p in self.output.pending_of(split)]
        if self.pending:
            more = f" (and {len(self.pending) - 1} more)" if len(self.pending) > 1 else ""
            warnings.warn(f"{self.root}: {self.output.pending[0].message}{more}", stacklevel=3)

    def __repr__(self) -> str:
        return f"Dataset({self.root!r}, split={self.split!r}, steps={len(self.steps)}, num_shards={self.num_shards})"

    def __len__(self) -> int:
        return len(self.steps)

    def shard_info(self, step: int, shard: int) -> dict:
        """The manifest entry of one shard (path, rows, bytes, checksum, mmap copy)."""
        self.output.shard(step, shard, self.split)
        return self.output.step(step, self.split).record["shards"][shard]

    def paths(self, step: int, shard: int) -> tuple[str, str | None]:
        """(Parquet path, Arrow IPC path or None) of one shard."""
        return self.output.paths(step, shard, self.split)

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
        rows, region, path = read_shard(self.output, step, shard, self.split, source, verify)
        try:
            arrays = views.unpack(rows, region, path, step=step, schema_version=self.output.schema_version)
        except IntegrityError:
            self.output.check_current(path)  # a file gone or changed with its output: say that
            raise
        batch = PackedBatch.from_arrays(arrays, step=step, shard=shard, split=self.split)
        sh = self.output.shard(step, shard, self.split)
        batch = self._with_step_values(batch, self.output.full_path(sh.path))
        sched = self.output.step(step, self.split).schedule
        if sched is not None:
            batch.schedule = sched
            batch._whole_batch = lambda: self.whole_batch(step)
        device = torch.device(device)
        if device.type != "cpu":
            return batch.to(device, non_blocking=True)
        return batch.pin_memory() if pin_memory else batch

    def _with_step_values(self, batch: PackedBatch, path: str) -> PackedBatch:
        """The manifest's step denominators on the batch: they must match its rows', and an
        empty shard's rank gets them from there."""
        want = self.output.step(batch.step, self.split).denominators
        if batch.num_samples == 0:
            return replace(batch, **{k: v for k, v in want.items() if isinstance(v, int)})
        for k in STEP_FIELDS:
            v = want.get(k)
            if isinstance(v, int) and getattr(batch, k) != v:
                raise IntegrityError(f"{path}: {k} {getattr(batch, k)} in its rows, the manifest says {v}")
        return batch

    def schedule(self, step: int) -> dict | None:
        """The step's --schedule slime record (optimizer steps, num_microbatches,
        global_batch_sizes, dropped trailing rollouts), or None under the balanced layout."""
        return self.output.step(step, self.split).schedule

    def whole_batch(self, step: int) -> tuple[list[float], list[int]]:
        """(raw_reward, total_lengths) of every sample of a scheduled step, in position order:
        what slime ships to every rank unsliced. Read from the step's shards (three columns) and
        the manifest's dropped rollouts; cached per step."""
        if step in self._whole:
            return self._whole[step]
        sched = self.schedule(step)
        if sched is None:
            raise UsageError(f"{self.root}: {self.split} step {step} was not converted with --schedule slime")
        cols = ["rollout_position", "raw_reward", "total_length"]
        parts = list(self.output.tables(step, self.split, columns=cols))
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

    def iter_batches(self, rank: int, world_size: int | None = None, max_tokens: int | None = None,
                     steps: list[int] | None = None, device: str | torch.device = "cpu", pin_memory: bool = False,
                     verify: bool = False, backend: str = "torch", *, source: str = "auto",
                     workers: tuple[int, int] = (0, 1)) -> BatchIterator:
        """Rank `rank`'s batches, one per micro-batch, in step order: a BatchIterator
        (output/batches.py: the ranks, micro-batches and state; output/partition.py: the plan).

        world_size: None is the output's shard count (rank r reads shard r; a --schedule slime
        output is then served as converted); any other repartitions each step's rollouts by
        tokens. max_tokens: micro-batches of at most that many tokens (a longer sample alone),
        the same count on every rank of a step. backend: "torch" hands PackedBatch (on `device`,
        pinned with pin_memory), "numpy" output/batches.Batch (then device must be the CPU).
        workers: (worker, count): this iterator hands only the batches whose index in the
        stream is worker modulo count (BatchDataset's DataLoader workers)."""
        if backend not in BACKENDS:
            raise UsageError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
        device = torch.device(device)
        if backend == "numpy":
            if device.type != "cpu" or pin_memory:
                raise UsageError("backend='numpy' hands out host arrays: device must be 'cpu' and pin_memory False")
            make = Batch.from_arrays
        else:
            make = self._maker(device, pin_memory, attach_whole=workers[1] == 1)
        return BatchIterator(self.output, rank, split=self.split, world_size=world_size, max_tokens=max_tokens,
                             steps=steps, verify=verify, source=source, make=make, workers=workers)

    def _maker(self, device: torch.device, pin_memory: bool, attach_whole: bool):
        def make(arrays: dict, **meta) -> PackedBatch:
            batch = PackedBatch.from_arrays(arrays, **meta)
            if batch.scheduled:  # served as converted: slime's whole-step keys for to_slime_train_data
                step = meta["step"]
                batch.schedule = self.schedule(step)
                if attach_whole:  # (not in a DataLoader worker: the batch is pickled back, a closure is not)
                    batch._whole_batch = lambda: self.whole_batch(step)
            if device.type != "cpu":
                return batch.to(device, non_blocking=True)
            return batch.pin_memory() if pin_memory else batch

        return make

    def _check_rank(self, rank: int) -> None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.num_shards:
            raise UsageError(f"{self.root}: rank {rank!r} has no shard: this output was converted with "
                             f"--shards {self.num_shards} (ranks 0..{self.num_shards - 1}); convert with --shards = the data-parallel size")

    def _select(self, steps: list[int] | None) -> list[int]:
        if steps is None:
            return list(self.steps)
        missing = [s for s in steps if not self.output.has_step(s, self.split)]
        if missing:
            raise UsageError(f"{self.root}: no {self.split} step(s) {missing[:10]} (steps: {ranges(self.steps)})")
        return list(steps)


def open_dataset(out: str | os.PathLike | Output, split: str = "train") -> Dataset:
    """Open a converted output (a folder, an object-store URI, or an Output already opened):
    its manifest read and checked once (output/model.py)."""
    return Dataset(out, split)


class RankDataset(IterableDataset):
    """torch IterableDataset: one PackedBatch per step, shard `rank` of each.

    Use with `DataLoader(ds, batch_size=None)` (each item is already a batch).  With
    num_workers > 0 the steps are dealt round-robin to the workers (so each step comes once),
    keep device="cpu" and let `DataLoader(pin_memory=True)` pin (it calls PackedBatch.pin_memory);
    the order across workers is then DataLoader's interleaving, which is step order.
    """

    def __init__(self, out: str | os.PathLike | Output, rank: int, split: str = "train",
                 device: str | torch.device = "cpu", pin_memory: bool = False, verify: bool = False,
                 steps: list[int] | None = None, source: str = "auto"):
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


class BatchDataset(IterableDataset):
    """torch IterableDataset over `Dataset.iter_batches`: one PackedBatch per micro-batch.

    Use with `DataLoader(ds, batch_size=None)` (each item is already a batch) or torchdata's
    `StatefulDataLoader`, whose state_dict() saves the iterators' positions (each
    BatchIterator is stateful) and resumes with exactly the next batch. With num_workers = W
    > 0, worker w hands the batches whose index in the rank's stream is w modulo W; DataLoader
    takes one batch from each worker in turn, so the batches come in the stream's order, each
    once. Keep device="cpu" with workers and let `DataLoader(pin_memory=True)` pin.
    """

    def __init__(self, out: str | os.PathLike | Output, rank: int, split: str = "train", world_size: int | None = None,
                 max_tokens: int | None = None, steps: list[int] | None = None, device: str | torch.device = "cpu",
                 pin_memory: bool = False, verify: bool = False, backend: str = "torch", source: str = "auto"):
        super().__init__()
        self.dataset = open_dataset(out, split)
        self.kwargs = dict(world_size=world_size, max_tokens=max_tokens, steps=steps, device=device,
                           pin_memory=pin_memory, verify=verify, backend=backend, source=source)
        self.rank = rank
        self.dataset.iter_batches(rank, **self.kwargs)  # the arguments checked here, not in a worker

    def __iter__(self) -> BatchIterator:
        wi = get_worker_info()
        workers = (wi.id, wi.num_workers) if wi is not None else (0, 1)
        return self.dataset.iter_batches(self.rank, workers=workers, **self.kwargs)
