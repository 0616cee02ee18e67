"""verify: check a converted output against its manifest, shard by shard.

`verify_output(out, quick=False)` returns plain data: what was checked and a list of failures,
each `{"file", "invariant", "detail"}` (`file` relative to OUT). It never raises for a broken
output (only `UsageError` when OUT is not a directory); `check_output` raises `IntegrityError`
(exit 4) when anything fails.

Full mode reads every shard once, one row group at a time (memory is bounded by the row-group
size plus a small per-rollout summary of one step), and the Arrow IPC copy through a memory map.
`quick` checks only what needs no data pages: presence and sizes, footers (schema, row counts),
the manifest's arithmetic, the layout, stray files and the rejects line count.

Invariants (the `invariant` names in failures):

manifest           manifest.json is present, JSON, and a rollout-cli manifest
schema_version     the manifest's schema version is one this tool reads (core.versions.READ_SCHEMA_VERSIONS),
                   and every shard's is the manifest's
manifest_structure the manifest has the fields and types verify needs; paths stay inside OUT
duplicate_step     no (split, step) appears twice
shard_layout       a step has `options.shards` shards named {data|eval}/step-S/shard-r-of-N.parquet
                   (on an object store inside a generation folder gen/<id>/, core/layout.py)
file_present       every file the manifest lists exists
size               its size is the recorded `bytes`
checksum           its digest (the manifest's `blake3`, or `sha256`, key) is the recorded one (full mode)
readable           Parquet / Arrow IPC that parses
schema             the shard's Arrow schema equals `schema.train_schema(keep_text, the manifest's schema_version)`
                   (an output of schema version 2 has no remove_sample column)
rows, tokens, rollouts   per shard and per step, as recorded (rows from the footer in quick mode)
not_null           the non-nullable columns hold no nulls
step_column        every row's `step` is the step the manifest files it under
loss_mask_length   len(loss_mask) == response_length
loss_mask_values   loss_mask values are 0 or 1
remove_sample      a row whose remove_sample is true has a loss_mask of zeros (slime zeroes it)
total_length       total_length == len(tokens)
status             status is one of schema.STATUSES, and truncated == (status == "truncated")
rollout_split      no rollout is split across shards of a step (balanced layout; slime's may split one)
rollout_mask_sum_shared  siblings (same step, rollout_id) share rollout_mask_sum
rollout_mask_sum_total   ... and it equals the sum of their loss_mask totals
group_fields_shared  rows of one prompt group (same step, group_index) share group_mask_sum and
                   group_rollouts (rows without group_index are not checked)
group_fields_total   ... which equal the group's loss_mask total and its number of rollouts
rollout_reward_shared  under options.reward_baseline "rollout", samples of one rollout in one
                   prompt group share their reward
step_fields        every row's step_mask_sum, step_rollouts, step_samples, step_groups equal the step's
                   values in the manifest (so they are equal across its shards), and those equal
                   the step's loss_mask total, rollouts and rows
mmap_content       the Arrow IPC copy holds the same rows as the Parquet shard (full mode)
counts             rows + dropped + rejected = input samples, per step and in total; step and shard sums agree
schedule           --schedule slime: the step's record adds up (one num_microbatches and global batch size per
                   optimizer step, kept + dropped rollouts = the step's); every row carries rollout_position,
                   optimizer_step and micro_batch (none under balanced); positions are 0..n-1 once across
                   shards and dropped rollouts; each shard runs num_microbatches[s] micro-batches per optimizer
                   step, in order; no rollout spans two optimizer steps (full mode)
rejects            rejects.jsonl matches the manifest: count, line count, checksum, per-step counts
unexpected_file    nothing under OUT/data, OUT/eval or OUT/mmap (and, on an object store, under
                   those trees of the manifest's generation) that the manifest does not list;
                   other generations' files (an earlier dataset's, an interrupted run's: the next
                   commit removes them) are noted, not failed

OUT may be a local folder or an object-store URI (`s3://bucket/out`): files are then read
through the pyarrow filesystem, each once.
"""
from __future__ import annotations

import io
import json
import os
import re
from typing import Any

from ..core import hashing, storage
from ..core.hashing import DIGEST_KEYS, digest_of, file_digest  # noqa: F401 (re-exported)
from ..core.errors import IntegrityError, UsageError
from ..core import layout
from ..output import manifest as manifest_mod
from ..core.layout import MANIFEST, REJECTS, STAGING, TREES
from ..pipeline.fields import STEP_FIELDS

_HEX = re.compile(r"[0-9a-f]{64}")
_EXAMPLES = 3  # offending rows quoted per failure


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Report:
    def __init__(self, out: str, quick: bool):
        self.out = out
        self.quick = quick
        self.failures: list[dict] = []
        self.files: list[str] = []
        self.notes: list[str] = []
        self.bytes = 0
        self.hashed = 0
        self.rows = 0
        self.row_problems = False  # a row invariant failed in one of its shards
        self.shards = 0

    def fail(self, file: str, invariant: str, detail: str) -> None:
        self.failures.append({"file": file, "invariant": invariant, "detail": detail})

    def result(self, manifest: dict | None) -> dict:
        m = manifest or {}
        steps = m.get("steps") if isinstance(m.get("steps"), list) else []
        return {
            "out": self.out,
            "ok": not self.failures,
            "quick": self.quick,
            "schema_version": m.get("schema_version"),
            "tool_version": m.get("tool_version"),
            "checked": {
                "files": len(self.files),
                "shards": self.shards,
                "steps": sum(1 for s in steps if isinstance(s, dict) and s.get("split") == "train"),
                "eval_steps": sum(1 for s in steps if isinstance(s, dict) and s.get("split") == "eval"),
                "rows": self.rows,
                "bytes": self.bytes,
                "hashed_bytes": self.hashed,
            },
            "files": self.files,
            "failures": self.failures,
            "notes": self.notes,
            "pending": manifest_mod.pending_steps(m) if not manifest_mod.pending_problem(m) else [],
        }


