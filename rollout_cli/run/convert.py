"""The pipeline, one step at a time: read -> normalize -> ids and fields -> plan -> write + manifest.

This module is the converting process: it plans the work, hands it to the scheduler
(scheduler.py, which runs the stage functions of stages.py on an engine), and commits the
output with the manifest that record.py builds; resume.py decides what --resume reuses. It
imports no Arrow or numpy itself, so the pool's workers (whose fork server preloads the stages)
start while it is still setting up.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from typing import Callable

from ..core import storage
from ..output import manifest as manifest_mod
from ..output import commit as output
from . import resume
from .engines import make_engine
from .preload import worker_modules
from ..core.errors import UsageError, output_error
from ..inputs.units import claim_step, plan_units
from ..core.options import ConvertOptions
from ..output.commit import staged_path as _staged
from ..inputs.units import Unit
from .failures import fail_budget
from .live import LiveWatch
from .record import build_manifest, write_rejects
from .resume import drop_staged, prev_fp, record_done
from .scheduler import Fingerprints, Scheduler
from .scheduler import convert_unit, finish_unit, parse_part  # noqa: F401 (re-exported)
from .tasks import PartTask, UnitResult

__all__ = ["ConvertOptions", "convert", "plan_units", "parse_part", "finish_unit", "convert_unit", "prev_fp"]


def _plan_parts(units: list[Unit], workers: int, staging_root: str) -> list[PartTask]:
    """Split each unit into parts when workers are idle: plain JSONL files into byte ranges,
    Parquet files into row-group ranges (the registry's splitters). A unit read whole while
    cores are spare may use them (the Parquet reader decodes columns on threads)."""
    from ..inputs.registry import split_input

    spare = max(1, workers // max(1, len(units)))
    tasks = []
    for u, unit in enumerate(units):
        pieces = split_input(unit.input, spare)
        for k, (a, b) in enumerate(pieces):
            inp = unit.input
            tasks.append(PartTask(u, k, inp, a, b, _staged(staging_root, f"parts/u{u:05d}-p{k:04d}.arrow"),
                                  threads=spare if len(pieces) == 1 else 1))
    return tasks


def convert(inputs: list[str], out: str, options: ConvertOptions | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Convert dumps to OUT; returns the result summary (plain data). Raises RolloutCliError."""
    opts = options or ConvertOptions()
    opts.check()
    t0 = time.time()
    units, skipped, notes = plan_units(inputs, opts, out)
    if not units:
        from ..inputs.registry import extensions

        raise UsageError(f"no input files found (expected {', '.join(sorted(extensions()))})")
    live = LiveWatch(units, opts.skip_incomplete)  # inputs still being written: refused before anything is staged
    units = live.start()
    recorded = _recorded_options(opts)
    with output.writer(out, opts.wait, on_error=lambda e: output_error(out, e)) as lock:  # OUT's one writer
        return _convert_locked(out, units, opts, recorded, lock, live, skipped, notes, t0, progress)


def _convert_locked(out: str, units: list[Unit], opts: ConvertOptions, recorded: dict, lock, live: LiveWatch,
                    skipped: list[str], notes: list[str], t0: float, progress) -> dict:
    """convert() once OUT's writer lock is held: every refusal before anything is staged."""
    if lock.note:
        notes.append(lock.note)
    fingerprints = live.fingerprints()
    try:
        if opts.resume and not live.pending and (prev := resume.up_to_date(out, units, recorded, fingerprints)):
            return resume.summary_of(out, prev, skipped, notes, time.time() - t0)
        staging = output.prepare(out, overwrite=opts.overwrite, resume=opts.resume, options=recorded)
    except OSError as e:
        if not opts.resume and not storage.is_uri(out):  # the staging area it began to open
            output.Staging(out).abandon()
        raise output_error(out, e) from None
    try:
        prev = _resumed_manifest(out, opts, recorded)
        results = live.converting(lambda: _convert_units(out, units, opts, staging.root, prev, fingerprints, notes, progress))
        results = live.settle(results, fingerprints, lambda r: drop_staged(staging.root, r))
        m = build_manifest(results, opts, recorded, prev, fingerprints, write_rejects(staging, results), t0,
                      getattr(staging, "generation", None), pending=live.pending)
        lock.check()
        staging.commit(m)
    except BaseException as e:
        _leave_output(out, staging, keep=isinstance(e, KeyboardInterrupt))
        if isinstance(e, OSError):  # the readers turn input OSErrors into InvalidInputError: this is OUT
            raise output_error(out, e) from None
        raise
    return live.report(_summary(out, m, results, skipped, notes, t0))


def _recorded_options(opts: ConvertOptions) -> dict:
    """The options that decide the output's bytes, as the manifest records them."""
    recorded = opts.conversion_options()
    if "tokenizer" in recorded:  # what decides the rows is the file's content, not where it lies
        from ..text.tokenizer import file_digest

        recorded["tokenizer"] = file_digest(recorded["tokenizer"])
    recorded["reward_mode"] = "slime_compat" if opts.slime_compat else "group_index"
    return recorded


def _resumed_manifest(out: str, opts: ConvertOptions, recorded: dict) -> dict | None:
    """With --resume, the complete output's manifest (None when there is none; prepare checked
    its options)."""
    return manifest_mod.read(out) if opts.resume and output.state(out) == "complete" else None


def _convert_units(out: str, units: list[Unit], opts: ConvertOptions, staging_root: str, prev: dict | None,
                   fingerprints: dict[str, dict], notes: list[str], progress) -> list[UnitResult]:
    """Every step's result, in (split, step) order: reused ones (--resume) and new ones; every
    input fingerprinted."""
    reused: dict[int, UnitResult] = {}
    kept: list[UnitResult] = []
    if opts.resume:
        for u in units:
            if u.input.path != "-" and u.input.path not in fingerprints:
                recorded = prev_fp(prev, u.input.display) if prev else None
                fingerprints[u.input.path] = manifest_mod.file_fingerprint(
                    u.input.path, manifest_mod.fingerprint_algorithm(recorded))
        reused, kept = resume.plan(out, units, opts, staging_root, prev, fingerprints, notes)
    results = list(reused.values()) + kept
    todo = [unit for k, unit in enumerate(units) if k not in reused]
    if todo:
        results += _run(todo, opts, staging_root, fingerprints, notes, progress)
    results.sort(key=lambda r: (r.split != "train", r.step))
    _check_distinct_steps(results)
    for r in results:
        if r.input.path != "-" and r.input.path not in fingerprints and storage.exists(r.input.path):
            fingerprints[r.input.path] = manifest_mod.file_fingerprint(r.input.path)
    return results


def _run(units: list[Unit], opts: ConvertOptions, staging_root: str, fingerprints: dict[str, dict],
         notes: list[str], progress) -> list[UnitResult]:
    """Convert `units` on the engine the options choose; each finished step is recorded in
    staging (for --resume) as it comes back."""
    parts_root = staging_root
    if opts.engine == "ray":
        engine = make_engine("ray", opts.workers or 0, opts.ray_address)
        tasks = _plan_parts(units, opts.workers or engine.slots(), staging_root)
    else:
        workers = opts.worker_count()
        if storage.is_uri(staging_root):  # parsed rows stay on this machine: only shards are uploaded
            parts_root = tempfile.mkdtemp(prefix="rollout-cli-parts-")
        tasks = _plan_parts(units, workers, parts_root)
        engine = make_engine("local", min(workers, max(len(tasks), len(units))),
                             preload=worker_modules(sorted({u.input.format for u in units})),
                             inline=True if workers <= 1 else None)
    budget = fail_budget(opts.on_error, opts.max_errors)
    scheduler = Scheduler(engine, units, tasks, opts, budget, staging_root, notes, progress,
                         on_done=lambda r: record_done(staging_root, r, fingerprints.get(r.input.path)))
    scheduler.parts_root = parts_root
    try:
        return scheduler.run(Fingerprints(fingerprints, units))
    finally:
        engine.shutdown()
        if parts_root != staging_root:
            shutil.rmtree(parts_root, ignore_errors=True)


def _check_distinct_steps(results: list[UnitResult]) -> None:
    seen: dict = {}
    for r in results:
        claim_step(seen, r.split, r.step, r.input.display)


def _leave_output(out: str, staging, keep: bool) -> None:
    """After a failure: a commit under way is rolled forward (the old output is partly moved
    aside), anything else leaves OUT as it was (a killed run leaves its staging, for --resume)."""
    if staging.committing():
        try:
            output.finish_commit(out)
        except Exception:
            pass  # left for --resume, which finishes it
    else:
        staging.abandon(keep=keep)


def _summary(out: str, m: dict, results: list[UnitResult], skipped: list[str], notes: list[str], t0: float) -> dict:
    """What convert returns: the manifest's counts and steps (without their shards), and what
    was skipped, noted or found odd."""
    keys = ("split", "step", "input", "samples", "rows", "rejected", "rollouts", "tokens", "imbalance", "dropped")
    return {
        "out": out,
        "counts": m["counts"],
        "steps": [{k: s[k] for k in keys if k in s} for s in m["steps"]],
        "rejects": m["rejects"],
        "skipped": skipped,
        "notes": notes + [n for r in results for n in r.notes],
        "warnings": [w for r in results for w in r.warnings],
        "anomalies": m["anomalies"],
        "elapsed_seconds": round(time.time() - t0, 3),
    }
