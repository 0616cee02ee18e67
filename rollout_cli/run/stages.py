"""The work of one step, as it runs in a worker: parse a part of an input (read, validate,
stage the valid rows), then finish the step (ids, rejects, rewards and fields, shard plan, shard
files). The converting process (convert.py) only schedules these and commits the result."""
from __future__ import annotations

import concurrent.futures as cf
import os
import numpy as np
import pyarrow as pa

from ..core import storage
from ..core.cores import usable_cores
from ..core.errors import Location, Problem
from ..inputs.units import in_steps, record_step, train_dump_note, unit_step
from ..pipeline.validate import NormChunk, normalize_chunk, pre_schema
from ..core.options import ConvertOptions
from ..core import layout
from ..output.commit import staged_path as _staged
from ..pipeline.plan import ShardPlan, group_units, plan_shards
from ..inputs.registry import format_of, read_input
from ..core.schema import SCHEDULE_COLUMNS, train_schema
from ..pipeline.fields import STEP_FIELDS, group_fields, step_fields
from ..pipeline.schedule import ScheduleConfig, build_schedule, trailing_warning
from ..pipeline.assemble import StepAssembler
from ..pipeline.step import StepFields
from ..inputs.units import Unit
from .tasks import PartResult, PartTask, UnitResult
from ..output.write import write_ipc, write_parquet
from ..text.tokenizer import image_rule