# ----------------------------------------------------------------------------- the manifest


def _read_manifest(out: str, rep: _Report) -> dict | None:
    try:
        m = manifest_mod.read(out)
    except manifest_mod.ManifestError as e:
        if e.parsed:
            rep.files.append(MANIFEST)
        rep.fail(MANIFEST, e.invariant, e.detail)
        return None
    rep.files.append(MANIFEST)
    return m


def _structure(m: dict, rep: _Report) -> bool:
    """Check the fields verify relies on; False (with failures) when it cannot go on."""
    bad: list[str] = []

    def need_int(d: dict, key: str, where: str, lo: int = 0) -> None:
        v = d.get(key)
        if not _is_int(v) or v < lo:
            bad.append(f"{where}.{key}: expected an integer >= {lo}, got {v!r}")

    def need_digest(d: dict, where: str) -> None:
        dg = digest_of(d)
        if dg is None:
            bad.append(f"{where}: no checksum (expected one of the keys {', '.join(DIGEST_KEYS)})")
        elif not isinstance(dg[1], str) or not _HEX.fullmatch(dg[1]):
            bad.append(f"{where}.{dg[0]}: expected 64 hex digits, got {dg[1]!r}")

    opts = m.get("options")
    if not isinstance(opts, dict):
        bad.append(f"options: expected an object, got {type(opts).__name__}")
    else:
        need_int(opts, "shards", "options", 1)
        if not isinstance(opts.get("keep_text", False), bool):
            bad.append(f"options.keep_text: expected true/false, got {opts.get('keep_text')!r}")
    counts = m.get("counts")
    if not isinstance(counts, dict):
        bad.append(f"counts: expected an object, got {type(counts).__name__}")
    else:
        for k in ("input_samples", "rows", "rejected", "steps", "eval_steps"):
            need_int(counts, k, "counts")
    if not isinstance(m.get("inputs", []), list):
        bad.append("inputs: expected a list")
    if "generation" in m and not layout.is_generation(m["generation"]):
        bad.append(f"generation: expected lowercase hex digits, got {m['generation']!r}")
    rj = m.get("rejects")
    if rj is not None:
        if not isinstance(rj, dict):
            bad.append(f"rejects: expected an object or null, got {type(rj).__name__}")
        else:
            if rj.get("path") != layout.in_generation(m.get("generation"), REJECTS):
                bad.append(f"rejects.path: expected {layout.in_generation(m.get('generation'), REJECTS)!r}, got {rj.get('path')!r}")
            need_int(rj, "count", "rejects")
            need_digest(rj, "rejects")
    steps = m.get("steps")
    if not isinstance(steps, list):
        bad.append(f"steps: expected a list, got {type(steps).__name__}")
        steps = []
    for i, s in enumerate(steps):
        where = f"steps[{i}]"
        if not isinstance(s, dict):
            bad.append(f"{where}: expected an object")
            continue
        if s.get("split") not in layout.SPLITS:
            bad.append(f"{where}.split: expected 'train' or 'eval', got {s.get('split')!r}")
        need_int(s, "step", where, -(2**63))
        for k in ("samples", "rows", "rejected", "rollouts", "tokens", *STEP_FIELDS):
            need_int(s, k, where)
        tps = s.get("tokens_per_shard")
        if not isinstance(tps, list) or not all(_is_int(t) for t in tps):
            bad.append(f"{where}.tokens_per_shard: expected a list of integers")
        shards = s.get("shards")
        if not isinstance(shards, list):
            bad.append(f"{where}.shards: expected a list")
            continue
        for r, sh in enumerate(shards):
            w = f"{where}.shards[{r}]"
            if not isinstance(sh, dict):
                bad.append(f"{w}: expected an object")
                continue
            if not layout.is_safe(sh.get("path"), tuple(layout.SPLIT_TREES.values())) or not sh["path"].endswith(".parquet"):
                bad.append(f"{w}.path: expected a .parquet path under data/ or eval/, got {sh.get('path')!r}")
            for k in ("rows", "rollouts", "tokens", "bytes"):
                need_int(sh, k, w)
            need_digest(sh, w)
            mm = sh.get("mmap")
            if mm is not None:
                if not isinstance(mm, dict):
                    bad.append(f"{w}.mmap: expected an object or null")
                    continue
                if not layout.is_safe(mm.get("path"), (layout.MMAP,)) or not mm["path"].endswith(".arrow"):
                    bad.append(f"{w}.mmap.path: expected an .arrow path under mmap/, got {mm.get('path')!r}")
                need_int(mm, "bytes", w + ".mmap")
                need_digest(mm, w + ".mmap")
    for b in bad[:20]:
        rep.fail(MANIFEST, "manifest_structure", b)
    if len(bad) > 20:
        rep.fail(MANIFEST, "manifest_structure", f"... and {len(bad) - 20} more")
    return not bad


