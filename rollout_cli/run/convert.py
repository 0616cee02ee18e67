"""The pipeline, one step at a time: read -> normalize -> ids and fields -> plan -> write + manifest.

This module is the converting process: it plans the work, schedules the stage functions
(stages.py) on an engine, and commits the output. It imports no Arrow or numpy itself, so the
pool's workers (whose fork server preloads the stages) start while it is still setting up.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import errno
import os
import shutil
import tempfile
import time
from collections import deque
from typing import Callable

import orjson

from ..core import hashing, storage
from ..output import manifest as manifest_mod
from ..output import commit as output
from ..core import layout
from . import resume
from .engines import make_engine
from .preload import WORKER_MODULES
from ..core.errors import InvalidInputError, Location, Problem, StepProblems, UsageError, output_error
from ..inputs.discover import InputFile
from ..inputs.units import claim_step, plan_units
from ..core.options import ConvertOptions
from ..output.commit import staged_path as _staged
from ..inputs.units import Unit
from .failures import FailedPart, RunFailures, error_problems, fail_budget, parts_problems
from .live import LiveWatch
from .tasks import PartResult, PartTask, UnitResult

__all__ = ["ConvertOptions", "convert", "plan_units", "parse_part", "finish_unit"]


def parse_part(task: PartTask, opts: ConvertOptions, problem_budget: int | None) -> PartResult:
    """Stages 1-2 for one part (runs in a worker): read, validate, stage the valid rows."""
    from .stages import parse_part as run

    return run(task, opts, problem_budget)


def finish_unit(unit: Unit, parts: list[PartResult], opts: ConvertOptions, staging_root: str) -> UnitResult | str:
    """Stages 3-6 for one step (runs in a worker): ids, rejects, rewards and fields, shards."""
    from .stages import finish_unit as run

    return run(unit, parts, opts, staging_root)


def convert_unit(task: PartTask, unit: Unit, opts: ConvertOptions, problem_budget: int | None,
                 staging_root: str) -> UnitResult | PartResult | str:
    """Stages 1-6 for a step read as one part, in one task (runs in a worker)."""
    from .stages import convert_unit as run

    return run(task, unit, opts, problem_budget, staging_root)


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


def _fingerprint_label(path: str) -> str:
    return f"fingerprint of input {path}"


def _part_label(task: PartTask) -> str:
    """'parse of train step 3 (rollout_data/3.jsonl, bytes 0-1048576)' and the like."""
    inp = task.input
    where = f", bytes {task.start}-{task.end if task.end is not None else 'end'}" if task.start or task.end is not None else ""
    return f"parse of {_step_words(inp.split, inp.step)} ({inp.display}{where})"


def _finish_label(unit: Unit) -> str:
    step = unit.step if unit.step is not None else unit.input.step
    return f"finish of {_step_words(unit.input.split, step)} ({unit.input.display})"


def _step_words(split: str, step: int | None) -> str:
    return f"{split} step {step}" if step is not None else f"{split} input"


class _Fingerprints:
    """The inputs' fingerprints (XXH3-128), taken while the workers parse: on a thread of this
    process with a local engine, as tasks with a remote one (inputs are then hashed where the
    work runs). With a local engine they are started before the first task: the thread hashes
    while this process waits for the pool's fork server to finish its imports, instead of
    taking a core's share from a parsing worker later (hashing and file reads release the GIL)."""

    def __init__(self, known: dict[str, dict], units: list[Unit]):
        self.known = known
        self.todo = list(dict.fromkeys(u.input.path for u in units if u.input.path != "-" and u.input.path not in known))
        self._here: dict[str, cf.Future] = {}
        self._thread: cf.ThreadPoolExecutor | None = None

    def start_here(self) -> None:
        if self.todo:
            self._thread = cf.ThreadPoolExecutor(1, thread_name_prefix="rollout-cli-fingerprint")
            self._here = {path: self._thread.submit(manifest_mod.file_fingerprint, path) for path in self.todo}

    def collect(self, path: str) -> None:
        """Wait for one input's fingerprint taken here (if it is being taken)."""
        if path in self._here:
            self.known[path] = self._here.pop(path).result()

    def collect_all(self) -> None:
        for path in list(self._here):
            self.collect(path)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True, cancel_futures=True)


