"""The format registry: every input format, one descriptor each (inputs/format.py), one line
each below. A new format is one package, `inputs/<name>/`, whose `__init__.py` defines its
`FORMAT`, plus its line in `FORMATS` (docs/design.md walks through one).

Importing the registry imports the descriptors only: a format's code is imported when a file
of it is read, so the converting process (which plans parts) imports no numpy, and pyarrow only
for a Parquet input's footer."""
from __future__ import annotations

from typing import Iterator

from . import atropos, jsonl, miles, nemo_rl, open_instruct, parquet, pipelinerl, prime_rl, roll, skyrl, slime_pt, verl
from . import text, trl, verl_text
from .base import RawChunk, ReadInfo, ReadRequest
from .format import Format

__all__ = ["RawChunk", "ReadInfo", "ReadRequest", "Reading", "Format", "FORMATS", "STDIN_FORMAT",
           "extensions", "format_of", "detectors", "extension_format", "train_formats", "read_input", "read_train", "split_input"]

# name -> descriptor. This order is --input-format's help, and the order detectors are asked in.
FORMATS: dict[str, Format] = {f.name: f for f in (
    jsonl.FORMAT,
    parquet.FORMAT,
    slime_pt.FORMAT,
    nemo_rl.FORMAT,
    miles.FORMAT,
    prime_rl.FORMAT,
    atropos.FORMAT,
    roll.FORMAT,
    pipelinerl.FORMAT,
    open_instruct.FORMAT,
    skyrl.FORMAT,
    verl.FORMAT,
    verl_text.FORMAT,
    trl.FORMAT,
    text.FORMAT,
)}
STDIN_FORMAT = "jsonl"  # what `-` (stdin) is read as


def format_of(name: str) -> Format:
    """The descriptor of a format name (an InputFile's `format`)."""
    return FORMATS[name]


def extensions() -> dict[str, str]:
    """File ending -> format, longest ending first (".jsonl.gz" before ".jsonl")."""
    return dict(sorted(((e, f.name) for f in FORMATS.values() for e in f.extensions),
                       key=lambda kv: len(kv[0]), reverse=True))


def detectors() -> list[Format]:
    """The formats that recognise their files by path and first bytes, in the order asked."""
    return [f for f in FORMATS.values() if f.detector is not None]


def extension_format(path: str) -> str | None:
    """The format a file's ending names, or None."""
    name = path.lower()
    for ext, fmt in extensions().items():
        if name.endswith(ext):
            return fmt
    return None


def train_formats() -> list[str]:
    """The formats with a train-side reader (`audit --train`), by name."""
    return sorted(name for name, f in FORMATS.items() if f.train_reader is not None)


class Reading:
    """An input being read: iterate for its chunks; `info` is complete once they are done."""

    def __init__(self, inp, request: ReadRequest):
        self.info = ReadInfo()
        if request.max_line_bytes is not None or request.max_storage_bytes is not None:
            from . import limits

            limits.use(request.max_line_bytes or limits.max_line_bytes(), request.max_storage_bytes or limits.max_storage_bytes())
        self._chunks = format_of(inp.format).read(inp, request, self.info)

    def __iter__(self) -> Iterator[RawChunk]:
        return self._chunks


def read_input(inp, *, trust_pickle: bool = False, start: int = 0, end: int | None = None,
               chunk_records: int | None = None, keep_text: bool = True, threads: int = 1,
               max_line_bytes: int | None = None, max_storage_bytes: int | None = None,
               tokenizer: str | None = None, fingerprint: bool = False) -> Reading:
    """Read an InputFile (or one part of it, as split_input planned) through its format's reader;
    the size limits (inputs/limits.py) as given, else as they are. `fingerprint`: the input is
    read whole and `fingerprinted_on_read`; its fingerprint is then in the reading's info."""
    return Reading(inp, ReadRequest(start, end, trust_pickle, keep_text, chunk_records, threads,
                                    max_line_bytes, max_storage_bytes, tokenizer, fingerprint))


def fingerprinted_on_read(inp) -> bool:
    """Whether the input's reader can take its fingerprint from the bytes it reads when it reads
    it whole (Format.fingerprint_on_read), so that it need not be read a second time for it."""
    return format_of(inp.format).fingerprints_on_read(inp)


def split_input(inp, parts: int) -> list[tuple[int, int | None]]:
    """The parts an input can be read in, for up to `parts` workers: [(0, None)] when whole."""
    return format_of(inp.format).split(inp, parts)


def read_train(inp, *, trust_pickle: bool = False):
    """Read one train-side input (an InputFile) through its format's train reader: a
    inputs.train_pt.reader.TrainDump, one step held."""
    from ..core.errors import UsageError

    fmt = FORMATS.get(inp.format)
    if fmt is None or fmt.train_reader is None:
        raise UsageError(f"{inp.display}: no train-side reader for {inp.format} files (expected {', '.join(train_formats())})")
    return fmt.read_train(inp, trust_pickle)