def _manifest_arithmetic(m: dict, rep: _Report) -> None:
    """Counts, layout and duplicates, from the manifest alone."""
    opts, counts, steps = m["options"], m["counts"], m["steps"]
    n_shards = opts["shards"]
    seen: set = set()
    paths: set = set()
    for s in steps:
        label = f"{s['split']} step {s['step']}"
        key = (s["split"], s["step"])
        if key in seen:
            rep.fail(MANIFEST, "duplicate_step", f"{label} is listed twice")
        seen.add(key)
        dropped = s.get("dropped", 0)
        if s["rows"] + dropped + s["rejected"] != s["samples"]:
            rep.fail(MANIFEST, "counts", f"{label}: rows {s['rows']} + dropped {dropped} + rejected {s['rejected']} != input samples {s['samples']}")
        if isinstance(s.get("schedule"), dict):
            _schedule_record(label, s, opts, rep)
        shards = s["shards"]
        for field in ("rows", "tokens"):
            total = sum(sh[field] for sh in shards)
            if total != s[field]:
                rep.fail(MANIFEST, "counts", f"{label}: its shards hold {total} {field}, the step records {s[field]}")
        if sum(sh["rollouts"] for sh in shards) != s["rollouts"] and "schedule" not in s:
            rep.fail(MANIFEST, "counts", f"{label}: its shards hold {sum(sh['rollouts'] for sh in shards)} rollouts, the step records {s['rollouts']}")
        for field, total in (("step_rollouts", s["rollouts"]), ("step_samples", s["rows"])):
            if s[field] != total:
                rep.fail(MANIFEST, "step_fields", f"{label}: {field} {s[field]}, the step records {total} {field[5:]}")
        if s["tokens_per_shard"] != [sh["tokens"] for sh in shards]:
            rep.fail(MANIFEST, "counts", f"{label}: tokens_per_shard {s['tokens_per_shard']} != the shards' tokens {[sh['tokens'] for sh in shards]}")
        if len(shards) != n_shards:
            rep.fail(MANIFEST, "shard_layout", f"{label}: {len(shards)} shards, options.shards is {n_shards}")
        for r, sh in enumerate(shards):
            want = layout.shard_path(s["split"], s["step"], r, len(shards))
            if not _laid_out(sh["path"], want, m):
                rep.fail(MANIFEST, "shard_layout", f"{label}: shard {r} is {sh['path']!r}, expected {want!r}")
            mm = sh.get("mmap")
            want_mm = layout.mmap_path(s["split"], s["step"], r, len(shards))
            if mm is not None and not _laid_out(mm["path"], want_mm, m):
                rep.fail(MANIFEST, "shard_layout", f"{label}: shard {r}'s mmap copy is {mm['path']!r}, expected {want_mm!r}")
            for p in (sh["path"], mm["path"] if mm else None):
                if p is None:
                    continue
                if p in paths:
                    rep.fail(MANIFEST, "shard_layout", f"{p} is listed twice")
                paths.add(p)
        if bool(opts.get("mmap", True)) != all(sh.get("mmap") is not None for sh in shards) and shards:
            rep.fail(MANIFEST, "shard_layout", f"{label}: options.mmap is {opts.get('mmap', True)}, but shards {'lack' if opts.get('mmap', True) else 'have'} mmap copies")
    totals = {
        "input_samples": sum(s["samples"] for s in steps),
        "rows": sum(s["rows"] for s in steps),
        "rejected": sum(s["rejected"] for s in steps),
        "steps": sum(1 for s in steps if s["split"] == "train"),
        "eval_steps": sum(1 for s in steps if s["split"] == "eval"),
    }
    for k, v in totals.items():
        if counts[k] != v:
            rep.fail(MANIFEST, "counts", f"counts.{k} is {counts[k]}, the steps add up to {v}")
    dropped = counts.get("dropped", 0)
    if dropped != sum(s.get("dropped", 0) for s in steps):
        rep.fail(MANIFEST, "counts", f"counts.dropped is {dropped}, the steps add up to {sum(s.get('dropped', 0) for s in steps)}")
    if counts["rows"] + dropped + counts["rejected"] != counts["input_samples"]:
        rep.fail(MANIFEST, "counts", f"counts: rows {counts['rows']} + dropped {dropped} + rejected {counts['rejected']} != input samples {counts['input_samples']}")
    inputs = m.get("inputs") or []
    if inputs and all(isinstance(i, dict) and _is_int(i.get("samples")) for i in inputs):
        n_in = sum(i["samples"] for i in inputs)
        if n_in != counts["input_samples"]:
            rep.fail(MANIFEST, "counts", f"inputs hold {n_in} samples, counts.input_samples is {counts['input_samples']}")


def _laid_out(path: str, want: str, m: dict) -> bool:
    """`path` is the layout path `want`: as it is (local), or inside a generation folder when the
    manifest names one (object stores; a step --resume reused keeps its earlier generation)."""
    if path == want:
        return True
    generation, inner = layout.split_generation(path)
    return generation is not None and "generation" in m and inner == want


def _full(out: str, rel: str) -> str:
    return storage.join(out, rel) if storage.is_uri(out) else os.path.join(out, *rel.split("/"))


def _open(full: str):
    """A random-access file for pyarrow: a memory map locally, a remote file otherwise."""
    import pyarrow as pa

    return storage.open_read(full, seekable=True) if storage.is_uri(full) else pa.memory_map(full)


def _schedule_record(label: str, s: dict, opts: dict, rep: _Report) -> None:
    """A --schedule slime step's record agrees with itself and with the step."""
    sc = s["schedule"]
    try:
        nmb, gbs, dropped = sc["num_microbatches"], sc["global_batch_sizes"], sc["dropped"]
        problems = []
        if len(nmb) != len(gbs) or len(nmb) != sc["optimizer_steps"]:
            problems.append(f"{len(nmb)} num_microbatches, {len(gbs)} global_batch_sizes, {sc['optimizer_steps']} optimizer steps")
        if any(n < 1 for n in nmb):
            problems.append(f"num_microbatches {nmb} holds a step without micro-batches")
        if sum(gbs) + len(dropped) != sc["rollouts"]:
            problems.append(f"global_batch_sizes {gbs} + {len(dropped)} dropped rollouts != the step's {sc['rollouts']} rollouts")
        if sum(d["samples"] for d in dropped) != s.get("dropped", 0) or any(len(d["positions"]) != d["samples"] for d in dropped):
            problems.append(f"dropped rollouts hold {sum(d['samples'] for d in dropped)} samples, the step records {s.get('dropped', 0)}")
        if opts.get("schedule") != "slime":
            problems.append("a schedule record, but options.schedule is not slime")
    except (KeyError, TypeError) as e:
        problems = [f"malformed schedule record ({e!r})"]
    for p in problems:
        rep.fail(MANIFEST, "schedule", f"{label}: {p}")


# ----------------------------------------------------------------------------- files


