"""The pipeline, one step at a time: read -> normalize -> ids and fields -> plan -> write + manifest."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from . import manifest as manifest_mod
from . import output
from .errors import InvalidInputError, Location, Problem, UsageError
from .fields import rollout_mask_sums
from .ids import SCOPES, assign_ids
from .inputs import InputFile, discover, parse_steps
from .normalize import NormChunk, normalize_chunk, pre_schema
from .plan import plan_shards
from .readers.base import RawChunk
from .rewards import group_keys, normalize_rewards, slime_compat_rewards
from .schema import ADVANTAGE_ESTIMATORS, train_schema
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
        if self.overwrite and self.resume:
            raise UsageError("--overwrite and --resume exclude each other")

    def conversion_options(self) -> dict:
        """The options that decide the output bytes (recorded; --resume requires them unchanged)."""
        d = dataclasses.asdict(self)
        for k in ("overwrite", "resume", "trust_pickle", "on_error", "max_errors", "steps"):
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


@dataclass
class _Collected:
    """A unit's records after normalisation, concatenated."""

    chunks: list[NormChunk]
    step_from_payload: int | None = None
    train_dump: bool = False


class _ProblemLimit(Exception):
    pass


def _raw_chunks(inp: InputFile, opts: ConvertOptions, payload: dict) -> Iterator[RawChunk]:
    if inp.format == "jsonl":
        from .readers.jsonl import read_jsonl

        yield from read_jsonl(inp.path, inp.display)
    elif inp.format == "parquet":
        from .readers.parquet import read_parquet

        yield from read_parquet(inp.path, inp.display)
    else:
        from .readers.slime_pt import read_pt

        dump = read_pt(inp.path, inp.display, opts.trust_pickle)
        payload["step"] = dump.step
        payload["train_dump"] = dump.train_dump
        if dump.chunk is not None:
            yield dump.chunk


def _collect(inp: InputFile, opts: ConvertOptions, problem_budget: int | None) -> _Collected:
    payload: dict = {}
    chunks: list[NormChunk] = []
    base = 0
    n_problems = 0
    for raw in _raw_chunks(inp, opts, payload):
        nc = normalize_chunk(raw, base, reward_key=opts.reward_key, keep_text=opts.keep_text)
        base += len(raw)
        chunks.append(nc)
        n_problems += len(nc.problems)
        if problem_budget is not None and n_problems >= problem_budget:
            raise _ProblemLimit([p for c in chunks for _, p in c.problems][:problem_budget])
    return _Collected(chunks, payload.get("step"), bool(payload.get("train_dump")))


def _concat_summaries(chunks: list[NormChunk]):
    id_state = np.fromiter((s for c in chunks for s in c.id_state), dtype=np.int8)
    explicit = np.fromiter((0 if v is None else v for c in chunks for v in c.explicit_id), dtype=np.int64, count=len(id_state))
    group_index = [g for c in chunks for g in c.group_index]
    valid = np.fromiter((v for c in chunks for v in c.valid), dtype=bool, count=len(id_state))
    return id_state, explicit, group_index, valid


def _locator(chunks: list[NormChunk]) -> Callable[[int], Location]:
    starts = np.cumsum([0] + [len(c.numbers) for c in chunks])

    def where(pos: int) -> Location:
        k = int(np.searchsorted(starts, pos, side="right")) - 1
        c = chunks[k]
        return Location(c.source, c.kind, c.numbers[pos - int(starts[k])])

    return where


def _final_table(pre: pa.Table, step: int, ids: np.ndarray, rewards: np.ndarray, mask_sums: np.ndarray, keep_text: bool) -> pa.Table:
    schema = train_schema(keep_text)
    n = pre.num_rows
    computed = {
        "step": pa.array(np.full(n, step, dtype=np.int64)),
        "rollout_id": pa.array(ids, pa.int64()),
        "reward": pa.array(rewards, pa.float32()),
        "rollout_mask_sum": pa.array(mask_sums, pa.int64()),
    }
    cols = []
    for f in schema:
        if f.name in computed:
            cols.append(computed[f.name])
        else:
            cols.append(pre.column(f.name))
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


