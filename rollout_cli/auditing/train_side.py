"""The train-side inputs of an audit, read one step at a time: a file is read when the step
it gives is audited. That step is the `rollout_id` at the start of its pickle
(train_pt.peek_keys, nothing unpickled), else the first number of its name (slime writes
`{rollout_id}.pt`, or `{rank}` after it); its payload's rollout_id decides once it is read, and
a step's several files (one per writing rank) are merged by rollout_position."""
from __future__ import annotations

import dataclasses

from ..core import slime_keys as K
from ..core import storage
from ..core.errors import InvalidInputError
from ..inputs.discover import InputFile
from ..inputs.registry import format_of, read_train
from ..inputs.train_pt.reader import TrainDump, merge
from ..inputs.units import in_steps


class TrainSide:
    """Train dumps by step; `take(step)` hands over (and forgets) one step's merged dump."""

    def __init__(self, inputs: list[InputFile], trust_pickle: bool, steps: str | None, explicit: set[str] = frozenset()):
        """`explicit`: the paths named as such (a rollout dump found in a named folder is
        skipped with a note; one named itself is an error when read)."""
        self.trust_pickle = trust_pickle
        self.steps = steps
        self.notes: list[str] = []
        hinted = []
        for f in inputs:
            keys = format_of(f.format).peek_train_keys(f.path) if not storage.is_uri(f.path) else None
            if keys and K.FORMAT_VERSION not in keys and K.ROLLOUT_ID in keys and f.path not in explicit:
                self.notes.append(f"{f.display}: a rollout dump (no format_version), not a train dump: skipped on the train side")
                continue
            step = (keys or {}).get(K.ROLLOUT_ID)
            hinted.append(f if step is None or step < 0 else dataclasses.replace(f, step=step, step_from="payload"))
        inputs = hinted
        self.unread = [f for f in inputs if f.step is not None]
        self.pending: dict[int, list[TrainDump]] = {}
        self.done: set[int] = set()
        for f in inputs:
            if f.step is None:  # no number in its name: its payload says
                self._stash(self._read(f), f)

    def _read(self, f: InputFile) -> TrainDump:
        return read_train(f, trust_pickle=self.trust_pickle)

    def _stash(self, td: TrainDump, f: InputFile) -> None:
        if td.step in self.done:
            raise InvalidInputError(f"{f.display}: holds step {td.step} (its name says {f.step}), read after step "
                                    f"{td.step} was audited: name train dumps by their step, as slime does")
        if in_steps(td.step, self.steps):
            self.pending.setdefault(td.step, []).append(td)

    def take(self, step: int) -> TrainDump | None:
        """Step `step`'s train dump (its files merged), or None when no train input has it."""
        for f in [f for f in self.unread if f.step == step]:
            self.unread.remove(f)
            td = self._read(f)
            if td.step == step:
                self.pending.setdefault(step, []).append(td)
            else:
                self._stash(td, f)
        self.done.add(step)
        dumps = self.pending.pop(step, [])
        return merge(dumps) if dumps else None

    def rest(self) -> dict[int, list[str]]:
        """The steps only the train side has: step -> its files (each read once, then dropped)."""
        out: dict[int, list[str]] = {}
        for s, dumps in self.pending.items():
            out.setdefault(s, []).extend(d.display for d in dumps)
        self.pending = {}
        for f in self.unread:
            td = self._read(f)
            if td.step in self.done:
                raise InvalidInputError(f"{f.display}: holds step {td.step} (its name says {f.step}), read after step "
                                        f"{td.step} was audited: name train dumps by their step, as slime does")
            if in_steps(td.step, self.steps):
                out.setdefault(td.step, []).append(f.display)
            del td
        self.unread = []
        return dict(sorted(out.items()))