def _check_bytes(rel: str, full: str, entry: dict, rep: _Report) -> bool:
    """Presence, size and (full mode) checksum; True when the bytes are the recorded ones."""
    want_bytes = entry["bytes"]
    algorithm, want = digest_of(entry)
    rep.files.append(rel)
    if storage.is_uri(full):  # one HEAD for presence and size
        from pyarrow import fs as pafs

        info = storage.file_info(full)
        is_file, present, size = info.type == pafs.FileType.File, info.type != pafs.FileType.NotFound, info.size
    else:
        is_file, present = os.path.isfile(full), os.path.lexists(full)
        size = os.path.getsize(full) if is_file else None
    if not is_file:
        rep.fail(rel, "file_present", "listed in the manifest but missing" if not present else "listed in the manifest but not a regular file")
        return False
    rep.bytes += size
    if size != want_bytes:
        rep.fail(rel, "size", f"{size} bytes, the manifest records {want_bytes}")
        return False
    if rep.quick:
        return True
    try:
        got = storage.file_digest(full, algorithm)
    except OSError as e:
        rep.fail(rel, "readable", f"cannot read: {e}")
        return False
    rep.hashed += size
    if got != want:
        rep.fail(rel, "checksum", f"{algorithm} {got}, the manifest records {want}: the file changed since conversion")
        return False
    return True


def _schema_ok(rel: str, schema, expected, rep: _Report) -> bool:
    ok = True
    if not schema.equals(expected, check_metadata=False):
        got = {f.name: f for f in schema}
        diffs = []
        for f in expected:
            g = got.pop(f.name, None)
            if g is None:
                diffs.append(f"missing column {f.name}")
            elif not (g.type.equals(f.type) and g.nullable == f.nullable):
                diffs.append(f"{f.name}: {g.type}{'' if g.nullable else ' not null'}, expected {f.type}{'' if f.nullable else ' not null'}")
        diffs.extend(f"unexpected column {n}" for n in got)
        if not diffs:
            diffs.append("column order differs from the train schema")
        rep.fail(rel, "schema", "; ".join(diffs[:6]) + (f"; ... {len(diffs) - 6} more" if len(diffs) > 6 else ""))
        ok = False
    md = schema.metadata or {}
    v = md.get(b"rollout_cli.schema_version")
    want = expected.metadata[b"rollout_cli.schema_version"]  # the manifest's
    if v != want:
        rep.fail(rel, "schema_version", f"rollout_cli.schema_version {v.decode(errors='replace') if v else None!r} in the schema metadata, "
                                        f"expected {want.decode()} (the manifest's)")
        ok = False
    return ok


class _StepState:
    """Per-rollout summary of one step: shard, mask totals, rollout_mask_sum range."""

    def __init__(self):
        self.rollouts: dict[int, list] = {}  # id -> [shard, mask_total, rms_min, rms_max]
        self.complete = True  # every shard's content was read
        self.split: list[tuple[int, int, int]] = []  # (id, shard a, shard b)
        self.mask_total = 0
        self.rows = 0
        self.row_problems = False  # a row invariant failed in one of its shards
        # group_index -> [shard, mask_total, {rollout ids}, gms_min, gms_max, gr_min, gr_max]
        self.groups: dict[int, list] = {}
        self.grouped_rows = 0  # rows with a group_index
        self.unit_rewards: dict[tuple[int, int], list] = {}  # (group_index, rollout id) -> [shard, min, max]
        self.step_values: list[tuple[int, str, int, int]] = []  # (shard, column, min, max) per row group
        self.rollout_baseline = False
        self.sched: list[tuple] = []  # (shard, positions, optimizer steps, micro-batches, ids, nulls)


class _ShardTally:
    def __init__(self):
        self.rows = 0
        self.row_problems = False  # a row invariant failed in one of its shards
        self.tokens = 0
        self.ids: set = set()
        self.problems: dict[str, list] = {}  # invariant -> [count, examples]

    def bad(self, invariant: str, rows, describe) -> None:
        import numpy as np

        idx = np.flatnonzero(rows)
        if not len(idx):
            return
        entry = self.problems.setdefault(invariant, [0, []])
        entry[0] += len(idx)
        for i in idx[: max(0, _EXAMPLES - len(entry[1]))].tolist():
            entry[1].append(describe(i))


def _list_totals(arr):
    """(lengths, per-row value sums, min value, max value) of a list<int> array without nulls."""
    import numpy as np

    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    lo, hi = int(offsets[0]), int(offsets[-1])
    vals = values[lo:hi].astype(np.int64)
    cs = np.zeros(len(vals) + 1, dtype=np.int64)
    np.cumsum(vals, out=cs[1:])
    rel = offsets - lo
    sums = cs[rel[1:]] - cs[rel[:-1]]
    vmin = int(vals.min()) if len(vals) else 0
    vmax = int(vals.max()) if len(vals) else 0
    return np.diff(offsets).astype(np.int64), sums, vmin, vmax