class _Scheduler:
    """Parse tasks first, then each step's finish as soon as all its parts are in; the results
    as they come back: fingerprints, parts, finished steps (counted against --max-errors)."""

    def __init__(self, engine, units: list[Unit], tasks: list[PartTask], opts: ConvertOptions, budget: int | None,
                 staging_root: str, notes: list[str], progress, on_done):
        self.engine, self.units, self.opts, self.budget = engine, units, opts, budget
        self.staging_root, self.notes, self.progress, self.on_done = staging_root, notes, progress, on_done
        self.parts_root = staging_root  # where parsed parts are staged (a local folder for a remote OUT)
        self.remote = getattr(engine, "remote", False)
        self.pending: dict = {}  # engine handle -> (kind, key)
        self.parts_of: dict[int, int] = {}  # parts made per unit (they are numbered in that order)
        for t in tasks:
            self.parts_of[t.unit] = self.parts_of.get(t.unit, 0) + 1
        self.tasks = tasks
        self.got: dict[int, list[PartResult]] = {}
        self.finished: dict[int, UnitResult] = {}
        self.rejected = 0
        self.done_units = 0
        self.settled: set[int] = set()  # units finished, noted or failed
        self.failures = RunFailures(budget) if budget is not None else None  # --on-error fail
        # With as many steps as slots, each step is one task that reads, finishes and writes it
        # in one process (nothing staged and read back), largest first so the run's last
        # tasks are its smallest; fewer steps are cut into parts for the idle slots.
        self.step_tasks = not self.remote and len(units) >= engine.slots()

    def run(self, fingerprints: _Fingerprints) -> list[UnitResult]:
        """Every step's result; under --on-error fail, InvalidInputError with the invalid samples
        of the whole run (the steps without any are still read, to find those of the next ones)."""
        if not self.remote:
            fingerprints.start_here()
        try:
            queue = deque(sorted(self.tasks, key=self._size, reverse=True) if self.step_tasks else self.tasks)
            # under fail, one step at a time where one runs at a time, to stop at the budget
            window = 1 if self.failures is not None and self.engine.slots() == 1 else len(queue)
            while queue and len(self.pending) < window:
                self._submit_parse(queue.popleft())
            if self.remote:
                for path in fingerprints.todo:
                    self._submit(("fingerprint", path), manifest_mod.file_fingerprint, path, label=_fingerprint_label(path))
            while (self.pending or queue) and not self._enough():
                while queue and len(self.pending) < window:
                    self._submit_parse(queue.popleft())
                for h in self.engine.wait(list(self.pending)):
                    kind, key = self.pending.pop(h)
                    try:
                        value = self.engine.result(h)
                    except (StepProblems, InvalidInputError) as e:
                        if self.failures is None or kind == "fingerprint":
                            raise
                        self._failed(key, e, kind)
                        if queue:  # the rest in input order: the front of the input decides
                            queue = deque(sorted(queue, key=lambda t: (t.unit, t.start, t.part)))
                        continue
                    if kind == "fingerprint":
                        fingerprints.known[key] = value
                    elif kind == "parse":
                        self._parsed(key, value)
                    elif isinstance(value, PartResult):  # a whole step that hit the problem budget
                        self._unit_failed(key, [p for _, p in value.problems], stopped=True)
                    else:
                        self._finished(key, value, fingerprints)
            if self.failures:
                raise self.failures.error(stopped_early=bool(queue) or any(k != "fingerprint" for k, _ in self.pending.values()))
            fingerprints.collect_all()
        finally:
            fingerprints.close()
        return list(self.finished.values())

    def _enough(self) -> bool:
        return bool(self.failures) and self.failures.enough(self.settled, len(self.units))

    def _failed(self, u: int, e: Exception, kind: str) -> None:
        """A task of unit `u` raised invalid samples (StepProblems) or an invalid input."""
        if isinstance(e, StepProblems):
            problems, error = e.args[0], None
        else:
            problems, error = error_problems(e, self.units[u].input.display), e
        if kind == "parse":  # one part of several: the unit is settled once all are in
            self.got.setdefault(u, []).append(FailedPart(problems, error))
            self._parts_in(u)
        else:
            self._unit_failed(u, problems, error=error)

    def _unit_failed(self, u: int, problems: list[Problem], *, stopped: bool = False,
                     error: InvalidInputError | None = None) -> None:
        self.failures.add(u, problems, stopped=stopped, error=error)
        self.settled.add(u)

    def _submit(self, what: tuple, fn, *args, label: str, here: bool = False) -> None:
        self.pending[self.engine.submit(fn, *args, label=label, here=here)] = what

    def _submit_parse(self, task: PartTask) -> None:
        if self._whole(task):
            unit = self.units[task.unit]
            self._submit(("unit", task.unit), convert_unit, task, unit, self.opts, self.budget, self.staging_root,
                         label=_finish_label(unit))
            return
        # only this process has its stdin
        self._submit(("parse", task.unit), parse_part, task, self.opts, self.budget, label=_part_label(task),
                     here=task.input.path == "-")

    def _whole(self, task: PartTask) -> bool:
        """Whether the step is read and finished by one task: it is one part, on a local engine
        (a remote one retries parse and finish separately)."""
        return not self.remote and self.parts_of[task.unit] == 1 and task.input.path != "-"

    @staticmethod
    def _size(task: PartTask) -> int:
        if task.input.path == "-":
            return 0
        return (task.end if task.end is not None else storage.size(task.input.path)) - task.start

    def _parsed(self, u: int, part: PartResult) -> None:
        self.got.setdefault(u, []).append(part)
        self._parts_in(u)

    def _parts_in(self, u: int) -> None:
        """Once all parts of unit `u` are in: its finish, or (a part failed or stopped at the
        problem budget) the problems of its parts up to the first that failed, in line order."""
        got = self.got[u]
        if len(got) < self.parts_of[u]:
            return
        del self.got[u]
        if all(isinstance(p, PartResult) and not p.stopped for p in got):
            unit = self.units[u]
            self._submit(("finish", u), finish_unit, unit, got, self.opts, self.staging_root, label=_finish_label(unit))
            return
        problems, stopped, error = parts_problems(got)
        self._unit_failed(u, problems, stopped=stopped, error=error)

    def _finished(self, u: int, value: UnitResult | str, fingerprints: _Fingerprints) -> None:
        self.settled.add(u)
        self.done_units += 1
        if self.progress:
            self.progress(self.units[u].input.display, self.done_units, len(self.units))
        if isinstance(value, str):  # nothing to convert: a note says why
            self.notes.append(value)
            return
        self.finished[u] = value
        fingerprints.collect(value.input.path)
        if self.on_done:
            self.on_done(value)
        self.rejected += value.rejected
        limit = self.opts.max_errors
        if self.opts.on_error == "skip" and limit is not None and self.rejected > limit:
            raise InvalidInputError(
                f"more than --max-errors {limit} samples rejected ({self.rejected} so far); stopped, nothing written",
                [_reject_problem(r) for r in value.rejects[: limit + 1]],
            )


