"""What a format is: one descriptor (`Format`) with every fact the rest of rollout-cli asks
about an input format. Each format's package (`inputs/<name>/__init__.py`) defines one, and
inputs/registry.py lists them; nothing outside a format's package tests a format's name.

The descriptor names its code as `"module:function"` strings, imported on first use: the
converting process asks every descriptor about every file (discovery, part planning) and must
not import numpy for it (nor pyarrow, but for a Parquet input's footer)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator


# the hooks every text dump (prompt/completion text, read through --tokenizer) shares,
# from inputs/textdump.py
TEXT_DUMP_HOOKS = dict(
    step_field="rollout_cli.inputs.textdump:peek_step",
    content_groups=True,
    cut_off="rollout_cli.inputs.textdump:cut_off",
    whole="rollout_cli.inputs.textdump:whole",
)


def _resolve(ref: str) -> Callable:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Format:
    """One input format. Only `name` and `reader` are required; every hook left None means the
    format does not have that trait."""

    # the name --input-format takes, and the manifest's inputs[].format
    name: str
    # read(inp, request: ReadRequest, info: ReadInfo) -> Iterator[RawChunk]: a file, or the part
    # of it `split` planned (inputs/base.py is the contract)
    reader: str
    # file endings (lower case) that are this format when no `detector` claims the file
    extensions: tuple[str, ...] = ()
    # claims(path) -> bool, from the path and at most the first bytes; the same module has
    # step_and_split(path) -> (step, split) | None and may have skip_note(path, options, named)
    # -> str | None (a claimed file that holds no train data, or one the options leave out).
    # Detectors are asked, in registry order, before a file's extension decides.
    detector: str | None = None
    # split(inp, parts) -> [(start, end)]: the parts a file can be read in by several workers
    # (JSONL: newline-aligned byte ranges; Parquet: row-group ranges); None: read whole
    splitter: str | None = None
    # peek(path) -> the first record's `step` field (None: none), read before the file is; it
    # is the file's step when its path carries none
    step_field: str | None = None
    # the payload names its own step (a `.pt` dump's `rollout_id`), which wins over a number in
    # the file's name: such a unit's step is known only once read, and its samples carry none
    payload_step: bool = False
    # group_index is a key of the prompt's content (each part of a step read on its own): the
    # step's finish renumbers the keys 0, 1, ... in order of first appearance
    content_groups: bool = False
    # read_train(inp, trust_pickle) -> inputs.train_pt.reader.TrainDump: the trainer's side of
    # a step (`audit --train`)
    train_reader: str | None = None
    # peek(path) -> {key: int} | None: a train-side file's top-level integer keys, read without
    # loading it (a step hint, and whether it is a train dump at all)
    train_peek: str | None = None
    # a format whose framework writes no trainer dump a train reader reads: why, and what auditing
    # its runs would take (`audit` says it when --train holds no train dump)
    no_train_side: str | None = None
    # is_output_shard(path) -> bool: the file is a shard of a rollout-cli output (inspect points
    # at its output folder instead)
    output_shard: str | None = None
    # cut_off(path) -> str | None: why a file of this format is plainly cut off mid-write, read
    # off its last bytes (a line file that ends inside a line); None when it is not
    # (inputs/completeness.py; run/live.py asks it of every input before a run reads it)
    cut_off: str | None = None
    # whole(path) -> str | None: what a file lacks to open as a whole (a zip archive, a Parquet
    # footer), or None; a file that lacks it while its size changes is still being written
    whole: str | None = None
    # modules a local pool's workers import once, before their first task (run/preload.py)
    preload: tuple[str, ...] = ()
    # units(paths, options) -> (units, notes): a format whose files each hold several steps, or
    # whose steps span files (a framework's log that one writer appends to): discovery hands
    # it every file of the format it found (after `skip_note`), and it returns one
    # (path, display, step, split, ranges) per (split, step), `ranges` the parts of the files that
    # hold that step's records (inputs/linesteps.py); None: a file is one step
    units: str | None = None
    # the framework records a reward per sample. False: a record whose `reward` is None (or
    # absent) is valid and its row's reward, raw_reward and selected_reward are null ("not
    # recorded": normalisation skips it, inspect and the report say so, the loader gives NaN,
    # export writes reward=None); a record that does carry a reward is checked as any. True (every
    # format that records rewards, slime-shaped input among them): a missing reward is invalid
    rewards_recorded: bool = True
    # versions_behind(step: int, version: str) -> int | None: how many steps behind rollout step
    # `step` the policy that a sample's `weight_versions` entry `version` names is (0: the
    # step's own policy; negative: ahead of it), or None where this version is not comparable
    # with a step. None (the hook): the format's versions are not comparable with its steps, and
    # `convert --max-staleness` refuses it (a usage error naming the format)
    version_lag: str | None = None
    # a dump of decoded text without token ids (inputs/textdump.py): what it is called in
    # messages. Its files read only through --tokenizer (discovery refuses them without one,
    # exit 3), into rows marked not token-exact (the output's `token_exact` column)
    text_dump: str | None = None
    # fingerprint_on_read(inp) -> bool: the reader, reading this input whole, can take its
    # fingerprint from the bytes it reads (ReadRequest.fingerprint; a local file it reads from
    # the first byte to the last): the converting process then does not read it again for it
    fingerprint_on_read: str | None = None

    # ---------------------------------------------------------------- the hooks, called
    def read(self, inp, request, info) -> Iterator:
        return _resolve(self.reader)(inp, request, info)

    def fingerprints_on_read(self, inp) -> bool:
        return self.fingerprint_on_read is not None and bool(_resolve(self.fingerprint_on_read)(inp))

    def split(self, inp, parts: int) -> list[tuple[int, int | None]]:
        if self.splitter is None or parts <= 1:
            return [(0, None)]
        return _resolve(self.splitter)(inp, parts)

    def claims(self, path: str) -> bool:
        return self.detector is not None and _resolve(self.detector + ":claims")(path)

    def step_and_split(self, path: str) -> tuple[int, str] | None:
        """(step, split) as the path of a file of this format says them, or None."""
        if self.detector is None:
            return None
        return _resolve(self.detector + ":step_and_split")(path)

    def skip_note(self, path: str, options: Any, named: bool) -> str | None:
        if self.detector is None:
            return None
        fn = getattr(importlib.import_module(self.detector), "skip_note", None)
        return fn(path, options, named) if fn is not None else None

    def expand(self, paths: list[str], options: Any) -> tuple[list[tuple], list[str]]:
        return _resolve(self.units)(paths, options)

    def field_step(self, path: str) -> Any:
        """The first record's `step` value (unchecked), or None."""
        return _resolve(self.step_field)(path) if self.step_field is not None else None

    def read_train(self, inp, trust_pickle: bool):
        return _resolve(self.train_reader)(inp, trust_pickle)

    def peek_train_keys(self, path: str) -> dict[str, int] | None:
        return _resolve(self.train_peek)(path) if self.train_peek is not None else None

    def cut_off_reason(self, path: str) -> str | None:
        return _resolve(self.cut_off)(path) if self.cut_off is not None else None

    def missing_whole(self, path: str) -> str | None:
        return _resolve(self.whole)(path) if self.whole is not None else None

    def versions_behind(self, step: int, version: str) -> int | None:
        """How many steps behind `step` the policy `version` is (the `version_lag` hook), or
        None where not comparable (no hook: never)."""
        return _resolve(self.version_lag)(step, version) if self.version_lag is not None else None

    def is_output_shard(self, path: str) -> bool:
        return self.output_shard is not None and _resolve(self.output_shard)(path)
