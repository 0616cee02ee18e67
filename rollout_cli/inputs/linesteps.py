"""Line files whose lines belong to different steps: a framework's log that one writer appends to
for the whole run (PipelineRL's streams, open-instruct's rollout shards). Such a format's
`units` hook (inputs/format.py) scans its files once, in the converting process, for each
line's step (`scan`), and describes each step as the byte ranges of its lines (`ranges`), so a
step is read as one unit wherever its lines are; its reader reads them back (`lines`), each with
its own file and line number. No numpy here: discovery imports it."""
from __future__ import annotations

from typing import Callable, Iterator

from ..core import storage
from ..core.errors import InvalidInputError

SMALL_RANGE = 1 << 20  # a range this small is read in one call, not through the block reader


def scan(path: str, display: str, key: Callable[[bytes], object]) -> Iterator[tuple[int, int, int, object]]:
    """(line number, start, end, key(line)) for each non-blank line of a file: `start`/`end` its
    byte offsets, the newline included. `key` raises InvalidInputError naming the field; the
    file and line are added here."""
    from .jsonl.reader import _blank, _lines, open_binary

    try:
        stream = open_binary(path)
    except OSError as e:
        raise storage.input_error(display, e, f"{display}: cannot open: {e.strerror or e}") from None
    pos = 0
    line_no = 0
    failed = None  # a line whose key could not be read: an error unless it is a cut-off last line
    try:
        for buf, a, b in _lines(stream, None, display):
            if failed is not None:
                raise failed
            line_no += 1
            start, pos = pos, pos + (b - a) + 1
            if _blank(buf, a, b):
                continue
            try:
                value = key(bytes(buf[a:b]))
            except InvalidInputError as e:
                failed = InvalidInputError(f"{display}:line {line_no}: {e}")
                continue
            yield line_no, start, pos, value
    finally:
        stream.close()
    if failed is not None and not _cut_off(path, pos):
        raise failed


def _cut_off(path: str, pos: int) -> bool:
    """The file's last line has no newline: a writer is still writing it (run/live.py says so
    before anything is read; the lines before it are planned as usual)."""
    try:
        return not storage.is_uri(path) and not path.endswith((".gz", ".zst")) and storage.size(path) == pos - 1
    except OSError:
        return False


def ranges(lines: list[tuple[str, int, int, int]]) -> list[tuple[str, int, int, int]]:
    """(path, start, end, first line) runs of consecutive lines, from (path, line, start, end) in
    read order."""
    out: list[list] = []
    last = None
    for path, line_no, start, end in lines:
        if out and last == (path, line_no - 1) and out[-1][2] == start:
            out[-1][2] = end
        else:
            out.append([path, start, end, line_no])
        last = (path, line_no)
    return [tuple(r) for r in out]


def lines(inp) -> Iterator[tuple[str, int, bytes | bytearray, int, int]]:
    """(file, line number, block, start, end) for each non-blank line of a unit's ranges (or of
    its whole file when it has none); the block is reused, as jsonl.reader._lines's."""
    from .jsonl.reader import _blank, _lines, open_binary

    parts = inp.ranges or ((inp.path, 0, None, 1),)
    stream = None
    current = None
    try:
        for path, start, end, first in parts:
            if path != current:
                if stream is not None:
                    stream.close()
                try:
                    stream = open_binary(path)
                except OSError as e:
                    raise storage.input_error(path, e, f"{path}: cannot open: {e.strerror or e}") from None
                current = path
            if start:
                stream.seek(start)
            line_no = first - 1
            if end is not None and end - start <= SMALL_RANGE:
                data = stream.read(end - start)
                found = ((data, a, b) for a, b in _spans(data))
            else:
                found = _lines(stream, None if end is None else end - start, path, first)
            for buf, a, b in found:
                line_no += 1
                if _blank(buf, a, b):
                    continue
                yield path, line_no, buf, a, b
    finally:
        if stream is not None:
            stream.close()


def _spans(data: bytes) -> Iterator[tuple[int, int]]:
    pos = 0
    n = len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        if nl < 0:
            yield pos, n
            return
        yield pos, nl
        pos = nl + 1


