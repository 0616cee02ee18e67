"""The model of a converted output, without torch: `open_output(OUT)` reads and checks
OUT/manifest.json once (output/manifest.py's reader) into frozen typed objects, and reads any
shard back as a pyarrow Table.

    out = open_output("out/")                     # or "s3://bucket/out"
    out.steps                                     # every Step, in manifest order
    step = out.step(3)                            # train step 3: rows, rollouts, denominators, shards
    t = out.table(3, shard=0)                     # a pyarrow Table of the shard's rows

`table()` maps the shard's uncompressed Arrow IPC copy (`OUT/mmap/...arrow`) where the manifest
lists one, so the Table's buffers are views of the mapped file (nothing decoded, nothing
copied); else it reads the Parquet file. On an object store (nothing to map) the file is read
into memory in one request. The file's size is checked against the manifest always, its digest
with `verify=True`; on every call, verify or not, the file must be a regular file inside OUT
(opened only once that is known, so a FIFO never blocks) and the Table its manifest's schema
with buffers that hold together (output/files.check_arrow), IntegrityError naming the file
otherwise.

The checks a reader needs are made here, once: each step's split, number and shards, each
shard's paths inside OUT (core/layout.py), no step listed twice, one shard count per split, a
well-formed `pending` list. A broken manifest is a manifest.ManifestError naming the invariant
as verify reports it (`manifest`, `schema_version`, `manifest_structure`, `duplicate_step`,
`shard_layout`). `structure_problems(manifest)` (output/manifest.py) lists every field verify
relies on.

The torch loader (loader/, `open_dataset`) is built on this model.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterator, Mapping

import pyarrow as pa

from ..core import hashing, layout, storage
from ..core.errors import IntegrityError, UsageError
from ..pipeline.fields import STEP_FIELDS
from . import manifest as manifest_mod
from .files import (check_digest, check_rows, check_size, expected_schema, ipc_table, ranges, read_bytes,  # noqa: F401
                    read_ipc, read_parquet)
from .manifest import ManifestError

__all__ = ["open_output", "Output", "Step", "Shard", "FileEntry", "Pending", "SOURCES"]

SOURCES = ("auto", "arrow", "parquet")  # what table() reads: the IPC copy where listed, else Parquet


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class FileEntry:
    """A file the manifest lists: its path inside OUT (in a generation folder on an object
    store), size in bytes and digest `(algorithm, hex)` (None where the manifest has none)."""

    path: str
    bytes: int | None
    digest: tuple[str, str] | None


@dataclass(frozen=True)
class Shard:
    """One shard of one step: its Parquet file (`path`, `bytes`, `digest`), its counts, and
    its Arrow IPC copy (`mmap`, None when converted with --no-mmap)."""

    split: str
    step: int
    index: int
    path: str
    rows: int | None
    rollouts: int | None
    tokens: int | None
    bytes: int | None
    digest: tuple[str, str] | None
    mmap: FileEntry | None
    row_groups: int | None = None

    @property
    def parquet(self) -> FileEntry:
        return FileEntry(self.path, self.bytes, self.digest)


@dataclass(frozen=True)
class Step:
    """One step of one split as the manifest records it. `denominators` holds the step's loss
    denominators (STEP_FIELDS: step_mask_sum, step_rollouts, step_samples, step_groups; None
    where an entry lacks one); `schedule` the --schedule slime record (None under the balanced
    layout); `record` the whole entry. Mappings and lists are the manifest's own (plain JSON
    values, which serialise as read): not to be changed."""

    split: str
    step: int
    input: str | None
    samples: int | None
    rows: int | None
    rejected: int
    dropped: int
    rollouts: int | None
    tokens: int | None
    denominators: Mapping[str, int | None]
    schedule: Mapping[str, Any] | None
    shards: tuple[Shard, ...]
    record: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Pending:
    """An input left out while it was being written (`convert --skip-incomplete`); `step` is
    None where only the payload tells it."""

    path: str
    format: str | None
    split: str
    step: int | None
    reason: str

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in manifest_mod.PENDING_KEYS}

    @property
    def message(self) -> str:
        return manifest_mod.pending_message(self.as_dict())


@dataclass(frozen=True)
class Output:
    """A converted output, as its manifest describes it. Use `open_output`."""

    root: str
    schema_version: int
    tool_version: str | None
    options: Mapping[str, Any]
    counts: Mapping[str, Any]
    steps: tuple[Step, ...]  # manifest order
    pending: tuple[Pending, ...]
    generation: str | None
    rejects: Mapping[str, Any] | None
    anomalies: list
    manifest: Mapping[str, Any] = field(repr=False)  # the whole manifest, as read
    _index: Mapping[tuple[str, int], Step] = field(repr=False, compare=False, default_factory=dict)
    _warned: set = field(repr=False, compare=False, default_factory=set)
    # what this output's batch iterators share (output/stepcache.py)
    _shared: dict = field(repr=False, compare=False, default_factory=dict)
    # the manifest file as it was when read (inode, size, mtime); None on an object store
    stamp: tuple[int, int, int] | None = field(repr=False, compare=False, default=None)

    # -- steps ------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> str:
        return layout.manifest_path(self.root)

    @property
    def schema(self) -> pa.Schema:
        """The schema every shard of this output carries (its keep_text, its schema version)."""
        return expected_schema(bool(self.options.get("keep_text", False)), self.schema_version)

    @property
    def local_root(self) -> str | None:
        """OUT where its files are local (symbolic links must not lead out of it); None on an object store."""
        return None if storage.is_uri(self.root) else self.root

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits that have steps, in layout order (train, eval)."""
        return tuple(s for s in layout.SPLITS if any(st.split == s for st in self.steps))

    def steps_of(self, split: str = "train") -> tuple[Step, ...]:
        """The steps of `split`, by step number."""
        _check_split(split)
        return tuple(sorted((s for s in self.steps if s.split == split), key=lambda s: s.step))

    def step_numbers(self, split: str = "train") -> list[int]:
        return [s.step for s in self.steps_of(split)]

    def has_step(self, step: int, split: str = "train") -> bool:
        return (split, step) in self._index

    def step(self, step: int, split: str = "train") -> Step:
        """One step; UsageError naming the steps there are when it is not in the output."""
        _check_split(split)
        found = self._index.get((split, step))
        if found is None:
            raise UsageError(f"{self.root}: no {split} step {step} (steps: {ranges(self.step_numbers(split))})")
        return found

    def num_shards(self, split: str = "train") -> int:
        """Shards per step of `split` (options.shards when it has no step)."""
        steps = self.steps_of(split)
        if steps:
            return len(steps[0].shards)
        n = self.options.get("shards")
        return n if _is_int(n) else 0

    def shard(self, step: int, shard: int, split: str = "train") -> Shard:
        s = self.step(step, split)
        if not _is_int(shard) or not 0 <= shard < len(s.shards):
            raise UsageError(f"{self.root}: shard {shard} out of range: this output has {len(s.shards)} shard(s) per step")
        return s.shards[shard]

    def structure_problems(self) -> list[str]:
        """Every field verify relies on that the manifest lacks or has of the wrong type
        (manifest.structure_problems: stricter than open_output, e.g. digests required)."""
        return manifest_mod.structure_problems(self.manifest)

    def pending_of(self, split: str | None = None) -> tuple[Pending, ...]:
        return tuple(p for p in self.pending if split is None or p.split == split)

    # -- files ------------------------------------------------------------------------------
    def full_path(self, rel: str) -> str:
        """A path the manifest lists (relative to OUT) as a path or URI to read."""
        return storage.join(self.root, rel)

    def paths(self, step: int, shard: int, split: str = "train") -> tuple[str, str | None]:
        """(Parquet path, Arrow IPC path or None) of one shard."""
        sh = self.shard(step, shard, split)
        return self.full_path(sh.path), (self.full_path(sh.mmap.path) if sh.mmap else None)

    def source(self, sh: Shard, source: str = "auto") -> tuple[str, str, FileEntry]:
        """("arrow" or "parquet", path, manifest entry) of the file to read for `sh`: `auto`
        takes the IPC copy where the manifest lists it and it exists (a missing one is warned
        about once, then Parquet is read)."""
        if source not in SOURCES:
            raise UsageError(f"source: expected one of {', '.join(SOURCES)}, got {source!r}")
        parquet = self.full_path(sh.path)
        if source == "arrow" and sh.mmap is None:
            raise UsageError(f"{parquet}: no Arrow IPC copy (converted with --no-mmap)")
        if source != "parquet" and sh.mmap is not None:
            ipc = self.full_path(sh.mmap.path)
            if source == "arrow" or storage.exists(ipc):
                return "arrow", ipc, sh.mmap
            if "missing_ipc" not in self._warned:
                self._warned.add("missing_ipc")
                warnings.warn(f"{ipc}: listed in the manifest but missing; reading Parquet instead (slower)",
                              RuntimeWarning, stacklevel=3)
        return "parquet", parquet, sh.parquet

    def table(self, step: int, shard: int, split: str = "train", *, columns: list[str] | None = None,
              source: str = "auto", verify: bool = False) -> pa.Table:
        """Shard `shard` of `step` as a pyarrow Table (the `columns` given, else all): views of
        the memory-mapped Arrow IPC copy where present, else the Parquet file read. Its size
        and row count are checked against the manifest, its digest too with verify=True; its
        file kind, schema and Arrow structure always (output/files.py)."""
        sh = self.shard(step, shard, split)
        kind, path, entry = self.source(sh, source)
        try:
            if kind == "arrow":
                t = read_ipc(path, entry, verify, root=self.local_root, schema=self.schema, columns=columns)
            else:
                t = read_parquet(path, entry, verify, columns, root=self.local_root, schema=self.schema)
        except IntegrityError:
            self.check_current(path)  # a file gone or changed with its output: say that
            raise
        self.check_current(path)
        check_rows(path, sh, t.num_rows)
        return t

    def check_current(self, path: str) -> None:
        """After a shard file was opened: the output is still the one whose manifest was read.
        A commit moves the old manifest aside before any shard, so if the manifest is unchanged
        now, the file opened was this output's (an open file keeps its bytes when a later
        commit renames another into its place); else IntegrityError, never old and new mixed.
        On an object store a new run writes its own generation of files and leaves the old
        one's until its commit, after which they are gone (the read fails: missing)."""
        if self.stamp is not None and _stamp(self.manifest_path) != self.stamp:
            raise IntegrityError(f"{self.root}: the output was replaced by another conversion while {path} was read "
                                 "(its manifest changed); open it again")

    def iter_batches(self, rank: int, world_size: int | None = None, max_tokens: int | None = None,
                     steps: list[int] | None = None, backend: str = "numpy", verify: bool = False, *,
                     split: str = "train", source: str = "auto"):
        """Rank `rank`'s batches, one per micro-batch in step order, as numpy arrays: a
        BatchIterator (output/batches.py, which says what each argument does) with
        `state_dict()` / `load_state_dict()`. torch tensors: `open_dataset(OUT).iter_batches`."""
        from .batches import BACKENDS, BatchIterator

        if backend != "numpy":
            raise UsageError(f"backend: the output model hands out numpy batches (backend='numpy'), got {backend!r}"
                             + ("; torch batches come from rollout_cli.loader.open_dataset(OUT).iter_batches"
                                if backend in BACKENDS else ""))
        _check_split(split)
        return BatchIterator(self, rank, split=split, world_size=world_size, max_tokens=max_tokens, steps=steps,
                             verify=verify, source=source)

    def tables(self, step: int, split: str = "train", **kw) -> Iterator[pa.Table]:
        """Every shard of a step, in shard order, as table() reads it."""
        for r in range(len(self.step(step, split).shards)):
            yield self.table(step, r, split, **kw)


