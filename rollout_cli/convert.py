"""The pipeline, one step at a time: read -> normalize -> ids and fields -> plan -> write + manifest."""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from . import hashing, storage
from . import manifest as manifest_mod
from . import output
from .errors import InvalidInputError, Location, Problem, UsageError
from .engines import make_engine
from .ids import SCOPES
from .inputs import InputFile, discover, parse_steps
from .normalize import NormChunk, normalize_chunk, pre_schema
from .plan import plan_shards
from .readers import read_input
from .schema import ADVANTAGE_ESTIMATORS, train_schema
from .step import StepProblems, compute_step
from .write import COMPRESSIONS, DEFAULT_ROW_GROUP_BYTES, write_ipc, write_parquet


@dataclass
class ConvertOptions:
    """Every conversion option, with its default (recorded in the manifest)."""

    advantage_estimator: str = "grpo"
    n_samples_per_prompt: int | None = None
    reward_key: str | None = None
    rewards_normalization: bool = True
    grpo_std_normalization: bool = True
    slime_compat: bool = False
    rollout_batch_size: int | None = None
    rollout_id_scope: str = "strict"
    on_error: str = "fail"
    max_errors: int | None = None
    shards: int = 1
    keep_groups: bool = False
    compression: str = "zstd"
    compression_level: int = 1
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    mmap: bool = True
    keep_text: bool = False
    steps: str | None = None
    step: int | None = None
    trust_pickle: bool = False
    workers: int | None = None
    engine: str = "local"
    ray_address: str | None = None
    overwrite: bool = False
    resume: bool = False

    def check(self) -> None:
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise UsageError(f"--advantage-estimator: expected one of {', '.join(ADVANTAGE_ESTIMATORS)}")
        if self.rollout_id_scope not in SCOPES:
            raise UsageError(f"--rollout-id-scope: expected one of {', '.join(SCOPES)}")
        if self.on_error not in ("fail", "skip"):
            raise UsageError("--on-error: expected fail or skip")
        if self.compression not in COMPRESSIONS:
            raise UsageError(f"--compression: expected one of {', '.join(COMPRESSIONS)}")
        if self.shards < 1:
            raise UsageError("--shards: expected at least 1")
        if self.n_samples_per_prompt is not None and self.n_samples_per_prompt < 1:
            raise UsageError("--n-samples-per-prompt: expected at least 1")
        if self.max_errors is not None and self.max_errors < 0:
            raise UsageError("--max-errors: expected 0 or more")
        if self.row_group_bytes < 1 << 16:
            raise UsageError("--row-group-bytes: expected at least 65536")
        if self.slime_compat and not self.rollout_batch_size:
            raise UsageError("--slime-compat needs --rollout-batch-size (slime's reshape depends on it)")
        if self.engine not in ("local", "ray"):
            raise UsageError("--engine: expected local or ray")
        if self.workers is not None and self.workers < 1:
            raise UsageError("--workers: expected at least 1")
        if self.step is not None and not 0 <= self.step < 2**63:
            raise UsageError(f"--step: expected a step number in [0, {2**63 - 1}], got {self.step}")
        if self.overwrite and self.resume:
            raise UsageError("--overwrite and --resume exclude each other")

    def conversion_options(self) -> dict:
        """The options that decide the output bytes (recorded; --resume requires them unchanged)."""
        d = dataclasses.asdict(self)
        for k in ("overwrite", "resume", "trust_pickle", "on_error", "max_errors", "steps", "workers", "engine", "ray_address"):
            d.pop(k)
        if not self.slime_compat:
            d.pop("rollout_batch_size")
        return d


@dataclass
class Unit:
    """One step of one split, from one input file."""

    input: InputFile
    step: int | None


@dataclass
class PartTask:
    """A piece of one input for one worker: a whole file, or a newline-aligned byte range."""

    unit: int
    part: int
    input: InputFile
    start: int
    end: int | None
    stage_path: str


@dataclass
class PartResult:
    """What a parse worker hands back: per-record summaries (small) and where the rows are."""

    unit: int
    part: int
    records: int
    lines: int  # lines consumed (JSONL byte ranges number lines from 1; fixed up later)
    source: str
    kind: str
    numbers: list[int]
    id_state: list[int]
    explicit_id: list
    group_index: list
    valid: list[bool]
    problems: list[tuple[int, Problem]]
    stage_path: str | None
    step_from_payload: int | None = None
    train_dump: bool = False
    stopped: bool = False  # hit the problem budget