class _Staged:
    """Where a part's valid rows go: an Arrow IPC file in the staging area, which the step's
    finish (another task) reads back."""

    def __init__(self, path: str):
        self.path = path
        self._sink = None
        self._writer = None

    def add(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self._sink = storage.open_write(self.path) if storage.is_uri(self.path) else pa.OSFile(self.path, "wb")
            self._writer = pa.ipc.new_file(self._sink, batch.schema)
        self._writer.write_batch(batch)

    def close(self) -> str | None:
        """The staged file's path, or None when no row was valid."""
        if self._writer is not None:
            self._writer.close()
        if self._sink is not None:
            self._sink.close()
        return self.path if self._writer is not None else None


class _Held:
    """The valid rows kept in memory, for a step parsed and finished by one task."""

    def __init__(self):
        self.batches: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        return None


def parse_part(task: PartTask, opts: ConvertOptions, problem_budget: int | None, rows=None) -> PartResult:
    """Stages 1-2 for one part: read, validate, stage the valid rows as Arrow IPC (or hand them
    to `rows`, a _Held)."""
    res = PartResult(task.unit, task.part, 0, 0, task.input.display, "line", [], [], [], [], [], [], None)
    start, end = task.start, task.end
    res.start = start
    images = image_rule(opts)
    sink = rows if rows is not None else _Staged(task.stage_path)
    try:
        reading = read_input(task.input, trust_pickle=opts.trust_pickle, start=start, end=end, tokenizer=opts.tokenizer,
                             keep_text=opts.keep_text, threads=task.threads,
                             max_line_bytes=opts.max_line_bytes, max_storage_bytes=opts.max_storage_bytes,
                             fingerprint=task.fingerprint)
        for raw in reading:
            nc = normalize_chunk(raw, res.records, reward_key=opts.reward_key, keep_text=opts.keep_text,
                                 step=record_step(task.input),
                                 rewards_recorded=format_of(task.input.format).rewards_recorded,
                                 images=images)
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
                sink.add(b)
            if problem_budget is not None and len(res.problems) >= problem_budget:
                res.stopped = True
                break
    finally:
        res.stage_path = sink.close()
    res.lines = reading.info.lines
    res.step_from_payload = reading.info.step
    res.train_dump = reading.info.train_dump
    res.notes = reading.info.notes
    res.fingerprint = reading.info.fingerprint
    return res


def _shift_lines(r: PartResult, offset: int) -> None:
    if not offset:
        return
    r.numbers = [n + offset for n in r.numbers]
    r.problems = [(i, Problem(Location(p.location.file, p.location.kind, (p.location.number or 0) + offset), p.field, p.message,
                              p.rule))
                  for i, p in r.problems]


def _final_table(pre: pa.Table, step: int, ids: np.ndarray, sf: StepFields, keep_text: bool,
                 placed: dict[str, np.ndarray] | None = None, token_exact: bool = True) -> pa.Table:
    schema = train_schema(keep_text)
    n = pre.num_rows
    computed = {
        "step": pa.array(np.full(n, step, dtype=np.int64)),
        "rollout_id": pa.array(ids, pa.int64()),
        "reward": pa.array(sf.rewards, pa.float32(), mask=np.isnan(pre.column("_reward_value").to_numpy())),
        "rollout_mask_sum": pa.array(sf.mask_sums, pa.int64()),
        "group_mask_sum": pa.array(sf.group_mask_sums, pa.int64()),
        "group_rollouts": pa.array(sf.group_rollouts, pa.int64()),
        "selected_reward": pre.column("_reward_value"),
        "rollout_position": pa.array(np.arange(n, dtype=np.int64)),
        "token_exact": pa.array(np.full(n, token_exact, dtype=bool)),
    }
    for name in STEP_FIELDS:
        computed[name] = pa.array(np.full(n, sf.step_totals[name], dtype=np.int64))
    for f in SCHEDULE_COLUMNS:  # null under the balanced layout; -1 marks a dropped row
        if placed is None:
            computed[f.name] = pa.nulls(n, f.type)
        else:
            v = placed[f.name]
            computed[f.name] = pa.array(v, f.type, mask=v < 0)
    cols = [computed[f.name] if f.name in computed else pre.column(f.name) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def _denominators_of_written(sf: StepFields, ids: np.ndarray, mask_totals: np.ndarray, rows: list) -> None:
    """Group and step denominators over the rows the shards hold, when the schedule leaves
    trailing rollouts out (the dropped rows are written nowhere, so they count nowhere)."""
    w = np.zeros(len(ids), dtype=bool)
    if rows:
        w[np.concatenate(rows)] = True
    if w.all():
        return
    gms, gro = group_fields(sf.group_labels[w], ids[w], mask_totals[w])
    sf.group_mask_sums = np.zeros(len(ids), dtype=np.int64)
    sf.group_rollouts = np.zeros(len(ids), dtype=np.int64)
    sf.group_mask_sums[w], sf.group_rollouts[w] = gms, gro
    sf.step_totals = step_fields(ids[w], mask_totals[w], sf.group_labels[w])


def _read_staged(parts: list[PartResult], bases: list[int], schema: pa.Schema) -> pa.Table:
    """The parts' staged rows as one table in memory, one chunk per column: the bytes written
    must not depend on how the parse was cut into chunks and parts (that varies with --workers).
    The staged files are unmapped on return, so the step's rows are held once, not twice."""
    tables = []
    for k, r in enumerate(parts):
        if r.stage_path:
            src = storage.open_read(r.stage_path, seekable=True) if storage.is_uri(r.stage_path) else pa.memory_map(r.stage_path)
            t = pa.ipc.open_file(src).read_all()
            if bases[k]:
                t = t.set_column(0, "_pos", pa.array(t.column("_pos").to_numpy() + int(bases[k])))
            tables.append(t)
    return _one_chunk(tables, schema)


def _one_chunk(parts: list, schema: pa.Schema, threads: int | None = None) -> pa.Table:
    """Tables or batches of the same schema as one table, one chunk per column, emptying
    `parts`: each column's pieces are let go once it is copied, so rows held in memory are
    held about once, not twice."""
    if not parts:
        return schema.empty_table()
    schema = parts[0].schema
    pieces = [[c for p in parts for c in (p.column(k).chunks if isinstance(p, pa.Table) else [p.column(k)])]
              for k in range(len(schema))]
    parts.clear()

    def combine(k: int) -> pa.Array:
        col = pieces[k][0] if len(pieces[k]) == 1 else pa.concat_arrays(pieces[k])  # concat_arrays copies even one
        pieces[k] = None
        return col

    if (threads or usable_cores()) <= 1:
        columns = [combine(k) for k in range(len(pieces))]
    else:
        with cf.ThreadPoolExecutor(threads or usable_cores(), thread_name_prefix="rollout-cli-combine") as pool:
            columns = list(pool.map(combine, range(len(pieces))))
    return pa.Table.from_arrays(columns, schema=schema)


def _drop_parts(parts: list[PartResult]) -> None:
    for r in parts:
        if r.stage_path and storage.is_uri(r.stage_path):
            storage.delete(r.stage_path)
        elif r.stage_path and os.path.exists(r.stage_path):
            os.remove(r.stage_path)


def convert_unit(task: PartTask, unit: Unit, opts: ConvertOptions, problem_budget: int | None,
                 staging_root: str) -> UnitResult | PartResult | str:
    """Stages 1-6 for a step read as one part, in one task: its rows stay in this process
    instead of being staged and read back by another. Returns the part's result instead
    when it stopped at the problem budget (the caller reports its problems)."""
    held = _Held()
    part = parse_part(task, opts, problem_budget, rows=held)
    if part.stopped:
        return part
    return finish_unit(unit, [part], opts, staging_root, held=held.batches, threads=task.threads)


def finish_unit(unit: Unit, parts: list[PartResult], opts: ConvertOptions, staging_root: str,
                held: list[pa.RecordBatch] | None = None, threads: int | None = None) -> UnitResult | str:
    """Stages 3-6 for one step: ids, rejects, rewards and fields, shard plan, shard files.
    `held`: the rows of a single part, when they were kept in memory rather than staged.
    `threads`: the cores the step may use (default: all; one where each step has a worker).
    Returns a note instead when the input turns out to hold nothing to convert."""
    inp = unit.input
    parts = sorted(parts, key=lambda r: (r.start, r.part))
    if any(r.train_dump for r in parts):
        _drop_parts(parts)
        return train_dump_note(unit)
    step = unit_step(unit, parts[0].step_from_payload)
    if not in_steps(step, opts.steps):
        _drop_parts(parts)
        return f"{inp.display}: step {step} is outside --steps {opts.steps}, skipped"
    line_offset = 0
    for r in parts:
        if r.kind == "line":
            _shift_lines(r, line_offset)
            line_offset += r.lines
    asm = StepAssembler.of_input(inp, opts)
    bases = [asm.add(NormChunk(r.source, r.kind, r.numbers, r.id_state, r.explicit_id, r.group_index, r.valid, r.problems))
             for r in parts]
    n = asm.records
    # the valid rows, in order
    if held is not None:
        pre = _one_chunk(held, pre_schema(opts.keep_text), threads)
    else:
        pre = _read_staged(parts, bases, pre_schema(opts.keep_text))
    st = asm.finish(step, rows=pre, fail=opts.on_error == "fail")
    sf, group_index, pre = st.fields, st.group_index, st.kept()
    del st  # the rows left out are let go
    pos = pre.column("_pos").to_numpy()
    ids = sf.ids[pos]
    gi = [group_index[p] for p in pos.tolist()]
    rejects = sf.rejects
    # plan and write
    tokens_per_row = pre.column("total_length").to_numpy().astype(np.int64)
    warnings: list[str] = []
    schedule_info = None
    placed = None
    if opts.schedule == "slime" and inp.split == "train":
        plan, placed, schedule_info = _slime_plan(ids, tokens_per_row, pre, opts, f"{inp.display}: step {step}")
        if schedule_info["dropped"]:
            warnings.append(trailing_warning(step, schedule_info))
    else:
        unit_key = group_units(gi, ids) if opts.keep_groups else ids
        plan = plan_shards(unit_key, tokens_per_row, opts.shards)
    if placed is not None:
        _denominators_of_written(sf, ids, pre.column("_mask_total").to_numpy(), plan.rows)
    token_exact = format_of(inp.format).text_dump is None  # a text dump's rows were tokenized here
    table = _final_table(pre, step, ids, sf, opts.keep_text, placed, token_exact)
    if any(len(r) == 0 for r in plan.rows) and opts.shards > 1:
        warnings.append(f"step {step} ({inp.split}): {sum(len(r) == 0 for r in plan.rows)} of {opts.shards} shards are empty (too few rollouts)")
    shard_infos = []
    for r, rows in enumerate(plan.rows):
        rel = layout.shard_path(inp.split, step, r, opts.shards)
        # one contiguous chunk per column (take() may leave several), as the loader maps it
        part = (table.take(pa.array(rows)) if opts.shards > 1 or placed is not None else table).combine_chunks()
        mrel = layout.mmap_path(inp.split, step, r, opts.shards)
        with cf.ThreadPoolExecutor(1) as side:  # the IPC copy is written while the Parquet shard is encoded
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
    written = np.concatenate(plan.rows) if plan.rows else np.zeros(0, dtype=np.int64)
    return UnitResult(
        split=inp.split,
        step=step,
        input=inp,
        samples=n,
        rows=len(written),
        rejected=len(rejects),
        rollouts=int(len(np.unique(ids[written]))) if len(written) else 0,
        tokens=int(tokens_per_row[written].sum()),
        shards=shard_infos,
        tokens_per_shard=plan.tokens,
        imbalance=round(plan.imbalance, 6),
        rejects=rejects,
        anomalies=anomalies,
        warnings=warnings,
        denominators=dict(sf.step_totals),
        schedule=schedule_info,
        notes=[n for r in parts for n in r.notes] + sf.notes,
        not_token_exact=0 if token_exact else len(written),
        fingerprint=parts[0].fingerprint if len(parts) == 1 else None,
    )


def schedule_config(opts: ConvertOptions) -> ScheduleConfig:
    """The --schedule slime settings as the schedule's configuration (--shards is dp)."""
    return ScheduleConfig(
        global_batch_size=opts.effective_global_batch_size(), dp_size=opts.shards,
        micro_batch_size=opts.micro_batch_size, use_dynamic_batch_size=opts.use_dynamic_batch_size,
        max_tokens_per_gpu=opts.max_tokens_per_gpu, balance_data=opts.balance_data, cp_size=opts.cp_size,
        vpp_size=opts.vpp_size, microbatch_group_size_per_vp_stage=opts.microbatch_group_size_per_vp_stage,
        keep_trailing=opts.keep_trailing,
    )


def _slime_plan(ids: np.ndarray, tokens_per_row: np.ndarray, pre: pa.Table, opts: ConvertOptions, where: str):
    """slime's schedule as a shard plan (rank r's rows in partition order), the schedule
    columns per row (-1 where dropped), and the step's schedule record for the manifest."""
    cfg = schedule_config(opts)
    sched = build_schedule(ids.tolist(), tokens_per_row.tolist(), cfg, where=where)
    n = len(ids)
    placed = {"optimizer_step": np.full(n, -1, dtype=np.int64), "micro_batch": np.full(n, -1, dtype=np.int64)}
    rows = []
    for r in range(cfg.dp_size):
        part = np.asarray(sched.partitions[r], dtype=np.int64)
        placed["optimizer_step"][part] = sched.optimizer_step[r]
        placed["micro_batch"][part] = sched.micro_batch[r]
        rows.append(part)
    plan = ShardPlan(rows, [int(tokens_per_row[r].sum()) for r in rows])
    raw = pre.column("raw_reward").to_numpy()
    dropped = [{"rollout_id": int(d["rollout_id"]), "positions": d["positions"], "samples": len(d["positions"]),
                "total_lengths": [int(tokens_per_row[p]) for p in d["positions"]],
                "raw_reward": [float(raw[p]) for p in d["positions"]]} for d in sched.dropped]
    info = {
        "global_batch_size": cfg.global_batch_size, "rollouts": len(set(ids.tolist())),
        "optimizer_steps": len(sched.num_microbatches), "num_microbatches": sched.num_microbatches,
        "global_batch_sizes": sched.global_batch_sizes, "trailing_kept": sched.trailing_kept,
        "dropped": dropped, "dropped_samples": sum(d["samples"] for d in dropped),
    }
    return plan, placed, info