def _check_split(split: str) -> None:
    if split not in layout.SPLITS:
        raise UsageError(f"split: expected one of {', '.join(layout.SPLITS)}, got {split!r}")


# ------------------------------------------------------------------------------------------
# the manifest, parsed once
# ------------------------------------------------------------------------------------------


def open_output(out: str | os.PathLike) -> Output:
    """A converted output (a local folder or an object-store URI such as s3://bucket/out):
    its manifest read and checked once. ManifestError (exit 4) names what is broken."""
    root = os.fspath(out)
    if storage.is_uri(root):
        return from_manifest(root, manifest_mod.read(root))
    path = layout.manifest_path(root)
    for _ in range(10):  # the manifest read is the one whose file was stamped (no commit between)
        before = _stamp(path)
        m = manifest_mod.read(root)
        if before is not None and _stamp(path) == before:
            break
    return replace(from_manifest(root, m), stamp=before)


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def from_manifest(root: str, m: dict) -> Output:
    """The model of the manifest `m` (as manifest.read returned it) of the output at `root`."""
    path = layout.manifest_path(root)

    def broken(detail: str, invariant: str = "manifest_structure") -> ManifestError:
        return ManifestError(path, invariant, detail)

    problem = manifest_mod.pending_problem(m)
    if problem:
        raise broken(problem)
    opts = m.get("options")
    if opts is not None and not isinstance(opts, dict):
        raise broken(f"options: expected an object, got {type(opts).__name__}")
    entries = m.get("steps")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise broken(f"steps: expected a list, got {type(entries).__name__}")
    steps = tuple(_step(e, i, broken) for i, e in enumerate(entries))
    index: dict[tuple[str, int], Step] = {}
    for s in steps:
        if (s.split, s.step) in index:
            raise broken(f"{s.split} step {s.step} is listed twice", "duplicate_step")
        index[(s.split, s.step)] = s
    for split in layout.SPLITS:
        counts = sorted({len(s.shards) for s in steps if s.split == split})
        if len(counts) > 1:
            raise broken(f"{split} steps have different shard counts {counts}", "shard_layout")
    generation = m.get("generation")
    if generation is not None and not layout.is_generation(generation):
        raise broken(f"generation: expected lowercase hex digits, got {generation!r}")
    pending = tuple(Pending(p["path"], p.get("format"), p["split"], p.get("step"), p["reason"])
                    for p in manifest_mod.pending_steps(m))
    return Output(
        root=root, schema_version=m["schema_version"], tool_version=m.get("tool_version"),
        options=opts or {}, counts=m.get("counts") or {}, steps=steps, pending=pending,
        generation=generation, rejects=m.get("rejects"), anomalies=m.get("anomalies") or [],
        manifest=m, _index=MappingProxyType(index),
    )


