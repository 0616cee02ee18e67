"""The pipeline, one step at a time: read -> normalize -> ids and fields -> plan -> write + manifest.

This module is the converting process: it plans the work, schedules the stage functions
(stages.py) on an engine, and commits the output. It imports no Arrow or numpy itself, so the
pool's workers (whose fork server preloads the stages) start while it is still setting up.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import time
from typing import Callable

import orjson

from ..core import hashing, storage
from ..output import manifest as manifest_mod
from ..output import commit as output
from ..output import layout
from .engines import make_engine
from ..core.errors import InvalidInputError, Location, Problem, StepProblems, UsageError
from .handover import can_hand_over
from ..inputs.discover import InputFile
from ..inputs.units import claim_step, plan_units
from ..core.options import ConvertOptions
from ..output.commit import staged_path as _staged
from .tasks import PartResult, PartTask, Unit, UnitResult

__all__ = ["ConvertOptions", "convert", "plan_units", "parse_part", "finish_unit"]


def parse_part(task: PartTask, opts: ConvertOptions, problem_budget: int | None) -> PartResult:
    """Stages 1-2 for one part (runs in a worker): read, validate, stage the valid rows."""
    from .stages import parse_part as run

    return run(task, opts, problem_budget)


def finish_unit(unit: Unit, parts: list[PartResult], opts: ConvertOptions, staging_root: str) -> UnitResult | str:
    """Stages 3-6 for one step (runs in a worker): ids, rejects, rewards and fields, shards."""
    from .stages import finish_unit as run

    return run(unit, parts, opts, staging_root)


def _plan_parts(units: list[Unit], workers: int, staging_root: str) -> list[PartTask]:
    """Split each unit into parts when workers are idle: plain JSONL files into byte ranges,
    Parquet files into row-group ranges (the registry's splitters)."""
    from ..inputs.registry import split_input

    spare = max(1, workers // max(1, len(units)))
    tasks = []
    for u, unit in enumerate(units):
        for k, (a, b) in enumerate(split_input(unit.input, spare)):
            inp = unit.input
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
    to_hash = list(dict.fromkeys(u.input.path for u in units if u.input.path != "-" and u.input.path not in fingerprints))
    hashing_here: dict[str, cf.Future] = {}
    hasher = None
    remote = getattr(engine, "remote", False)  # inputs are then hashed where the work runs
    if to_hash and not remote:
        # on a thread of this process (BLAKE3 and file reads release the GIL), started before
        # the first task: it hashes while this process waits for the pool's fork server to
        # finish its imports, instead of taking a core's share from a parsing worker later
        hasher = cf.ThreadPoolExecutor(1, thread_name_prefix="rollout-cli-fingerprint")
        hashing_here = {path: hasher.submit(_fingerprint, path) for path in to_hash}

    def fingerprint_of(path: str) -> None:
        if path in hashing_here:
            fingerprints[path] = hashing_here.pop(path).result()

    got: dict[int, list[PartResult]] = {}
    finished: dict[int, UnitResult] = {}
    total_rejected = 0
    done_units = 0
    running: dict[int, dict[int, PartTask]] = {}  # parse tasks not back yet, per unit and part
    for t in tasks:
        running.setdefault(t.unit, {})[t.part] = t
    asked: set[str] = set()

    def hand_over() -> None:
        """With a core idle and nothing queued, send a worker to take over the rest of the
        largest part still being parsed (handover.py): parts cut to equal sizes rarely finish
        together, and steps differ in size."""
        if remote or engine.slots() < 2 or len(pending) >= engine.slots():
            return

        def size(t: PartTask) -> int:
            return (t.end if t.end is not None else os.path.getsize(t.input.path)) - t.start

        candidates = [t for parts in running.values() for t in parts.values()
                      if t.take_from is None and t.stage_path not in asked and can_hand_over(t)]
        if not candidates:
            return
        victim = max(candidates, key=size)
        u = victim.unit
        k = parts_of[u]  # parts are numbered in the order they are made
        taker = PartTask(u, k, victim.input, 0, None, _staged(staging_root, f"parts/u{u:05d}-p{k:04d}.arrow"),
                         take_from=victim.stage_path)
        asked.add(victim.stage_path)
        parts_of[u] += 1
        running[u][k] = taker
        pending[engine.submit(parse_part, taker, opts, budget)] = ("parse", u)

    try:
        for t in tasks:
            pending[engine.submit(parse_part, t, opts, budget)] = ("parse", t.unit)
        if remote:
            for path in to_hash:
                pending[engine.submit(_fingerprint, path)] = ("fingerprint", path)
        while pending:
            hand_over()
            for h in engine.wait(list(pending)):
                kind, key = pending.pop(h)
                value = engine.result(h)
                if kind == "fingerprint":
                    fingerprints[key] = value
                elif kind == "parse":
                    if value.stopped:
                        raise StepProblems([p for _, p in value.problems])
                    got.setdefault(key, []).append(value)
                    running[key].pop(value.part, None)
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
                    fingerprint_of(value.input.path)
                    if on_done:
                        on_done(value)
                    total_rejected += value.rejected
                    if opts.on_error == "skip" and opts.max_errors is not None and total_rejected > opts.max_errors:
                        raise InvalidInputError(
                            f"more than --max-errors {opts.max_errors} samples rejected ({total_rejected} so far); stopped, nothing written",
                            [_reject_problem(r) for r in value.rejects[: opts.max_errors + 1]],
                        )
        for path in list(hashing_here):
            fingerprint_of(path)
    finally:
        if hasher is not None:
            hasher.shutdown(wait=True, cancel_futures=True)
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
            denominators={k: v for k, v in st.items() if k.startswith("step_")},  # step_mask_sum, ...
            schedule=st.get("schedule"),
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
    storage.write_durable(path, orjson.dumps({"fingerprint": fingerprint, "result": _result_to_dict(res)}))


def _output_error(out: str, e: OSError):
    from ..core.errors import OutputError

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
        workers = opts.worker_count()
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
            claim_step(seen, r.split, r.step, r.input.display)
        for r in results:
            if r.input.path != "-" and r.input.path not in fingerprints and storage.exists(r.input.path):
                fingerprints[r.input.path] = _fingerprint(r.input.path)
        rejects_info = None
        all_rejects = [r for res in results for r in res.rejects]
        if all_rejects:
            path = staging.path(layout.REJECTS)
            data = b"".join(orjson.dumps(r) + b"\n" for r in all_rejects)
            storage.write_durable(path, data)
            rejects_info = {"path": layout.REJECTS, "count": len(all_rejects), "blake3": hashing.bytes_digest(data)}
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
                **res.denominators,
                "shards": res.shards,
                **({"schedule": res.schedule, "dropped": res.schedule["dropped_samples"]} if res.schedule else {}),
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
        if opts.schedule == "slime":  # samples slime's trainer would drop (in no shard; see steps[].schedule)
            counts["dropped"] = sum(r.schedule["dropped_samples"] for r in results if r.schedule)
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
        "steps": [{k: s[k] for k in ("split", "step", "input", "samples", "rows", "rejected", "rollouts", "tokens", "imbalance", "dropped")
                   if k in s} for s in steps_info],
        "rejects": rejects_info,
        "skipped": skipped,
        "notes": notes,
        "warnings": warnings,
        "anomalies": anomalies,
        "seconds": round(time.time() - t0, 3),
    }