@dataclass
class UnitResult:
    split: str
    step: int
    input: InputFile
    samples: int
    rows: int
    rejected: int
    rollouts: int
    tokens: int
    shards: list[dict]
    tokens_per_shard: list[int]
    imbalance: float
    rejects: list[dict]
    anomalies: list[dict]
    warnings: list[str]


def parse_part(task: PartTask, opts: ConvertOptions, problem_budget: int | None) -> PartResult:
    """Stages 1-2 for one part: read, validate, stage the valid rows as Arrow IPC."""
    payload: dict = {}
    res = PartResult(task.unit, task.part, 0, 0, task.input.display, "line", [], [], [], [], [], [], None)
    writer = None
    sink = None
    try:
        for raw in read_input(task.input, trust_pickle=opts.trust_pickle, payload=payload, start=task.start, end=task.end):
            nc = normalize_chunk(raw, res.records, reward_key=opts.reward_key, keep_text=opts.keep_text,
                                 step=task.input.step if task.input.format != "pt" else None)
            res.records += len(raw)
            res.kind = nc.kind
            res.numbers.extend(nc.numbers)
            res.id_state.extend(nc.id_state)
            res.explicit_id.extend(nc.explicit_id)
            res.group_index.extend(nc.group_index)
            res.valid.extend(nc.valid)
            base = res.records - len(raw)
            res.problems.extend((base + i, p) for i, p in nc.problems)
            for b in nc.batches:
                if writer is None:
                    sink = storage.open_write(task.stage_path) if storage.is_uri(task.stage_path) else pa.OSFile(task.stage_path, "wb")
                    writer = pa.ipc.new_file(sink, b.schema)
                writer.write_batch(b)
            if problem_budget is not None and len(res.problems) >= problem_budget:
                res.stopped = True
                break
    finally:
        if writer is not None:
            writer.close()
        if sink is not None:
            sink.close()
    res.stage_path = task.stage_path if writer is not None else None
    res.lines = payload.get("lines", 0)
    res.step_from_payload = payload.get("step")
    res.train_dump = bool(payload.get("train_dump"))
    return res


def _shift_lines(r: PartResult, offset: int) -> None:
    if not offset:
        return
    r.numbers = [n + offset for n in r.numbers]
    r.problems = [(i, Problem(Location(p.location.file, p.location.kind, (p.location.number or 0) + offset), p.field, p.message))
                  for i, p in r.problems]


def _concat_summaries(chunks: list[NormChunk]):
    id_state = np.fromiter((s for c in chunks for s in c.id_state), dtype=np.int8)
    explicit = np.fromiter((0 if v is None else v for c in chunks for v in c.explicit_id), dtype=np.int64, count=len(id_state))
    group_index = [g for c in chunks for g in c.group_index]
    return id_state, explicit, group_index


def _locator(chunks: list[NormChunk]) -> Callable[[int], Location]:
    starts = np.cumsum([0] + [len(c.numbers) for c in chunks])

    def where(pos: int) -> Location:
        k = int(np.searchsorted(starts, pos, side="right")) - 1
        c = chunks[k]
        return Location(c.source, c.kind, c.numbers[pos - int(starts[k])])

    return where