def _opt_int(d: dict, key: str, where: str, broken) -> int | None:
    v = d.get(key)
    if v is not None and not (_is_int(v) and v >= 0):
        raise broken(f"{where}.{key}: expected an integer >= 0, got {v!r}")
    return v


def _file(d: Any, top: str, where: str, broken) -> FileEntry:
    if not isinstance(d, dict) or not isinstance(d.get("path"), str):
        raise broken(f"{where}: malformed shard entry {str(d)[:200]}")
    if not layout.is_safe(d["path"], (top,)):
        raise broken(f"{where}: shard path {d['path']!r} is outside {top}/ (or not a normalised relative path)")
    dg = hashing.digest_of(d)
    if dg is not None and not isinstance(dg[1], str):
        raise broken(f"{where}.{dg[0]}: expected a hex digest, got {dg[1]!r}")
    return FileEntry(d["path"], _opt_int(d, "bytes", where, broken), dg)


def _step(e: Any, i: int, broken) -> Step:
    where = f"steps[{i}]"
    if not isinstance(e, dict):
        raise broken(f"{where}: malformed step entry {str(e)[:200]}")
    split, step, shards = e.get("split"), e.get("step"), e.get("shards")
    if split not in layout.SPLITS:
        raise broken(f"{where}.split: expected one of {', '.join(layout.SPLITS)}, got {split!r}")
    if not _is_int(step) or not isinstance(shards, list) or not shards:
        raise broken(f"{where}: malformed step entry {str(e)[:200]}")
    tree = layout.split_tree(split)
    parsed = []
    for r, d in enumerate(shards):
        w = f"{split} step {step}: shard {r}"
        f = _file(d, tree, w, broken)
        mm = d.get("mmap")
        if mm is not None and not isinstance(mm, dict):
            raise broken(f"{w}.mmap: expected an object or null, got {mm!r}")
        parsed.append(Shard(
            split=split, step=step, index=r, path=f.path, rows=_opt_int(d, "rows", w, broken),
            rollouts=_opt_int(d, "rollouts", w, broken), tokens=_opt_int(d, "tokens", w, broken),
            bytes=f.bytes, digest=f.digest,
            mmap=_file(mm, f"{layout.MMAP}/{tree}", f"{w}.mmap", broken) if mm is not None else None,
            row_groups=_opt_int(d, "row_groups", w, broken)))
    sched = e.get("schedule")
    if sched is not None and not isinstance(sched, dict):
        raise broken(f"{where}.schedule: expected an object or null, got {type(sched).__name__}")
    return Step(
        split=split, step=step, input=e.get("input"),
        samples=_opt_int(e, "samples", where, broken), rows=_opt_int(e, "rows", where, broken),
        rejected=_opt_int(e, "rejected", where, broken) or 0, dropped=_opt_int(e, "dropped", where, broken) or 0,
        rollouts=_opt_int(e, "rollouts", where, broken), tokens=_opt_int(e, "tokens", where, broken),
        denominators=MappingProxyType({k: _opt_int(e, k, where, broken) for k in STEP_FIELDS}),
        schedule=sched, shards=tuple(parsed), record=e)