def file_lines(path: str, display: str, info=None, start: int = 0,
               end: int | None = None) -> Iterator[tuple[str, int, bytes | bytearray, int, int]]:
    """(display, line number, block, start, end) for each non-blank line of one file (or of its
    byte range [start, end), lines numbered from the range's start); `info.lines` is then the
    lines read, blank ones included. A corrupt compressed stream is the file's bad input, a
    storage fault is raised as it is (as inputs/jsonl/reader.py)."""
    import zlib

    from .jsonl.reader import _IO_FAULTS, _ZstdError, _blank, _lines, open_binary

    try:
        stream = open_binary(path)
    except OSError as e:
        raise storage.input_error(display, e, f"{display}: cannot open: {e.strerror or e}") from None
    line_no = 0
    try:
        if start:
            stream.seek(start)
        for buf, a, b in _lines(stream, None if end is None else end - start, display):
            line_no += 1
            if not _blank(buf, a, b):
                yield display, line_no, buf, a, b
        if info is not None:
            info.lines = line_no
    except (OSError, EOFError, ValueError, zlib.error, _ZstdError) as e:
        if isinstance(e, OSError) and e.errno in _IO_FAULTS:
            raise
        raise storage.input_error(display, e, f"{display}: cannot read: {e}") from None
    finally:
        stream.close()


def chunks(numbered: Iterator, samples_of: Callable[[object, int], list], bad: type, rule: str,
           chunk_records: int | None = None, loads: Callable | None = None):
    """The reader loop of a line format: each line of `numbered` ((file, line number, block,
    start, end), as `lines` and `file_lines` give them) parsed with `loads` (default: NaN and
    Infinity allowed, inputs/jsonl/lenient.py) and mapped by `samples_of(obj, i)` (i: the line's
    index among the non-blank lines) to its samples, which raises `bad` (an exception with
    `field` and `message`) for a line it cannot map; such a line, or one that is not JSON,
    becomes one record holding its problem (rule `rule`, or json.invalid). Records keep their
    own file and line; a chunk never spans two files. Returns the lines read."""
    import orjson

    from ..core.errors import Location, Problem
    from .base import RawChunk, line_json_error
    from .columns import columnar
    from .jsonl.reader import CHUNK_BYTES, CHUNK_RECORDS

    if loads is None:
        from .jsonl.lenient import loads
    chunk_records = chunk_records or CHUNK_RECORDS
    numbers: list[int] = []
    records: list = []
    problems: dict = {}
    held = 0
    source = None
    count = 0
    for path, line_no, buf, a, b in numbered:
        if source is not None and path != source and records:
            yield columnar(RawChunk(source, "line", numbers, records, problems))
            numbers, records, problems, held = [], [], {}, 0
        source = path
        try:
            samples = samples_of(loads(memoryview(buf)[a:b]), count)
        except orjson.JSONDecodeError as e:
            problems[len(records)] = Problem(Location(path, "line", line_no), None, line_json_error(e), "json.invalid")
            samples = [None]
        except bad as e:
            problems[len(records)] = Problem(Location(path, "line", line_no), e.field, e.message, rule)
            samples = [None]
        count += 1
        numbers.extend([line_no] * len(samples))
        records.extend(samples)
        held += b - a
        if len(records) >= chunk_records or held >= CHUNK_BYTES:
            yield columnar(RawChunk(source, "line", numbers, records, problems))
            numbers, records, problems, held = [], [], {}, 0
    if records:
        yield columnar(RawChunk(source, "line", numbers, records, problems))
    return count


def read_chunks(inp, request, info, samples_of: Callable[[object], list], bad: type, rule: str) -> Iterator:
    """The reader of a format whose units are a step's lines (`lines(inp)`): `chunks` over them,
    `samples_of(obj)` mapping a line; `info.lines` the non-blank lines read."""
    info.lines = yield from chunks(lines(inp), lambda obj, _: samples_of(obj), bad, rule, request.chunk_records)