def _staged(root: str, rel: str) -> str:
    if storage.is_uri(root):
        return storage.join(root, rel)
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def _final_table(pre: pa.Table, step: int, ids: np.ndarray, rewards: np.ndarray, mask_sums: np.ndarray, keep_text: bool) -> pa.Table:
    schema = train_schema(keep_text)
    n = pre.num_rows
    computed = {
        "step": pa.array(np.full(n, step, dtype=np.int64)),
        "rollout_id": pa.array(ids, pa.int64()),
        "reward": pa.array(rewards, pa.float32()),
        "rollout_mask_sum": pa.array(mask_sums, pa.int64()),
    }
    cols = [computed[f.name] if f.name in computed else pre.column(f.name) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def _group_units(group_index: list, ids: np.ndarray) -> np.ndarray:
    """Labels of the units that keep both prompt groups and rollouts whole (union-find)."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for g, r in zip(group_index, ids.tolist()):
        a, b = find(("r", r)), find(("g", g) if g is not None else ("r", r))
        if a != b:
            parent[max(a, b)] = min(a, b)
    labels: dict = {}
    return np.fromiter((labels.setdefault(find(("r", r)), len(labels)) for r in ids.tolist()), dtype=np.int64, count=len(ids))


def _read_staged(parts: list[PartResult], bases: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The parts' staged rows as one table in memory, one chunk per column: the bytes written
    must not depend on how the parse was cut into chunks and parts (that varies with --workers).
    The staged files are unmapped on return, so the step's rows are held once, not twice."""
    tables = []
    for k, r in enumerate(parts):
        if r.stage_path:
            src = storage.open_read(r.stage_path, seekable=True) if storage.is_uri(r.stage_path) else pa.memory_map(r.stage_path)
            t = pa.ipc.open_file(src).read_all()
            if bases[k]:
                t = t.set_column(0, "_pos", pc.add(t.column("_pos"), pa.scalar(int(bases[k]), pa.int64())))
            tables.append(t)
    return pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()


def _drop_parts(parts: list[PartResult]) -> None:
    for r in parts:
        if r.stage_path and storage.is_uri(r.stage_path):
            storage.delete(r.stage_path)
        elif r.stage_path and os.path.exists(r.stage_path):
            os.remove(r.stage_path)


def finish_unit(unit: Unit, parts: list[PartResult], opts: ConvertOptions, staging_root: str) -> UnitResult | str:
    """Stages 3-6 for one step: ids, rejects, rewards and fields, shard plan, shard files.
    Returns a note instead when the input turns out to hold nothing to convert."""
    inp = unit.input
    parts = sorted(parts, key=lambda r: r.part)
    if any(r.train_dump for r in parts):
        _drop_parts(parts)
        return f"{inp.display}: slime train-side dump (format_version key), skipped"
    payload_step = parts[0].step_from_payload
    step = payload_step if payload_step is not None else unit.step
    if step is None:
        raise UsageError(f"{inp.display}: cannot tell its step: no rollout_id key in the dump and no number in its name")
    lo, hi = parse_steps(opts.steps)
    if (lo is not None and step < lo) or (hi is not None and step > hi):
        _drop_parts(parts)
        return f"{inp.display}: step {step} is outside --steps {opts.steps}, skipped"
    line_offset = 0
    for r in parts:
        if r.kind == "line":
            _shift_lines(r, line_offset)
            line_offset += r.lines
    chunks = [NormChunk(r.source, r.kind, r.numbers, r.id_state, r.explicit_id, r.group_index, r.valid) for r in parts]
    where = _locator(chunks)
    bases = np.cumsum([0] + [r.records for r in parts])
    id_state, explicit, group_index = _concat_summaries(chunks)
    n = len(id_state)
    problems: list[tuple[int, Problem]] = [(int(bases[k]) + i, p) for k, r in enumerate(parts) for i, p in r.problems]
    # the valid rows, in order
    pre = _read_staged(parts, bases, pre_schema(opts.keep_text))
    sf = compute_step(
        id_state=id_state, explicit=explicit, group_index=group_index, problems=problems, where=where,
        row_pos=pre.column("_pos").to_numpy(), reward_values=pre.column("_reward_value").to_numpy(),
        mask_totals=pre.column("_mask_total").to_numpy(), split=inp.split, step=step, opts=opts,
        fail=opts.on_error == "fail",
    )
    if not sf.keep.all():
        pre = pre.filter(pa.array(sf.keep))
    pos = pre.column("_pos").to_numpy()
    ids = sf.ids[pos]
    gi = [group_index[p] for p in pos.tolist()]
    rewards, sums, rejects = sf.rewards, sf.mask_sums, sf.rejects
    table = _final_table(pre, step, ids, rewards, sums, opts.keep_text)
    # plan and write
    tokens_per_row = pre.column("total_length").to_numpy().astype(np.int64)
    unit_key = _group_units(gi, ids) if opts.keep_groups else ids
    plan = plan_shards(unit_key, tokens_per_row, opts.shards)
    warnings: list[str] = []
    if any(len(r) == 0 for r in plan.rows) and opts.shards > 1:
        warnings.append(f"step {step} ({inp.split}): {sum(len(r) == 0 for r in plan.rows)} of {opts.shards} shards are empty (too few rollouts)")
    shard_infos = []
    top = "data" if inp.split == "train" else "eval"
    for r, rows in enumerate(plan.rows):
        rel = f"{top}/step-{step:06d}/shard-{r:05d}-of-{opts.shards:05d}.parquet"
        # one contiguous chunk per column (take() may leave several), as the loader maps it
        part = (table.take(pa.array(rows)) if opts.shards > 1 else table).combine_chunks()
        mrel = f"mmap/{top}/step-{step:06d}/shard-{r:05d}-of-{opts.shards:05d}.arrow"
        with cf.ThreadPoolExecutor(1) as side:  # the IPC copy is written while the Parquet pieces are encoded
            mmap_job = side.submit(write_ipc, part, _staged(staging_root, mrel)) if opts.mmap else None
            wf = write_parquet(part, _staged(staging_root, rel), compression=opts.compression,
                               compression_level=opts.compression_level, row_group_bytes=opts.row_group_bytes)
            mf = mmap_job.result() if mmap_job is not None else None
        info = {
            "path": rel,
            "rows": part.num_rows,
            "rollouts": int(len(np.unique(ids[rows]))) if len(rows) else 0,
            "tokens": plan.tokens[r],
            "bytes": wf.bytes,
            "blake3": wf.digest,
            "row_groups": wf.row_groups,
        }
        if mf is not None:
            info["mmap"] = {"path": mrel, "bytes": mf.bytes, "blake3": mf.digest}
        shard_infos.append(info)
    _drop_parts(parts)
    anomalies = sf.anomalies
    return UnitResult(
        split=inp.split,
        step=step,
        input=inp,
        samples=n,
        rows=table.num_rows,
        rejected=len(rejects),
        rollouts=int(len(np.unique(ids))) if len(ids) else 0,
        tokens=int(tokens_per_row.sum()),
        shards=shard_infos,
        tokens_per_shard=plan.tokens,
        imbalance=round(plan.imbalance, 6),
        rejects=rejects,
        anomalies=anomalies,
        warnings=warnings,
    )


def plan_units(inputs: list[str], opts: ConvertOptions, out: str | None = None) -> tuple[list[Unit], list[str], list[str]]:
    """Discover inputs, select --steps, order by (split, step), refuse duplicate steps."""
    files, skipped, notes = discover(inputs, opts.step, exclude=out)
    lo, hi = parse_steps(opts.steps)
    units = []
    seen: dict[tuple, str] = {}
    for f in files:
        if f.step is not None and not (f.format == "pt" and f.step_from == "name"):
            # a .pt dump's own step key decides; such units are filtered once read
            if (lo is not None and f.step < lo) or (hi is not None and f.step > hi):
                continue
            key = (f.split, f.step)
            if key in seen:
                raise InvalidInputError(f"two inputs give {f.split} step {f.step}: {seen[key]} and {f.display}")
            seen[key] = f.display
        units.append(Unit(f, f.step))
    units.sort(key=lambda u: (u.input.split != "train", u.step if u.step is not None else -1, u.input.display))
    return units, skipped, notes


def _plan_parts(units: list[Unit], workers: int, staging_root: str) -> list[PartTask]:
    """Split each unit into parts: plain JSONL files into byte ranges when workers are idle."""
    from .readers.jsonl import split_ranges

    spare = max(1, workers // max(1, len(units)))
    tasks = []
    for u, unit in enumerate(units):
        inp = unit.input
        ranges: list[tuple[int, int | None]] = [(0, None)]
        if inp.format == "jsonl" and inp.path != "-" and not inp.path.endswith((".gz", ".zst")) and spare > 1:
            ranges = list(split_ranges(inp.path, spare))
        for k, (a, b) in enumerate(ranges):
            tasks.append(PartTask(u, k, inp, a, b, _staged(staging_root, f"parts/u{u:05d}-p{k:04d}.arrow")))
    return tasks


def _fingerprint(path: str) -> dict:
    return manifest_mod.file_fingerprint(path)


def _run(engine, units, tasks, opts, budget, staging_root, fingerprints, notes, progress, on_done=None) -> list[UnitResult]:
    """Schedule parse tasks, then each step's finish as soon as all its parts are in."""
    parts_of: dict[int, int] = {}
    for t in tasks:
        parts_of[t.unit] = parts_of.get(t.unit, 0) + 1
    pending: dict = {}
    for t in tasks:
        pending[engine.submit(parse_part, t, opts, budget)] = ("parse", t.unit)
    for unit in units:
        if unit.input.path != "-" and unit.input.path not in fingerprints:
            pending[engine.submit(_fingerprint, unit.input.path)] = ("fingerprint", unit.input.path)
    got: dict[int, list[PartResult]] = {}
    finished: dict[int, UnitResult] = {}
    total_rejected = 0
    done_units = 0
    while pending:
        for h in engine.wait(list(pending)):
            kind, key = pending.pop(h)
            value = engine.result(h)
            if kind == "fingerprint":
                fingerprints[key] = value
            elif kind == "parse":
                if value.stopped:
                    raise StepProblems([p for _, p in value.problems])
                got.setdefault(key, []).append(value)
                if len(got[key]) == parts_of[key]:
                    pending[engine.submit(finish_unit, units[key], got.pop(key), opts, staging_root)] = ("finish", key)
            else:
                done_units += 1
                if progress:
                    progress(units[key].input.display, done_units, len(units))
                if isinstance(value, str):
                    notes.append(value)
                    continue
                finished[key] = value
                if on_done:
                    on_done(value)
                total_rejected += value.rejected
                if opts.on_error == "skip" and opts.max_errors is not None and total_rejected > opts.max_errors:
                    raise InvalidInputError(
                        f"more than --max-errors {opts.max_errors} samples rejected ({total_rejected} so far); stopped, nothing written",
                        [_reject_problem(r) for r in value.rejects[: opts.max_errors + 1]],
                    )
    return list(finished.values())


def _reject_problem(r: dict) -> Problem:
    kind = next((k for k in ("line", "row", "sample") if k in r), "file")
    return Problem(Location(r["file"], kind, r.get(kind)), r.get("field"), r["reason"])


def prev_fp(prev: dict, display: str) -> dict:
    for i in prev.get("inputs", []):
        if i["path"] == display:
            return {k: i[k] for k in ("size", "mtime_ns", hashing.ALGORITHM) if k in i}
    return {}


def _result_to_dict(r: UnitResult) -> dict:
    return dataclasses.asdict(r)


def _result_from_dict(d: dict) -> UnitResult:
    d = dict(d)
    d["input"] = InputFile(**d["input"])
    return UnitResult(**d)


def _same_content(a: dict | None, b: dict | None) -> bool:
    return bool(a and b) and a.get("size") == b.get("size") and a.get(hashing.ALGORITHM) == b.get(hashing.ALGORITHM)


def _unit_files(res: UnitResult) -> list[str]:
    files = []
    for sh in res.shards:
        files.append(sh["path"])
        if "mmap" in sh:
            files.append(sh["mmap"]["path"])
    return files


def _link_into_staging(out: str, staging_root: str, rels: list[str]) -> bool:
    """Hard-link committed files into the staging tree (their bytes and inodes stay untouched)."""
    for rel in rels:
        src = os.path.join(out, rel)
        if not os.path.exists(src):
            return False
    for rel in rels:
        dst = _staged(staging_root, rel)
        if os.path.exists(dst):
            os.remove(dst)
        os.link(os.path.join(out, rel), dst)
    return True


def _previous_results(out: str, prev: dict) -> dict[str, UnitResult]:
    """The committed output's steps as UnitResults, keyed by input path."""
    rejects_by: dict[tuple, list] = {}
    rj = prev.get("rejects")
    if rj:
        with open(os.path.join(out, rj["path"]), "rb") as f:
            for line in f:
                if line.strip():
                    r = orjson.loads(line)
                    rejects_by.setdefault((r.get("split"), r.get("step")), []).append(r)
    inputs = {i["path"]: i for i in prev.get("inputs", [])}
    found = {}
    for st in prev.get("steps", []):
        key = (st["split"], st["step"])
        i = inputs.get(st["input"], {})
        inp = InputFile(st["input"], st["input"], i.get("format", "jsonl"), st["step"], st["split"], "manifest")
        found[st["input"]] = UnitResult(
            split=st["split"], step=st["step"], input=inp, samples=st["samples"], rows=st["rows"], rejected=st["rejected"],
            rollouts=st["rollouts"], tokens=st["tokens"], shards=st["shards"], tokens_per_shard=st["tokens_per_shard"],
            imbalance=st["imbalance"], rejects=rejects_by.get(key, []),
            anomalies=[a for a in prev.get("anomalies", []) if (a.get("split"), a.get("step")) == key], warnings=[],
        )
    return found


def _resume_plan(out: str, units: list[Unit], opts: ConvertOptions, staging_root: str, prev: dict | None,
                 fingerprints: dict[str, dict], notes: list[str]) -> tuple[dict[int, UnitResult], list[UnitResult]]:
    """Which units need no work: finished by an interrupted run, or unchanged since the last one.
    Returns (reused per unit index, kept steps whose input is gone)."""
    done_dir = os.path.join(staging_root, "done")
    staged_done: dict[str, dict] = {}
    if os.path.isdir(done_dir):
        for name in sorted(os.listdir(done_dir)):
            with open(os.path.join(done_dir, name), "rb") as f:
                rec = orjson.loads(f.read())
            staged_done[rec["result"]["input"]["display"]] = rec
    committed = _previous_results(out, prev) if prev else {}
    prev_inputs = {i["path"]: i for i in (prev or {}).get("inputs", [])}
    reused: dict[int, UnitResult] = {}
    for k, unit in enumerate(units):
        d = unit.input.display
        fp = fingerprints.get(unit.input.path)
        rec = staged_done.get(d)
        if rec and _same_content(rec["fingerprint"], fp):
            res = _result_from_dict(rec["result"])
            if all(os.path.exists(os.path.join(staging_root, rel)) for rel in _unit_files(res)):
                reused[k] = res
                continue
        if d in committed and _same_content(prev_inputs.get(d), fp):
            res = committed[d]
            res.input = unit.input
            if _link_into_staging(out, staging_root, _unit_files(res)):
                reused[k] = res
    current = {u.input.display for u in units}
    kept = []
    for d, res in committed.items():
        if d not in current and _link_into_staging(out, staging_root, _unit_files(res)):
            res.warnings = [f"{d}: input no longer given; step {res.step} ({res.split}) kept from the previous run"]
            res.input.step_from = "missing"
            kept.append(res)
    return reused, kept


def _record_done(staging_root: str, res: UnitResult, fingerprint: dict | None) -> None:
    if storage.is_uri(staging_root):
        return  # --resume needs a local OUT
    path = _staged(staging_root, f"done/{res.split}-{res.step:012d}.json")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(orjson.dumps({"fingerprint": fingerprint, "result": _result_to_dict(res)}))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _output_error(out: str, e: OSError):
    from .errors import OutputError

    where = f" ({e.filename})" if e.filename else ""
    return OutputError(f"{out}: cannot write the output: {e.strerror or e}{where}")


def convert(inputs: list[str], out: str, options: ConvertOptions | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Convert dumps to OUT; returns the result summary (plain data). Raises RolloutCliError."""
    opts = options or ConvertOptions()
    opts.check()
    t0 = time.time()
    units, skipped, notes = plan_units(inputs, opts, out)
    if not units:
        raise UsageError("no input files found (expected .pt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet)")
    opts_d = opts.conversion_options()
    opts_d["reward_mode"] = "slime_compat" if opts.slime_compat else "group_index"
    created = not storage.exists(out)
    try:
        staging = output.prepare(out, overwrite=opts.overwrite, resume=opts.resume, options=opts_d)
    except OSError as e:
        raise _output_error(out, e) from None
    try:
        prev = manifest_mod.read(out) if opts.resume and output.state(out) == "complete" else None
        if prev is not None and prev.get("options") != opts_d:
            changed = sorted(k for k in set(opts_d) | set(prev.get("options", {})) if opts_d.get(k) != prev.get("options", {}).get(k))
            raise UsageError(f"--resume: conversion options differ from the existing output's ({', '.join(changed)}); use --overwrite to reconvert")
        budget = max(1, opts.max_errors if opts.max_errors is not None else 20) if opts.on_error == "fail" else None
        workers = opts.workers or os.cpu_count() or 1
        fingerprints: dict[str, dict] = {}
        reused: dict[int, UnitResult] = {}
        kept: list[UnitResult] = []
        if opts.resume:
            for u in units:
                if u.input.path != "-":
                    fingerprints[u.input.path] = _fingerprint(u.input.path)
            reused, kept = _resume_plan(out, units, opts, staging.root, prev, fingerprints, notes)
        todo = [k for k in range(len(units)) if k not in reused]
        results: list[UnitResult] = list(reused.values()) + kept
        if todo:
            sub = [units[k] for k in todo]
            if opts.engine == "ray":
                engine = make_engine("ray", opts.workers or 0, opts.ray_address)
                tasks = _plan_parts(sub, opts.workers or engine.slots(), staging.root)
            else:
                tasks = _plan_parts(sub, workers, staging.root)
                engine = make_engine("local", min(workers, max(len(tasks), len(sub))))
            try:
                new = _run(engine, sub, tasks, opts, budget, staging.root, fingerprints, notes, progress,
                           on_done=lambda r: _record_done(staging.root, r, fingerprints.get(r.input.path)))
            except StepProblems as e:
                problems = e.args[0]
                shown = problems[:budget] if budget else problems
                more = f" (first {budget} shown)" if budget and len(problems) >= budget else ""
                raise InvalidInputError(f"{len(shown)} invalid sample(s){more}: {shown[0]}", shown) from None
            finally:
                engine.shutdown()
            results += new
        results.sort(key=lambda r: (r.split != "train", r.step))
        seen: dict = {}
        for r in results:
            if (r.split, r.step) in seen:
                raise InvalidInputError(f"two inputs give {r.split} step {r.step}: {seen[(r.split, r.step)]} and {r.input.display}")
            seen[(r.split, r.step)] = r.input.display
        for r in results:
            if r.input.path != "-" and r.input.path not in fingerprints and storage.exists(r.input.path):
                fingerprints[r.input.path] = _fingerprint(r.input.path)
        rejects_info = None
        all_rejects = [r for res in results for r in res.rejects]
        if all_rejects:
            path = staging.path("rejects.jsonl")
            data = b"".join(orjson.dumps(r) + b"\n" for r in all_rejects)
            if storage.is_uri(path):
                storage.write_bytes(path, data)
            else:
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            rejects_info = {"path": "rejects.jsonl", "count": len(all_rejects), "blake3": hashing.bytes_digest(data)}
        inputs_info = []
        mtimes: dict[str, int] = {}
        for res in results:
            fp = dict(fingerprints.get(res.input.path) or (prev_fp(prev, res.input.display) if prev else {}))
            if "mtime_ns" in fp:  # time stamps change with copies: kept apart from the reproducible fields
                mtimes[res.input.display] = fp.pop("mtime_ns")
            inputs_info.append(dict({"path": res.input.display, "format": res.input.format, "split": res.split, "step": res.step,
                                     "samples": res.samples}, **fp))
        steps_info = [
            {
                "split": res.split,
                "step": res.step,
                "input": res.input.display,
                "samples": res.samples,
                "rows": res.rows,
                "rejected": res.rejected,
                "rollouts": res.rollouts,
                "tokens": res.tokens,
                "tokens_per_shard": res.tokens_per_shard,
                "imbalance": res.imbalance,
                "shards": res.shards,
                **({"input_missing": True} if res.input.step_from == "missing" else {}),
            }
            for res in results
        ]
        counts = {
            "input_samples": sum(r.samples for r in results),
            "rows": sum(r.rows for r in results),
            "rejected": sum(r.rejected for r in results),
            "steps": sum(1 for r in results if r.split == "train"),
            "eval_steps": sum(1 for r in results if r.split == "eval"),
        }
        anomalies = [a for r in results for a in r.anomalies]
        warnings = [w for r in results for w in r.warnings]
        m = manifest_mod.build(
            options=opts_d,
            inputs=inputs_info,
            steps=steps_info,
            counts=counts,
            rejects=rejects_info,
            anomalies=anomalies,
            volatile={"created_unix": round(t0, 3), "seconds": round(time.time() - t0, 3), "input_mtime_ns": mtimes},
        )
        staging.commit(m)
    except BaseException as e:
        if staging.committing():  # the old output is partly moved aside: roll forward, never discard
            try:
                output.finish_commit(out)
            except Exception:
                pass  # left for --resume, which finishes it
        else:
            # a failed run leaves OUT as it was (a killed one leaves its staging, for --resume)
            staging.abandon(keep=opts.resume or isinstance(e, KeyboardInterrupt), remove_out=created)
        if isinstance(e, OSError):  # the readers turn input OSErrors into InvalidInputError: this is OUT
            raise _output_error(out, e) from None
        raise
    return {
        "out": out,
        "counts": counts,
        "steps": [{k: s[k] for k in ("split", "step", "input", "samples", "rows", "rejected", "rollouts", "tokens", "imbalance")} for s in steps_info],
        "rejects": rejects_info,
        "skipped": skipped,
        "notes": notes,
        "warnings": warnings,
        "anomalies": anomalies,
        "seconds": round(time.time() - t0, 3),
    }