def _reject_problem(r: dict) -> Problem:
    kind = next((k for k in ("line", "row", "sample") if k in r), "file")
    return Problem(Location(r["file"], kind, r.get(kind)), r.get("field"), r["reason"], r.get("rule"))


prev_fp = manifest_mod.recorded_fingerprint


def _result_to_dict(r: UnitResult) -> dict:
    return dataclasses.asdict(r)


def _result_from_dict(d: dict) -> UnitResult:
    d = dict(d)
    d["input"] = InputFile(**d["input"])
    return UnitResult(**d)


_same_content = manifest_mod.same_content


def _unit_files(res: UnitResult) -> list[str]:
    files = []
    for sh in res.shards:
        files.append(sh["path"])
        if "mmap" in sh:
            files.append(sh["mmap"]["path"])
    return files


_LINK_REFUSED = {errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EACCES, errno.ENOSYS}


def _link_into_staging(out: str, staging_root: str, rels: list[str]) -> bool:
    """Hard-link committed files into the staging tree (their bytes and inodes stay untouched),
    or copy them where the file system has no hard links (some network and overlay ones). On
    an object store the files stay where they are: the new manifest names them in the
    generation that wrote them (a file of the old top-level layout is converted again)."""
    if storage.is_uri(out):
        return all(layout.split_generation(rel)[0] is not None and storage.is_file(storage.join(out, rel)) for rel in rels)
    for rel in rels:
        src = os.path.join(out, rel)
        if not os.path.exists(src):
            return False
    for rel in rels:
        dst = _staged(staging_root, rel)
        if os.path.exists(dst):
            os.remove(dst)
        try:
            os.link(os.path.join(out, rel), dst)
        except OSError as e:
            if e.errno not in _LINK_REFUSED:
                raise
            shutil.copyfile(os.path.join(out, rel), dst)  # a copy of committed bytes, synced like any staged file
            with open(dst, "rb+") as f:
                os.fsync(f.fileno())
    return True