def _check_rows(t, first_row: int, step: int, shard_no: int, tally: _ShardTally, st: _StepState) -> None:
    """Row invariants of one row group, and its contribution to the step summary."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..core.schema import CORE_FIELDS, STATUSES

    n = t.num_rows
    if not n:
        return

    def col(name):
        c = t.column(name)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c

    for f in CORE_FIELDS:
        if not f.nullable and f.name in t.column_names and t.column(f.name).null_count:
            c = col(f.name)
            tally.bad("not_null", c.is_null().to_numpy(zero_copy_only=False), lambda i, f=f: f"row {first_row + i}: {f.name} is null")
    if "not_null" in tally.problems:
        return  # the arithmetic below needs values
    steps = col("step").to_numpy()
    tally.bad("step_column", steps != step, lambda i: f"row {first_row + i}: step {int(steps[i])}, filed under step {step}")
    tok_len, _, _, _ = _list_totals(col("tokens"))
    total_length = col("total_length").to_numpy().astype(np.int64)
    tally.bad("total_length", tok_len != total_length, lambda i: f"row {first_row + i}: total_length {int(total_length[i])} != len(tokens) {int(tok_len[i])}")
    mask_len, mask_tot, mmin, mmax = _list_totals(col("loss_mask"))
    resp = col("response_length").to_numpy().astype(np.int64)
    tally.bad("loss_mask_length", mask_len != resp, lambda i: f"row {first_row + i}: len(loss_mask) {int(mask_len[i])} != response_length {int(resp[i])}")
    if mmin < 0 or mmax > 1:
        lens = mask_len
        lm = col("loss_mask")
        vals = lm.values.to_numpy(zero_copy_only=False)[int(lm.offsets[0].as_py()):int(lm.offsets[-1].as_py())]
        bad_rows = np.zeros(n, dtype=bool)
        bad_at = np.flatnonzero(vals > 1)
        bad_rows[np.searchsorted(np.cumsum(lens), bad_at, side="right")] = True
        tally.bad("loss_mask_values", bad_rows, lambda i: f"row {first_row + i}: loss_mask holds values other than 0/1")
    if "remove_sample" in t.column_names:  # schema version 3 on
        removed = col("remove_sample").to_numpy(zero_copy_only=False)
        tally.bad("remove_sample", removed & (mask_tot != 0),
                  lambda i: f"row {first_row + i}: remove_sample is true but its loss_mask sums to {int(mask_tot[i])} (expected all zeros)")
    status = col("status")
    known = pc.is_in(status, value_set=pa.array(STATUSES)).to_numpy(zero_copy_only=False)
    status_py = None

    def st_of(i):
        nonlocal status_py
        if status_py is None:
            status_py = status.to_pylist()
        return status_py[i]

    tally.bad("status", ~known, lambda i: f"row {first_row + i}: status {st_of(i)!r}")
    trunc = col("truncated").to_numpy(zero_copy_only=False)
    is_trunc = pc.equal(status, "truncated").to_numpy(zero_copy_only=False)
    tally.bad("status", trunc != is_trunc, lambda i: f"row {first_row + i}: truncated {bool(trunc[i])} but status {st_of(i)!r}")
    tally.rows += n
    tally.tokens += int(total_length.sum())
    ids = col("rollout_id").to_numpy()
    if "micro_batch" in t.column_names:
        cols = [col(c) for c in ("optimizer_step", "micro_batch")]
        nulls = sum(c.null_count for c in cols)
        vals = [col("rollout_position").to_numpy().astype(np.int64)] + [c.fill_null(-1).to_numpy().astype(np.int64) for c in cols]
        st.sched.append((shard_no, *vals, ids, nulls))
    rms = col("rollout_mask_sum").to_numpy()
    order = np.argsort(ids, kind="stable")
    sids = ids[order]
    starts = np.flatnonzero(np.r_[True, sids[1:] != sids[:-1]])
    uniq = sids[starts]
    tot = np.add.reduceat(mask_tot[order], starts)
    rmin = np.minimum.reduceat(rms[order], starts)
    rmax = np.maximum.reduceat(rms[order], starts)
    st.mask_total += int(mask_tot.sum())
    st.rows += n
    for name in STEP_FIELDS:
        v = col(name).to_numpy()
        st.step_values.append((shard_no, name, int(v.min()), int(v.max())))
    _group_summary(col, ids, mask_tot, shard_no, st)
    for rid, a, lo, hi in zip(uniq.tolist(), tot.tolist(), rmin.tolist(), rmax.tolist()):
        tally.ids.add(rid)
        e = st.rollouts.get(rid)
        if e is None:
            st.rollouts[rid] = [shard_no, a, lo, hi]
        else:
            if e[0] != shard_no:
                st.split.append((rid, e[0], shard_no))
            e[1] += a
            e[2] = min(e[2], lo)
            e[3] = max(e[3], hi)


def _group_summary(col, ids, mask_tot, shard_no: int, st: _StepState) -> None:
    """One row group's contribution to the per-prompt-group summary (rows with a group_index)."""
    import numpy as np

    gcol = col("group_index")
    has = gcol.is_valid().to_numpy(zero_copy_only=False)
    if not has.any():
        return
    gi = (gcol.fill_null(0) if gcol.null_count else gcol).to_numpy()[has]
    st.grouped_rows += int(has.sum())
    rid, mt = ids[has], mask_tot[has]
    gms, gro = col("group_mask_sum").to_numpy()[has], col("group_rollouts").to_numpy()[has]
    order = np.argsort(gi, kind="stable")
    sg = gi[order]
    starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]])
    ends = np.r_[starts[1:], len(sg)]
    sums = np.add.reduceat(mt[order], starts)
    red = [f.reduceat(a[order], starts) for a in (gms, gro) for f in (np.minimum, np.maximum)]
    for k, g in enumerate(sg[starts].tolist()):
        e = st.groups.get(g)
        members = set(rid[order[starts[k]:ends[k]]].tolist())
        lo_s, hi_s, lo_r, hi_r = (int(r[k]) for r in red)
        if e is None:
            st.groups[g] = [shard_no, int(sums[k]), members, lo_s, hi_s, lo_r, hi_r]
        else:
            e[1] += int(sums[k])
            e[2] |= members
            e[3], e[4], e[5], e[6] = min(e[3], lo_s), max(e[4], hi_s), min(e[5], lo_r), max(e[6], hi_r)
    if st.rollout_baseline:
        rw = col("reward").to_numpy()[has]
        for g, r, w in zip(gi.tolist(), rid.tolist(), rw.tolist()):
            u = st.unit_rewards.get((g, r))
            if u is None:
                st.unit_rewards[(g, r)] = [shard_no, w, w]
            elif w != u[1] or w != u[2]:
                u[1], u[2] = min(u[1], w), max(u[2], w)