def _process_unit(unit: Unit, opts: ConvertOptions, staging: output.Staging, problem_budget: int | None,
                  split_step_seen: set) -> UnitResult | None:
    inp = unit.input
    collected = _collect(inp, opts, problem_budget)
    if collected.train_dump:
        return None
    step = collected.step_from_payload if collected.step_from_payload is not None else unit.step
    if step is None:
        raise UsageError(f"{inp.display}: cannot tell its step: no rollout_id key in the dump and no number in its name")
    if (inp.split, step) in split_step_seen:
        raise InvalidInputError(f"{inp.display}: step {step} ({inp.split}) is already given by another input")
    split_step_seen.add((inp.split, step))
    chunks = collected.chunks
    where = _locator(chunks)
    id_state, explicit, group_index, valid = _concat_summaries(chunks)
    n = len(id_state)
    problems: list[tuple[int, Problem]] = []
    base = 0
    for c in chunks:
        problems.extend((base + i, p) for i, p in c.problems)
        base += len(c.numbers)
    idr = assign_ids(id_state, explicit, group_index, opts.rollout_id_scope, where)
    problems.extend(idr.problems)
    problems.sort(key=lambda t: t[0])
    if problems and opts.on_error == "fail":
        raise _ProblemLimit([p for _, p in problems])
    # a rejected sample rejects its whole rollout
    rejected = np.zeros(n, dtype=bool)
    reason: dict[int, Problem] = {}
    for i, p in problems:
        if i not in reason:
            reason[i] = p
        rejected[i] = True
    bad_ids = np.unique(idr.ids[rejected & idr.assigned])
    if len(bad_ids):
        rejected |= idr.assigned & np.isin(idr.ids, bad_ids)
    rejects: list[dict] = []
    if rejected.any():
        first_by_id: dict[int, int] = {}
        for i, _ in problems:
            if idr.assigned[i]:
                first_by_id.setdefault(int(idr.ids[i]), i)
        for i in np.flatnonzero(rejected).tolist():
            rec = where(i).to_dict()
            rec["split"], rec["step"] = inp.split, step
            if i in reason:
                rec["field"], rec["reason"] = reason[i].field, reason[i].message
            else:
                j = first_by_id[int(idr.ids[i])]
                rec["field"] = None
                rec["reason"] = f"sibling of rejected sample {where(j)} (rollout {int(idr.ids[i])}): {reason[j].field}: {reason[j].message}"
            if idr.assigned[i]:
                rec["rollout_id"] = int(idr.ids[i])
            rejects.append(rec)
    survivors = valid & ~rejected
    # the valid rows, in order; keep survivors
    batches = [b for c in chunks for b in c.batches]
    pre = pa.Table.from_batches(batches, schema=pre_schema(opts.keep_text)) if batches else pre_schema(opts.keep_text).empty_table()
    pos = pre.column("_pos").to_numpy()
    keep = survivors[pos]
    if not keep.all():
        pre = pre.filter(pa.array(keep))
        pos = pos[keep]
    ids = idr.ids[pos]
    values = pre.column("_reward_value").to_numpy()
    gi = [group_index[p] for p in pos.tolist()]
    if inp.split == "eval":
        rewards = values.astype(np.float32)
    elif opts.slime_compat:
        rewards = slime_compat_rewards(
            values,
            advantage_estimator=opts.advantage_estimator,
            rewards_normalization=opts.rewards_normalization,
            grpo_std_normalization=opts.grpo_std_normalization,
            n_samples_per_prompt=opts.n_samples_per_prompt or 1,
            rollout_batch_size=opts.rollout_batch_size or 0,
        )
    else:
        try:
            keys = group_keys(gi, opts.n_samples_per_prompt)
        except ValueError:
            k = next(i for i, g in enumerate(gi) if g is None)
            raise InvalidInputError(
                f"{where(int(pos[k]))}: group_index: missing, so prompt groups are unknown; "
                "pass --n-samples-per-prompt N to group consecutive samples"
            ) from None
        rewards = normalize_rewards(
            values,
            keys,
            advantage_estimator=opts.advantage_estimator,
            rewards_normalization=opts.rewards_normalization,
            grpo_std_normalization=opts.grpo_std_normalization,
            n_samples_per_prompt=opts.n_samples_per_prompt,
        )
    mask_totals = pre.column("_mask_total").to_numpy()
    sums = rollout_mask_sums(ids, mask_totals)
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
        part = table.take(pa.array(rows)) if opts.shards > 1 else table
        wf = write_parquet(part, staging.path(rel), compression=opts.compression, compression_level=opts.compression_level,
                           row_group_bytes=opts.row_group_bytes)
        info = {
            "path": rel,
            "rows": part.num_rows,
            "rollouts": int(len(np.unique(ids[rows]))) if len(rows) else 0,
            "tokens": plan.tokens[r],
            "bytes": wf.bytes,
            "sha256": wf.sha256,
            "row_groups": wf.row_groups,
        }
        if opts.mmap:
            mrel = f"mmap/{top}/step-{step:06d}/shard-{r:05d}-of-{opts.shards:05d}.arrow"
            mf = write_ipc(part, staging.path(mrel))
            info["mmap"] = {"path": mrel, "bytes": mf.bytes, "sha256": mf.sha256}
        shard_infos.append(info)
    anomalies = [dict(a, step=step, split=inp.split) for a in idr.anomalies]
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


