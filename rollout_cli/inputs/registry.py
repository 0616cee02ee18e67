"""The reader registry: format name -> the module that reads it. A new format is one module
with `read(inp, request, info) -> Iterator[RawChunk]` (and optionally `split(inp, parts)`),
plus one line here. Modules are imported only when a file of their format is read, so the
converting process (which plans parts) imports no numpy, and pyarrow only for a Parquet
input's footer. The trainer's side
(`audit --train`) has its own table, TRAIN_FORMATS: a module with
`read_train(inp, trust_pickle) -> TrainDump` (inputs/train_pt.py: a reader of another
framework builds a payload shaped like slime's train dump and passes it to
`train_pt.from_payload`).

A framework's reader also recognises its files: listed in DETECT, in the order discovery asks
them, its module has `claims(path) -> bool` (from the path and at most the first bytes),
`step_and_split(path) -> (step, split) | None` (what the path says), and optionally
`skip_note(path, options, named) -> str | None` (why a claimed file is left out: it holds no
train data, or options choose another; `named`: given on the command line rather than found
in a folder), all without numpy or pyarrow."""
from __future__ import annotations

import importlib
from typing import Iterator

from .base import RawChunk, ReadInfo, ReadRequest

__all__ = ["RawChunk", "ReadInfo", "ReadRequest", "Reading", "FORMATS", "DETECT", "CONTENT_GROUPS", "TRAIN_FORMATS",
           "read_input", "read_train", "split_input", "detector"]

FORMATS = {
    "jsonl": "rollout_cli.inputs.jsonl",
    "parquet": "rollout_cli.inputs.parquet",
    "pt": "rollout_cli.inputs.slime_pt",
    "nemo_rl": "rollout_cli.inputs.nemo_rl",
    "miles": "rollout_cli.inputs.miles",
    "prime_rl": "rollout_cli.inputs.prime_rl",
}
# The trainer's side of a step: format -> module with read_train(inp, trust_pickle) -> TrainDump.
TRAIN_FORMATS = {
    "pt": "rollout_cli.inputs.train_pt",
    "nemo_rl": "rollout_cli.inputs.nemo_rl",  # its step logs carry the trainer's log-probs too
}
# Part planning runs in the converting process: these modules import no numpy (Parquet's reads
# the footer with pyarrow).
SPLITTERS = {
    "jsonl": "rollout_cli.inputs.jsonl",
    "parquet": "rollout_cli.inputs.parquet_parts",
    "nemo_rl": "rollout_cli.inputs.nemo_rl",
    "prime_rl": "rollout_cli.inputs.prime_rl",
}
# Formats recognised from a file's path and first bytes, asked in this order (inputs/discover.py)
# for every file with a known extension before the extension's format is taken. Each module has
# `claims(path) -> bool`, and may have `step_and_split(path) -> (step, split) | None` (where its
# path carries them) and `skip_note(path, options, named) -> str | None` (a claimed file that
# holds no train data, or one the options leave out); like the splitters, these modules import
# no numpy or pyarrow.
DETECT = ("nemo_rl", "miles", "prime_rl")
# Formats whose group_index is a key of the prompt's content (each part of a step is read on its
# own): the step's finish renumbers the keys 0, 1, ... in order of first appearance.
CONTENT_GROUPS = frozenset({"nemo_rl"})


class Reading:
    """An input being read: iterate for its chunks; `info` is complete once they are done."""

    def __init__(self, inp, request: ReadRequest):
        self.info = ReadInfo()
        self._chunks = importlib.import_module(FORMATS[inp.format]).read(inp, request, self.info)

    def __iter__(self) -> Iterator[RawChunk]:
        return self._chunks


def read_input(inp, *, trust_pickle: bool = False, start: int = 0, end: int | None = None,
               chunk_records: int | None = None, keep_text: bool = True, threads: int = 1) -> Reading:
    """Read an InputFile (or one part of it, as split_input planned) through its format's reader."""
    return Reading(inp, ReadRequest(start, end, trust_pickle, keep_text, chunk_records, threads))


def split_input(inp, parts: int) -> list[tuple[int, int | None]]:
    """The parts an input can be read in, for up to `parts` workers: [(0, None)] when whole."""
    name = SPLITTERS.get(inp.format)
    if name is None or parts <= 1:
        return [(0, None)]
    return importlib.import_module(name).split(inp, parts)


def detector(fmt: str):
    """The module of a format named in DETECT (or forced by --input-format), imported."""
    return importlib.import_module(FORMATS[fmt])


def read_train(inp, *, trust_pickle: bool = False):
    """Read one train-side input (an InputFile) through its format's train reader: a
    inputs.train_pt.TrainDump, one step held."""
    from ..core.errors import UsageError

    name = TRAIN_FORMATS.get(inp.format)
    if name is None:
        raise UsageError(f"{inp.display}: no train-side reader for {inp.format} files (expected {', '.join(sorted(TRAIN_FORMATS))})")
    return importlib.import_module(name).read_train(inp, trust_pickle)