def _check_groups(label: str, s: dict, paths: list[str], st: _StepState, rep: _Report) -> None:
    """The step's group and step denominators, once all its shards are read."""
    found: dict[str, list] = {"group_fields_shared": [], "group_fields_total": [], "rollout_reward_shared": [], "step_fields": []}
    for g, (shard, mt, members, lo_s, hi_s, lo_r, hi_r) in st.groups.items():
        if lo_s != hi_s or lo_r != hi_r:
            found["group_fields_shared"].append((shard, f"{label}: group_index {g}: rows carry group_mask_sum {lo_s}..{hi_s}, group_rollouts {lo_r}..{hi_r}"))
        elif st.complete and not st.row_problems and (lo_s != mt or lo_r != len(members)):
            found["group_fields_total"].append((shard, f"{label}: group_index {g}: group_mask_sum {lo_s}, group_rollouts {lo_r}; "
                                                       f"its rows hold loss_mask total {mt} and {len(members)} rollouts"))
    for (g, r), (shard, lo, hi) in st.unit_rewards.items():
        if lo != hi:
            found["rollout_reward_shared"].append((shard, f"{label}: group_index {g}: rollout {r}: its samples carry rewards {lo} and {hi}"))
    for shard, name, lo, hi in st.step_values:
        if lo != s[name] or hi != s[name]:
            found["step_fields"].append((shard, f"{label}: {name} {lo}..{hi} in its rows, the manifest records {s[name]}"))
    # totals are compared only over clean rows (a broken loss_mask is reported as such, once)
    if st.complete and not st.row_problems and not found["step_fields"]:
        actuals = [("step_mask_sum", st.mask_total), ("step_samples", st.rows), ("step_rollouts", len(st.rollouts))]
        if st.rows and st.grouped_rows == st.rows:  # every row names its group_index
            actuals.append(("step_groups", len(st.groups)))
        for name, actual in actuals:
            if s[name] != actual:
                found["step_fields"].append((0, f"{label}: {name} {s[name]}, its shards hold {actual}"))
    for inv, items in found.items():
        items = list(dict.fromkeys(items))  # a shard's row groups repeat the same finding
        for shard, detail in items[:_EXAMPLES]:
            rep.fail(paths[shard] if paths else MANIFEST, inv, detail)
        if len(items) > _EXAMPLES:
            rep.fail(paths[items[_EXAMPLES][0]] if paths else MANIFEST, inv, f"{label}: ... {len(items) - _EXAMPLES} more")


def _check_parquet_shard(rel: str, full: str, sh: dict, step: int, shard_no: int, expected, rep: _Report, st: _StepState,
                         mm_full: str | None, mm_ok: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(_open(full) if storage.is_uri(full) else full)
        schema = pf.schema_arrow
    except (OSError, pa.ArrowException) as e:
        rep.fail(rel, "readable", f"not a readable Parquet file: {e}")
        st.complete = False
        return
    if not _schema_ok(rel, schema, expected, rep):
        st.complete = False
        return
    if pf.metadata.num_rows != sh["rows"]:
        rep.fail(rel, "rows", f"{pf.metadata.num_rows} rows in the footer, the manifest records {sh['rows']}")
    if rep.quick:
        rep.rows += pf.metadata.num_rows
        st.complete = False
        return
    mm_table = None
    if mm_full is not None and mm_ok:
        try:
            mm_table = pa.ipc.open_file(_open(mm_full)).read_all()
        except (OSError, pa.ArrowException):
            mm_table = None  # reported by the IPC check
    mm_rel = sh["mmap"]["path"] if sh.get("mmap") else None
    tally = _ShardTally()
    first = 0
    mm_mismatch = None
    try:
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g)
            _check_rows(t, first, step, shard_no, tally, st)
            if mm_table is not None and mm_mismatch is None:
                other = mm_table.slice(first, t.num_rows)
                if other.num_rows != t.num_rows or not other.equals(t.cast(other.schema) if not t.schema.equals(other.schema) else t):
                    mm_mismatch = f"rows {first}..{first + t.num_rows - 1} differ from the Parquet shard {rel}"
            first += t.num_rows
    except (OSError, pa.ArrowException) as e:
        rep.fail(rel, "readable", f"cannot read row group near row {first}: {e}")
        st.complete = False
        return
    if mm_table is not None and mm_mismatch is None and mm_table.num_rows != first:
        mm_mismatch = f"{mm_table.num_rows} rows, the Parquet shard {rel} has {first}"
    if mm_mismatch:
        rep.fail(mm_rel, "mmap_content", mm_mismatch)
    rep.rows += tally.rows
    st.row_problems |= bool(tally.problems)
    for inv, (count, examples) in tally.problems.items():
        rep.fail(rel, inv, f"{count} row(s): " + "; ".join(examples) + ("; ..." if count > len(examples) else ""))
    if tally.problems.get("not_null"):
        st.complete = False
        return
    if tally.rows != sh["rows"]:
        rep.fail(rel, "rows", f"{tally.rows} rows, the manifest records {sh['rows']}")
    if tally.tokens != sh["tokens"]:
        rep.fail(rel, "tokens", f"{tally.tokens} tokens, the manifest records {sh['tokens']}")
    if len(tally.ids) != sh["rollouts"]:
        rep.fail(rel, "rollouts", f"{len(tally.ids)} rollouts, the manifest records {sh['rollouts']}")


def _check_ipc(rel: str, full: str, sh: dict, expected, rep: _Report) -> bool:
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(_open(full))
        schema = reader.schema
        rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    except (OSError, pa.ArrowException) as e:
        rep.fail(rel, "readable", f"not a readable Arrow IPC file: {e}")
        return False
    ok = _schema_ok(rel, schema, expected, rep)
    if rows != sh["rows"]:
        rep.fail(rel, "rows", f"{rows} rows, the manifest records {sh['rows']}")
        ok = False
    return ok


