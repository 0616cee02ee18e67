"""The run's task scheduler: which stage task goes to the engine when, and what comes back.

Parse tasks first, each step's finish as soon as all its parts are in (a step of one part is one
task), the inputs' fingerprints taken alongside; the results as they come back are counted
against --max-errors / --on-error fail. It imports no Arrow or numpy: the task functions import
the stages in the worker that runs them.
"""
from __future__ import annotations

import concurrent.futures as cf
from collections import deque

from ..core import storage
from ..core.errors import InvalidInputError, Location, Problem, StepProblems
from ..core.options import ConvertOptions
from ..inputs.registry import fingerprinted_on_read
from ..inputs.units import Unit
from ..output import manifest as manifest_mod
from ..pipeline.staleness import STALE_RULE
from .failures import FailedPart, RunFailures, error_problems, parts_problems
from .tasks import PartResult, PartTask, UnitResult


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


def _fingerprint_label(path: str) -> str:
    return f"fingerprint of input {path}"


def part_label(task: PartTask) -> str:
    """'parse of train step 3 (rollout_data/3.jsonl, bytes 0-1048576)' and the like."""
    inp = task.input
    where = f", bytes {task.start}-{task.end if task.end is not None else 'end'}" if task.start or task.end is not None else ""
    return f"parse of {_step_words(inp.split, inp.step)} ({inp.display}{where})"


def finish_label(unit: Unit) -> str:
    step = unit.step if unit.step is not None else unit.input.step
    return f"finish of {_step_words(unit.input.split, step)} ({unit.input.display})"


def _step_words(split: str, step: int | None) -> str:
    return f"{split} step {step}" if step is not None else f"{split} input"


class Fingerprints:
    """The inputs' fingerprints (XXH3-128), taken while the workers parse: by the reader of a
    step read whole where its format can (registry.fingerprinted_on_read: the file is not read a
    second time), else on a thread of this process with a local engine, as tasks with a remote
    one (inputs are then hashed where the work runs). The thread starts with the first tasks
    (hashing and file reads release the GIL)."""

    def __init__(self, known: dict[str, dict], units: list[Unit]):
        self.known = known
        self.todo = list(dict.fromkeys(u.input.path for u in units if u.input.path != "-" and u.input.path not in known))
        self.on_read: set[str] = set()  # inputs whose readers take their fingerprints
        self._here: dict[str, cf.Future] = {}
        self._thread: cf.ThreadPoolExecutor | None = None

    def read_on(self, paths: set[str]) -> None:
        """These inputs are fingerprinted by their readers (`taken` hands each over)."""
        self.on_read = {p for p in paths if p not in self.known}
        self.todo = [p for p in self.todo if p not in self.on_read]

    def start_here(self) -> None:
        for path in self.todo:
            self._hash_here(path)

    def _hash_here(self, path: str) -> None:
        if self._thread is None:
            self._thread = cf.ThreadPoolExecutor(1, thread_name_prefix="rollout-cli-fingerprint")
        self._here[path] = self._thread.submit(manifest_mod.file_fingerprint, path)

    def taken(self, path: str, fingerprint: dict | None) -> None:
        """What a step's reader took of its input: its fingerprint, or None (it changed while it
        was read, or the step ended before its end was read: taken here instead)."""
        if path not in self.on_read:
            return
        self.on_read.discard(path)
        if fingerprint is not None:
            self.known[path] = fingerprint
        else:
            self._hash_here(path)

    def collect(self, path: str) -> None:
        """Wait for one input's fingerprint taken here (if it is being taken)."""
        if path in self._here:
            self.known[path] = self._here.pop(path).result()

    def collect_all(self) -> None:
        for path in list(self.on_read):  # a reader's that never came back
            self.taken(path, None)
        for path in list(self._here):
            self.collect(path)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True, cancel_futures=True)


class Scheduler:
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

    def run(self, fingerprints: Fingerprints) -> list[UnitResult]:
        """Every step's result; under --on-error fail, InvalidInputError with the invalid samples
        of the whole run (the steps without any are still read, to find those of the next ones)."""
        if not self.remote:
            for t in self.tasks:
                t.fingerprint = self._whole(t) and t.input.path not in fingerprints.known and fingerprinted_on_read(t.input)
            fingerprints.read_on({t.input.path for t in self.tasks if t.fingerprint})
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
                         label=finish_label(unit))
            return
        # only this process has its stdin
        self._submit(("parse", task.unit), parse_part, task, self.opts, self.budget, label=part_label(task),
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
            self._submit(("finish", u), finish_unit, unit, got, self.opts, self.staging_root, label=finish_label(unit))
            return
        problems, stopped, error = parts_problems(got)
        self._unit_failed(u, problems, stopped=stopped, error=error)

    def _finished(self, u: int, value: UnitResult | str, fingerprints: Fingerprints) -> None:
        self.settled.add(u)
        self.done_units += 1
        if self.progress:
            self.progress(self.units[u].input.display, self.done_units, len(self.units))
        if isinstance(value, str):  # nothing to convert: a note says why
            fingerprints.taken(self.units[u].input.path, None)
            self.notes.append(value)
            return
        self.finished[u] = value
        fingerprints.taken(value.input.path, value.fingerprint)
        value.fingerprint = None  # the run's table holds it now (recorded once, beside the result)
        fingerprints.collect(value.input.path)
        if self.on_done:
            self.on_done(value)
        # invalid samples and their rollouts: --max-staleness's rejects are the rule's, not errors
        self.rejected += sum(r.get("rule") != STALE_RULE for r in value.rejects)
        limit = self.opts.max_errors
        if self.opts.on_error == "skip" and limit is not None and self.rejected > limit:
            raise InvalidInputError(
                f"more than --max-errors {limit} samples rejected ({self.rejected} so far); stopped, nothing written",
                [_reject_problem(r) for r in value.rejects[: limit + 1]],
            )


def _reject_problem(r: dict) -> Problem:
    kind = next((k for k in ("line", "row", "sample") if k in r), "file")
    return Problem(Location(r["file"], kind, r.get(kind)), r.get("field"), r["reason"], r.get("rule"))