def plan_units(inputs: list[str], opts: ConvertOptions) -> tuple[list[Unit], list[str], list[str]]:
    """Discover inputs, select --steps, order by (split, step), refuse duplicate steps."""
    files, skipped, notes = discover(inputs, opts.step)
    lo, hi = parse_steps(opts.steps)
    units = []
    seen: dict[tuple, str] = {}
    for f in files:
        if f.step is not None:
            if (lo is not None and f.step < lo) or (hi is not None and f.step > hi):
                continue
            key = (f.split, f.step)
            if key in seen:
                raise InvalidInputError(f"two inputs give {f.split} step {f.step}: {seen[key]} and {f.display}")
            seen[key] = f.display
        units.append(Unit(f, f.step))
    units.sort(key=lambda u: (u.input.split != "train", u.step if u.step is not None else -1, u.input.display))
    return units, skipped, notes


def convert(inputs: list[str], out: str, options: ConvertOptions | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Convert dumps to OUT; returns the result summary (plain data). Raises RolloutCliError."""
    opts = options or ConvertOptions()
    opts.check()
    t0 = time.time()
    units, skipped, notes = plan_units(inputs, opts)
    if not units:
        raise UsageError("no input files found (expected .pt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet)")
    staging = output.prepare(out, overwrite=opts.overwrite, resume=opts.resume)
    results: list[UnitResult] = []
    seen: set = set()
    budget = None
    if opts.on_error == "fail":
        budget = opts.max_errors if opts.max_errors else 20
    total_rejected = 0
    try:
        for k, unit in enumerate(units):
            if progress:
                progress(unit.input.display, k, len(units))
            res = _process_unit(unit, opts, staging, budget, seen)
            if res is None:
                notes.append(f"{unit.input.display}: slime train-side dump (format_version key), skipped")
                continue
            results.append(res)
            total_rejected += res.rejected
            if opts.on_error == "skip" and opts.max_errors is not None and total_rejected > opts.max_errors:
                raise InvalidInputError(
                    f"more than --max-errors {opts.max_errors} samples rejected ({total_rejected} so far); stopped, nothing written",
                    [Problem(Location(r["file"], *([k for k in ("line", "row", "sample") if k in r] or ["file"])[:1], r.get("line", r.get("row", r.get("sample")))), r["field"], r["reason"]) for res_ in results for r in res_.rejects][: opts.max_errors + 1],
                )
        if progress:
            progress("", len(units), len(units))
    except _ProblemLimit as e:
        problems = e.args[0]
        shown = problems[:budget] if budget else problems
        raise InvalidInputError(f"{len(shown)} invalid sample(s){' (first ' + str(budget) + ' shown)' if budget and len(problems) >= budget else ''}: {shown[0]}", shown) from None
    rejects_info = None
    all_rejects = [r for res in results for r in res.rejects]
    if all_rejects:
        import hashlib

        path = staging.path("rejects.jsonl")
        data = b"".join(orjson.dumps(r) + b"\n" for r in all_rejects)
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        rejects_info = {"path": "rejects.jsonl", "count": len(all_rejects), "sha256": hashlib.sha256(data).hexdigest()}
    inputs_info = []
    for res in results:
        fp = manifest_mod.file_fingerprint(res.input.path) if res.input.path != "-" else {}
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
    opts_d = opts.conversion_options()
    opts_d["reward_mode"] = "slime_compat" if opts.slime_compat else "group_index"
    m = manifest_mod.build(
        options=opts_d,
        inputs=inputs_info,
        steps=steps_info,
        counts=counts,
        rejects=rejects_info,
        anomalies=anomalies,
        volatile={"created_unix": round(t0, 3), "seconds": round(time.time() - t0, 3)},
    )
    staging.commit(m)
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