def _check_step(out: str, s: dict, expected, rep: _Report, rollout_baseline: bool = False) -> None:
    label = f"{s['split']} step {s['step']}"
    st = _StepState()
    st.rollout_baseline = rollout_baseline and s["split"] == "train"
    for r, sh in enumerate(s["shards"]):
        rep.shards += 1
        rel = sh["path"]
        full = _full(out, rel)
        mm = sh.get("mmap")
        mm_full = _full(out, mm["path"]) if mm else None
        mm_ok = False
        if mm:
            mm_ok = _check_bytes(mm["path"], mm_full, mm, rep) and _check_ipc(mm["path"], mm_full, sh, expected, rep)
        if _check_bytes(rel, full, sh, rep):
            _check_parquet_shard(rel, full, sh, s["step"], r, expected, rep, st, mm_full, mm_ok)
        else:
            st.complete = False
    paths = [sh["path"] for sh in s["shards"]]
    for rid, a, b in ([] if "schedule" in s else st.split[:_EXAMPLES]):
        rep.fail(paths[b], "rollout_split", f"{label}: rollout {rid} is in {paths[a]} and {paths[b]}")
    if len(st.split) > _EXAMPLES and "schedule" not in s:
        rep.fail(paths[st.split[_EXAMPLES][2]], "rollout_split", f"{label}: ... {len(st.split) - _EXAMPLES} more split rollouts")
    scheduled = isinstance(s.get("schedule"), dict)
    if scheduled or st.sched:
        _schedule_rows(label, s, st, paths, rep)
    shared, total = [], []
    for rid, (shard, mt, lo, hi) in st.rollouts.items():
        if lo != hi:
            shared.append((shard, f"{label}: rollout {rid}: siblings carry rollout_mask_sum {lo} and {hi}"))
        elif lo != mt and st.complete:
            total.append((shard, f"{label}: rollout {rid}: rollout_mask_sum {lo}, its samples' loss_mask totals add up to {mt}"))
    for inv, found in (("rollout_mask_sum_shared", shared), ("rollout_mask_sum_total", total)):
        for shard, detail in found[:_EXAMPLES]:
            rep.fail(paths[shard], inv, detail)
        if len(found) > _EXAMPLES:
            rep.fail(paths[found[_EXAMPLES][0]], inv, f"{label}: ... {len(found) - _EXAMPLES} more rollouts")
    _check_groups(label, s, paths, st, rep)
    if st.complete and len(st.rollouts) != s["rollouts"]:
        rep.fail(MANIFEST, "rollouts", f"{label}: {len(st.rollouts)} rollouts in its shards, the manifest records {s['rollouts']}")


def _schedule_rows(label: str, s: dict, st: _StepState, paths: list[str], rep: _Report) -> None:
    """The schedule columns against the step's record (or their absence under balanced)."""
    import numpy as np

    sc = s.get("schedule")
    if not isinstance(sc, dict):
        for shard, *_, nulls in st.sched:
            if nulls != 2 * len(_[0]):
                rep.fail(paths[shard], "schedule", f"{label}: schedule columns set under the balanced layout")
                return
        return
    if not st.complete:
        return
    nmb = sc.get("num_microbatches") or []
    positions, step_of = [], {}
    for shard, pos, opt, mb, ids, nulls in st.sched:
        if nulls:
            rep.fail(paths[shard], "schedule", f"{label}: {nulls} null schedule value(s) in a --schedule slime shard")
            return
        positions.append(pos)
        if len(opt) and (np.any(np.diff(opt) < 0) or opt.min() < 0 or opt.max() >= len(nmb)):
            rep.fail(paths[shard], "schedule", f"{label}: optimizer_step values out of order or outside 0..{len(nmb) - 1}")
            continue
        for k in range(len(nmb)):
            m = mb[opt == k]
            runs = m[np.r_[True, m[1:] != m[:-1]]] if len(m) else m
            if not np.array_equal(runs, np.arange(nmb[k])):
                rep.fail(paths[shard], "schedule", f"{label}, optimizer step {k}: micro-batches {runs.tolist()[:8]}, "
                         f"expected 0..{nmb[k] - 1} in order (num_microbatches {nmb[k]})")
        for rid, o in zip(ids.tolist(), opt.tolist()):
            if step_of.setdefault(rid, o) != o:
                rep.fail(paths[shard], "schedule", f"{label}: rollout {rid} spans optimizer steps {step_of[rid]} and {o}")
                step_of[rid] = o
    dropped = [p for d in sc.get("dropped", []) for p in d.get("positions", [])]
    allpos = np.sort(np.concatenate(positions + [np.asarray(dropped, dtype=np.int64)]))
    if not np.array_equal(allpos, np.arange(len(allpos))):
        rep.fail(MANIFEST, "schedule", f"{label}: rollout positions of the shards and dropped rollouts are not 0..{len(allpos) - 1} once each")


def _check_rejects(out: str, m: dict, rep: _Report) -> None:
    rj = m.get("rejects")
    name = layout.in_generation(m.get("generation"), REJECTS)
    path = _full(out, name)
    counts = m["counts"]
    if rj is None:
        if counts["rejected"]:
            rep.fail(MANIFEST, "rejects", f"counts.rejected is {counts['rejected']} but the manifest lists no rejects.jsonl")
        for n in dict.fromkeys((REJECTS, name)):
            if storage.exists(_full(out, n)) if storage.is_uri(out) else os.path.lexists(_full(out, n)):
                rep.fail(n, "unexpected_file", "present, but the manifest records no rejected samples")
        return
    rep.files.append(name)
    if rj["count"] != counts["rejected"]:
        rep.fail(name, "rejects", f"rejects.count {rj['count']} != counts.rejected {counts['rejected']}")
    if not storage.is_file(path):
        rep.fail(name, "file_present", "listed in the manifest but missing")
        return
    algorithm, want = digest_of(rj)
    h = hashing.new(algorithm)
    lines = 0
    per_step: dict = {}
    unparsed = 0
    size = 0
    with (io.BytesIO(storage.read_bytes(path)) if storage.is_uri(path) else open(path, "rb")) as f:
        for line in f:
            size += len(line)
            if not rep.quick:
                h.update(line)
            if not line.strip():
                continue
            lines += 1
            if rep.quick:
                continue
            try:
                rec = json.loads(line)
                key = (rec["split"], rec["step"])
            except (ValueError, KeyError, TypeError):
                unparsed += 1
                continue
            per_step[key] = per_step.get(key, 0) + 1
    rep.bytes += size
    if lines != rj["count"]:
        rep.fail(name, "rejects", f"{lines} lines, the manifest records {rj['count']} rejected samples")
    if rep.quick:
        return
    rep.hashed += size
    if h.hexdigest() != want:
        rep.fail(name, "checksum", f"{algorithm} {h.hexdigest()}, the manifest records {want}")
        return
    if unparsed:
        rep.fail(name, "rejects", f"{unparsed} line(s) are not reject records with split and step")
    for s in m["steps"]:
        got = per_step.pop((s["split"], s["step"]), 0)
        if got != s["rejected"]:
            rep.fail(name, "rejects", f"{s['split']} step {s['step']}: {got} rejects listed, the manifest records {s['rejected']}")
    for (split, step), n in sorted(per_step.items(), key=str):
        rep.fail(name, "rejects", f"{n} rejects of {split} step {step}, which the manifest does not list")