def _previous_results(out: str, prev: dict) -> dict[str, UnitResult]:
    """The committed output's steps as UnitResults, keyed by input path."""
    rejects_by: dict[tuple, list] = {}
    rj = prev.get("rejects")
    if rj:
        for line in storage.read_bytes(storage.join(out, rj["path"])).splitlines():
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
    done_dir = storage.join(staging_root, "done")
    staged_done: dict[str, dict] = {}
    names = sorted(storage.files_under(done_dir)) if storage.is_uri(done_dir) else (
        sorted(os.listdir(done_dir)) if os.path.isdir(done_dir) else [])
    for name in names:
        rec = orjson.loads(storage.read_bytes(storage.join(done_dir, name)))
        staged_done[rec["result"]["input"]["display"]] = rec
    committed = _previous_results(out, prev) if prev else {}
    prev_inputs = {i["path"]: prev_fp(prev, i["path"]) for i in (prev or {}).get("inputs", [])}
    reused: dict[int, UnitResult] = {}
    for k, unit in enumerate(units):
        d = unit.input.display
        fp = fingerprints.get(unit.input.path)
        rec = staged_done.get(d)
        if rec and _same_content(rec["fingerprint"], fp):
            res = _result_from_dict(rec["result"])
            if all(storage.exists(storage.join(staging_root, rel)) for rel in _unit_files(res)):
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


def _done_rel(res: UnitResult) -> str:
    return f"done/{res.split}-{res.step:012d}.json"


def _record_done(staging_root: str, res: UnitResult, fingerprint: dict | None) -> None:
    path = _staged(staging_root, _done_rel(res))
    storage.write_durable(path, orjson.dumps({"fingerprint": fingerprint, "result": _result_to_dict(res)}))


def _drop_staged(staging_root: str, res: UnitResult) -> None:
    """Forget a step left out at the commit (its input changed while it was read): its record
    for --resume, and locally its staged files (on an object store, the commit removes what
    its manifest does not list)."""
    done = storage.join(staging_root, _done_rel(res))
    if storage.exists(done):
        storage.delete_file(done)
    if not storage.is_uri(staging_root):
        for rel in _unit_files(res):
            path = os.path.join(staging_root, rel)
            if os.path.lexists(path):
                os.remove(path)
            folder = os.path.dirname(path)
            while folder != staging_root and os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)  # its step's folder, then data/ or mmap/ when nothing else is in them
                folder = os.path.dirname(folder)


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
        results = live.settle(results, fingerprints, lambda r: _drop_staged(staging.root, r))
        m = _manifest(results, opts, recorded, prev, fingerprints, _write_rejects(staging, results), t0,
                      getattr(staging, "generation", None), pending=live.pending)
        lock.check()
        staging.commit(m)
    except BaseException as e:
        _leave_output(out, staging, keep=isinstance(e, KeyboardInterrupt), created=False)
        if isinstance(e, OSError):  # the readers turn input OSErrors into InvalidInputError: this is OUT
            raise output_error(out, e) from None
        raise
    return live.report(_summary(out, m, results, skipped, notes, t0))


def _recorded_options(opts: ConvertOptions) -> dict:
    """The options that decide the output's bytes, as the manifest records them."""
    recorded = opts.conversion_options()
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
        reused, kept = _resume_plan(out, units, opts, staging_root, prev, fingerprints, notes)
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
        engine = make_engine("local", min(workers, max(len(tasks), len(units))), preload=WORKER_MODULES,
                             inline=True if workers <= 1 else None)
    budget = fail_budget(opts.on_error, opts.max_errors)
    scheduler = _Scheduler(engine, units, tasks, opts, budget, staging_root, notes, progress,
                         on_done=lambda r: _record_done(staging_root, r, fingerprints.get(r.input.path)))
    scheduler.parts_root = parts_root
    try:
        return scheduler.run(_Fingerprints(fingerprints, units))
    finally:
        engine.shutdown()
        if parts_root != staging_root:
            shutil.rmtree(parts_root, ignore_errors=True)