def _stray_files(out: str, m: dict, rep: _Report) -> None:
    expected = set()
    for s in m["steps"]:
        for sh in s["shards"]:
            expected.add(sh["path"])
            if sh.get("mmap"):
                expected.add(sh["mmap"]["path"])
    generation = m.get("generation")
    tops = [*TREES, *(f"{layout.generation_dir(generation)}/{t}" for t in TREES if generation)]
    if storage.is_uri(out):
        _stray_objects(out, expected, tops, generation, rep)
        return
    for top in tops:
        root = os.path.join(out, top)
        if not os.path.lexists(root):
            continue
        if not os.path.isdir(root) or os.path.islink(root):
            rep.fail(top, "unexpected_file", "expected a directory")
            continue
        for dirpath, dirs, names in os.walk(root):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, out).replace(os.sep, "/")
            for d in dirs:
                if os.path.islink(os.path.join(dirpath, d)):
                    rep.fail(f"{rel_dir}/{d}", "unexpected_file", "a symbolic link, not listed in the manifest")
            for name in sorted(names):
                rel = f"{rel_dir}/{name}"
                if rel not in expected:
                    rep.fail(rel, "unexpected_file", "not listed in the manifest (a leftover, or added after conversion)")
    for name in sorted(os.listdir(out)):
        if name not in (MANIFEST, REJECTS, STAGING, layout.GENERATIONS) + TREES:
            rep.notes.append(f"{name}: not part of a rollout-cli output (ignored)")
    gens = os.path.join(out, layout.GENERATIONS)
    for g in sorted(os.listdir(gens)) if os.path.isdir(gens) else []:
        _other_generation(g, generation, expected, rep)
    if os.path.isdir(os.path.join(out, STAGING)):
        rep.notes.append(".staging: leftover staging area of a finished commit (ignored; a rerun removes it)")


def _other_generation(g: str, generation: str | None, expected: set[str], rep: _Report) -> None:
    if g != generation and not any(p.startswith(f"{layout.GENERATIONS}/{g}/") for p in expected):
        rep.notes.append(f"{layout.GENERATIONS}/{g}: files of an earlier dataset or an interrupted run, not listed "
                         "in the manifest (ignored; the next commit removes them)")


def _stray_objects(out: str, expected: set[str], tops: list[str], generation: str | None, rep: _Report) -> None:
    """_stray_files on an object store: one listing of OUT."""
    files = storage.files_under(out)
    seen_tops: set[str] = set()
    for rel in sorted(files):
        if any(rel.startswith(t + "/") for t in tops):
            if rel not in expected:
                rep.fail(rel, "unexpected_file", "not listed in the manifest (a leftover, or added after conversion)")
            continue
        top = rel.split("/", 1)[0]
        if top == layout.GENERATIONS:
            g = rel.split("/")[1] if rel.count("/") >= 1 else ""
            if f"{top}/{g}" not in seen_tops:
                seen_tops.add(f"{top}/{g}")
                _other_generation(g, generation, expected, rep)
        elif top not in seen_tops and top not in (MANIFEST, REJECTS) + TREES:
            seen_tops.add(top)
            rep.notes.append(".staging: leftover staging area of a finished commit (ignored; a rerun removes it)" if top == STAGING
                             else f"{top}: not part of a rollout-cli output (ignored)")


def _pending(m: dict, rep: _Report) -> None:
    """Steps left out while their input was being written (convert --skip-incomplete): a note
    each, not a failure; a malformed list is a manifest_structure failure."""
    problem = manifest_mod.pending_problem(m)
    if problem:
        rep.fail(MANIFEST, "manifest_structure", problem)
        return
    rep.notes.extend(manifest_mod.pending_message(p) for p in manifest_mod.pending_steps(m))


def verify_output(out: str, quick: bool = False) -> dict:
    """Check OUT against its manifest; returns the result (plain data). See the module docstring."""
    from ..core.schema import train_schema

    out = os.fspath(out)
    if not storage.is_dir(out):
        raise UsageError(f"{out}: no such directory" if not storage.exists(out) else f"{out}: not a directory")
    rep = _Report(out, quick)
    m = _read_manifest(out, rep)
    if m is None or not _structure(m, rep):
        return rep.result(m)
    _manifest_arithmetic(m, rep)
    _pending(m, rep)
    expected = train_schema(bool(m["options"].get("keep_text", False)), m["schema_version"])
    for s in m["steps"]:
        _check_step(out, s, expected, rep, m["options"].get("reward_baseline") == "rollout")
    _check_rejects(out, m, rep)
    _stray_files(out, m, rep)
    return rep.result(m)


def failure_message(result: dict) -> str:
    f = result["failures"]
    first = f[0]
    more = f" (and {len(f) - 1} more failure{'s' if len(f) > 2 else ''})" if len(f) > 1 else ""
    return f"{result['out']}: {first['file']}: {first['invariant']}: {first['detail']}{more}"


def check_output(out: str, quick: bool = False) -> dict:
    """verify_output, raising IntegrityError (exit 4) naming the first broken file and invariant."""
    result = verify_output(out, quick=quick)
    if result["failures"]:
        raise IntegrityError(failure_message(result), result["failures"])
    return result