def _check_distinct_steps(results: list[UnitResult]) -> None:
    seen: dict = {}
    for r in results:
        claim_step(seen, r.split, r.step, r.input.display)


def _write_rejects(staging, results: list[UnitResult]) -> dict | None:
    """Every step's rejected samples into rejects.jsonl (synced); its manifest entry, or None."""
    rejects = [r for res in results for r in res.rejects]
    if not rejects:
        return None
    data = b"".join(orjson.dumps(r) + b"\n" for r in rejects)
    storage.write_durable(staging.path(layout.REJECTS), data)
    return {"path": layout.in_generation(getattr(staging, "generation", None), layout.REJECTS), "count": len(rejects),
            "blake3": hashing.bytes_digest(data)}


def _inputs_info(results: list[UnitResult], fingerprints: dict[str, dict], prev: dict | None) -> tuple[list[dict], dict[str, int]]:
    """The manifest's inputs, and their modification times (kept apart from the reproducible
    fields: time stamps change with copies)."""
    inputs, mtimes = [], {}
    for res in results:
        fp = dict(fingerprints.get(res.input.path) or (prev_fp(prev, res.input.display) if prev else {}))
        if "mtime_ns" in fp:
            mtimes[res.input.display] = fp.pop("mtime_ns")
        inputs.append(dict({"path": res.input.display, "format": res.input.format, "split": res.split, "step": res.step,
                            "samples": res.samples}, **fp))
    return inputs, mtimes


def _step_info(res: UnitResult) -> dict:
    return {
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


def _counts(results: list[UnitResult], schedule: str | None) -> dict:
    counts = {
        "input_samples": sum(r.samples for r in results),
        "rows": sum(r.rows for r in results),
        "rejected": sum(r.rejected for r in results),
        "steps": sum(1 for r in results if r.split == "train"),
        "eval_steps": sum(1 for r in results if r.split == "eval"),
    }
    if schedule == "slime":  # samples slime's trainer would drop (in no shard; see steps[].schedule)
        counts["dropped"] = sum(r.schedule["dropped_samples"] for r in results if r.schedule)
    return counts


def _manifest(results: list[UnitResult], opts: ConvertOptions, recorded: dict, prev: dict | None,
              fingerprints: dict[str, dict], rejects: dict | None, t0: float, generation: str | None = None,
              pending: list[dict] | None = None) -> dict:
    inputs, mtimes = _inputs_info(results, fingerprints, prev)
    steps = [_step_info(res) for res in results]
    if generation:
        for st in steps:
            st["shards"] = [_in_generation(sh, generation) for sh in st["shards"]]
    return manifest_mod.build(
        generation=generation,
        options=recorded,
        inputs=inputs,
        steps=steps,
        counts=_counts(results, opts.schedule),
        rejects=rejects,
        anomalies=[a for r in results for a in r.anomalies],
        pending=pending,
        volatile={"created_unix": round(t0, 3), "seconds": round(time.time() - t0, 3), "input_mtime_ns": mtimes},
    )


def _in_generation(shard: dict, generation: str) -> dict:
    """A shard's manifest entry with its files' paths inside OUT on an object store: in this
    run's generation, or the earlier one a step reused by --resume was written in."""
    def place(rel: str) -> str:
        return rel if layout.split_generation(rel)[0] is not None else layout.in_generation(generation, rel)

    shard = dict(shard, path=place(shard["path"]))
    if shard.get("mmap"):
        shard["mmap"] = dict(shard["mmap"], path=place(shard["mmap"]["path"]))
    return shard


def _leave_output(out: str, staging, keep: bool, created: bool) -> None:
    """After a failure: a commit under way is rolled forward (the old output is partly moved
    aside), anything else leaves OUT as it was (a killed run leaves its staging, for --resume)."""
    if staging.committing():
        try:
            output.finish_commit(out)
        except Exception:
            pass  # left for --resume, which finishes it
    else:
        staging.abandon(keep=keep, remove_out=created)


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
        "seconds": round(time.time() - t0, 3),
    }
