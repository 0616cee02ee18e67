"""JSONL reader: one Sample.to_dict() object per line; plain, gzip, zstd, or stdin."""
from __future__ import annotations

import errno
import functools
import gzip
import os
import zlib
import sys
from typing import BinaryIO, Iterator

import orjson

from ...core import hashing, storage
from ...core.errors import InvalidInputError, Location, Problem
from ..base import RawChunk, line_json_error

try:
    from zstandard import ZstdError as _ZstdError
except ImportError:  # pragma: no cover
    class _ZstdError(Exception):
        pass

BLOCK_BYTES = 8 << 20
_IO_FAULTS = {errno.EIO, errno.ESTALE, errno.ETIMEDOUT}
CHUNK_RECORDS = 128
CHUNK_BYTES = 16 << 20  # a chunk also ends after this much JSON, so memory stays bounded for long samples
# a line the simdjson path hands over to orjson is parsed twice: once this many lines have been
# handed over, and they are most of those tried, a reader stops trying that path
_FAST_MISSES = 64


def open_binary(path: str) -> BinaryIO:
    """Open a JSONL input for reading bytes, decompressing by extension; '-' is stdin."""
    if path == "-":
        return sys.stdin.buffer
    raw = storage.open_read(path, seekable=True) if storage.is_uri(path) else None
    if path.endswith(".gz"):
        return gzip.open(raw if raw is not None else path, "rb")  # type: ignore[return-value]
    if path.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw if raw is not None else open(path, "rb"), read_across_frames=True)  # type: ignore[return-value]
    return raw if raw is not None else open(path, "rb")


def _lines(stream: BinaryIO, limit: int | None, display: str = "", first_line: int = 1,
           ) -> Iterator[tuple[bytes | bytearray, int, int]]:
    """Yield the lines of at most `limit` bytes read from the stream as (block, start, end):
    positions in the block read, without the newline (no copy per line; only a line that
    spans two blocks is copied, never the block it ends in). The block is one buffer read
    into again and again: a line's consumer must not keep a view of it past the next line
    (the parsers copy what they keep). A fresh block per read faults in fresh pages where
    the heap has none free: a run of 4 NeMo-RL step logs of 726 MB converted in 5.49 CPU-s
    that way, 5.17 read into one buffer (16 steps of slime JSONL: 5.35 and 5.27).

    A line longer than --max-line-bytes (inputs/limits.py) is InvalidInputError naming
    `display` and its line number (counted from `first_line`), raised once that many bytes of it
    are read; a line spanning blocks grows in one buffer, so finding it is linear."""
    from ..limits import max_line_bytes

    most = max_line_bytes()
    tail = bytearray()
    count = 0  # lines yielded
    left = limit
    buf = bytearray(BLOCK_BYTES)
    view = memoryview(buf)
    readinto = getattr(stream, "readinto", None)
    while True:
        want = BLOCK_BYTES if left is None else min(BLOCK_BYTES, left)
        if want <= 0:
            break
        if readinto is not None:
            size = readinto(view[:want])
            block, data = buf, view
        else:
            block = stream.read(want)
            size = len(block)
            data = memoryview(block)
        if not size:
            break
        if left is not None:
            left -= size
        find = block.find
        pos = 0
        if tail:  # a line begun in an earlier block: copied once, from views of the blocks
            nl = find(b"\n", 0, size)
            if len(tail) + (size if nl < 0 else nl) > most:
                _too_long(display, first_line + count, most)
            if nl < 0:
                tail += data[:size]
                continue
            tail += data[:nl]
            line, tail = tail, bytearray()
            count += 1
            yield line, 0, len(line)
            pos = nl + 1
        while True:
            nl = find(b"\n", pos, size)
            if nl < 0:
                break
            if nl - pos > most:
                _too_long(display, first_line + count, most)
            count += 1
            yield block, pos, nl
            pos = nl + 1
        if size - pos > most:
            _too_long(display, first_line + count, most)
        tail += data[pos:size]
    if tail:
        yield tail, 0, len(tail)


def _too_long(display: str, line: int, most: int) -> None:
    raise InvalidInputError(f"{display or 'input'}:line {line}: longer than --max-line-bytes ({most} bytes); "
                            "refused before it was read whole")


_SPACE = b" \t\r\x0b\x0c"


def _blank(buf: bytes, start: int, end: int) -> bool:
    """Empty or whitespace only (copied for the check only when it starts with whitespace)."""
    return start == end or (buf[start] in _SPACE and not buf[start:end].strip())


def read_jsonl(
    path: str,
    display: str | None = None,
    *,
    start: int = 0,
    end: int | None = None,
    first_line: int = 1,
    chunk_records: int = CHUNK_RECORDS,
    stats: dict | None = None,
    parser=None,
    shape=None,
    chunk_bytes: int = CHUNK_BYTES,
    fingerprint: bool = False,
) -> Iterator[RawChunk]:
    """Parse `path` (or its newline-aligned byte range [start, end)) into columnar chunks
    (inputs/columns.py).

    Blank lines are skipped; a line that is not a JSON object holds its place with its
    problem, so the caller can count and report it. `stats["lines"]` gets the number of
    lines consumed and, with `fingerprint`, `stats["fingerprint"]` the file's fingerprint
    (core.hashing.fingerprint) from the bytes read, once the whole file is (hashes_whole, read
    from start to end) and unless it changed meanwhile (else None). A framework's reader passes
    its own simd.SampleParser (`parser`) and `shape`, which maps each chunk of parsed records onto slime's sample fields
    (a RawChunk in row form in, a RawChunk out) in place of inputs/columns.py's `columnar`,
    and may let a chunk hold more JSON (`chunk_bytes`) when its records keep little of it.
    """
    display = display or path
    try:
        stream = open_binary(path)
        if fingerprint and not start and end is None and _plain_local(path):
            stream = _Fingerprinting(stream)
    except OSError as e:
        raise storage.input_error(display, e, f"{display}: cannot open: {e.strerror or e}") from None
    from ..columns import columnar  # numpy: not for the converting process, which only splits files
    from .lenient import fallback  # NaN/Infinity, where orjson refuses a line for them
    from .simd import SampleParser

    loads = orjson.loads

    fast = (parser or SampleParser()).parse
    finish = shape or columnar
    fast_tries = fast_misses = 0
    try:
        if start:
            stream.seek(start)
        limit = None if end is None else end - start
        numbers: list[int] = []
        records: list = []
        problems: dict[int, Problem] = {}
        line_no = first_line - 1
        held = 0
        for buf, a, b in _lines(stream, limit, display, first_line):
            line_no += 1
            if _blank(buf, a, b):
                continue
            rec = None
            if fast_misses < _FAST_MISSES or 2 * fast_misses < fast_tries:
                fast_tries += 1
                rec = fast(buf, a, b)
                fast_misses += rec is None
            try:
                if rec is None:
                    try:
                        rec = loads(memoryview(buf)[a:b])
                    except orjson.JSONDecodeError:
                        rec = fallback(memoryview(buf)[a:b])
            except orjson.JSONDecodeError as e:
                problems[len(records)] = Problem(Location(display, "line", line_no), None, line_json_error(e), "json.invalid")
                rec = None
            else:
                if not isinstance(rec, dict):
                    problems[len(records)] = Problem(
                        Location(display, "line", line_no), None, f"expected a JSON object, got {type(rec).__name__}",
                        "record.type",
                    )
                    rec = None
            numbers.append(line_no)
            records.append(rec)
            held += b - a
            if len(records) >= chunk_records or held >= chunk_bytes:
                yield finish(RawChunk(display, "line", numbers, records, problems))
                numbers, records, problems = [], [], {}
                held = 0
        if records:
            yield finish(RawChunk(display, "line", numbers, records, problems))
        if stats is not None:
            stats["lines"] = line_no - first_line + 1
        if stats is not None and isinstance(stream, _Fingerprinting):
            stats["fingerprint"] = stream.fingerprint()
    except (OSError, EOFError, ValueError, zlib.error, _ZstdError) as e:
        # gzip/zstd raise these for corrupt or truncated streams; a storage fault is no input
        # error (the Ray engine retries it)
        if isinstance(e, orjson.JSONDecodeError) or (isinstance(e, OSError) and e.errno in _IO_FAULTS):
            raise
        raise storage.input_error(display, e, f"{display}: cannot read: {e}") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def peek_first_record(path: str) -> dict | None:
    """The first parseable JSON object of a JSONL file, or None (used to find a `step` field)."""
    if path == "-":
        return None
    if storage.is_uri(path):
        return _record_of(_first_line(path))
    try:
        st = os.stat(path)
    except OSError:
        return None
    rec = _first_record_of(path, st.st_size, st.st_mtime_ns, st.st_ino)
    return dict(rec) if rec is not None else None  # the cached one stays as parsed


@functools.lru_cache(maxsize=2)  # a file's detectors ask one after the other
def _first_record_of(path: str, size: int, mtime_ns: int, ino: int) -> dict | None:
    """peek_first_record of a local file as it is (its size, mtime and inode): every format's
    detector asks for it, and a step's head is read and parsed once."""
    return _record_of(_first_line(path))


def _record_of(line: bytes | None) -> dict | None:
    if line is None:
        return None
    from .lenient import loads

    try:
        rec = loads(line)
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def _first_line(path: str) -> bytes | None:
    """The first line that is not blank within the first MiB (the whole MiB when it holds no
    newline), or None. Read 64 KiB at a time: a line is rarely longer."""
    try:
        with open_binary(path) as f:
            head = b""
            pos = 0
            while len(head) < _HEAD_BYTES:
                more = f.read(min(_HEAD_STEP, _HEAD_BYTES - len(head)))
                if not more:
                    break
                head += more
                while (nl := head.find(b"\n", pos)) >= 0:
                    if head[pos:nl].strip():
                        return bytes(head[pos:nl])
                    pos = nl + 1
    except (OSError, EOFError, ValueError, zlib.error, _ZstdError):
        return None
    return bytes(head) if pos == 0 and head.strip() else None


_HEAD_BYTES = 1 << 20
_HEAD_STEP = 64 << 10


def peek_step_value(path: str) -> object | None:
    """The first record's `step` value, or None (the format's `step_field`)."""
    rec = peek_first_record(path)
    return rec.get("step") if rec else None


def next_line_start(f, pos: int, size: int) -> int:
    """The offset just past the first newline at or after `pos` (or `size`)."""
    f.seek(pos)
    while True:
        block = f.read(1 << 20)
        if not block:
            return size
        k = block.find(b"\n")
        if k >= 0:
            return pos + k + 1
        pos += len(block)


def split_ranges(path: str, parts: int, min_bytes: int = 32 << 20) -> list[tuple[int, int]]:
    """Cut a plain JSONL file into up to `parts` newline-aligned byte ranges of similar size."""
    size = storage.size(path)
    parts = max(1, min(parts, size // min_bytes or 1))
    if parts == 1:
        return [(0, size)]
    bounds = [0]
    with open_binary(path) as f:
        for k in range(1, parts):
            pos = size * k // parts
            if pos <= bounds[-1]:
                continue
            cut = next_line_start(f, pos, size)
            if cut >= size:
                break
            if cut > bounds[-1]:
                bounds.append(cut)
    bounds.append(size)
    return list(zip(bounds[:-1], bounds[1:]))


def read(inp, request, info) -> Iterator[RawChunk]:
    """The registry's entry: a JSONL file or its byte range [request.start, request.end)."""
    stats: dict = {}
    extra = {} if request.chunk_records is None else {"chunk_records": request.chunk_records}
    yield from read_jsonl(inp.path, inp.display, start=request.start, end=request.end, stats=stats,
                          fingerprint=request.fingerprint, **extra)
    info.lines = stats.get("lines", 0)
    info.fingerprint = stats.get("fingerprint")


def hashes_whole(inp) -> bool:
    """Whether read_jsonl can fingerprint this input from the bytes it reads (a local file, not
    compressed: the bytes read are the file's)."""
    return _plain_local(inp.path)


def _plain_local(path: str) -> bool:
    return path != "-" and not storage.is_uri(path) and not path.endswith((".gz", ".zst"))


class _Fingerprinting:
    """A local file read into caller buffers, hashing the bytes it hands out (the input's
    fingerprint, core.hashing): a step read whole is then not read a second time for it."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.before = os.fstat(raw.fileno())
        self.hasher = hashing.new(hashing.INPUT_ALGORITHM)
        self.nbytes = 0

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        if n:
            self.hasher.update(memoryview(b)[:n])
            self.nbytes += n
        return n

    def fingerprint(self) -> dict | None:
        """The file's fingerprint, or None when it changed while it was read (the converting
        process then takes it itself)."""
        now = os.fstat(self.raw.fileno())
        st = self.before
        if (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns) or self.nbytes != st.st_size:
            return None
        return hashing.fingerprint(st.st_size, st.st_mtime_ns, self.hasher.hexdigest())

    def close(self) -> None:
        self.raw.close()


def split(inp, parts: int) -> list[tuple[int, int | None]]:
    """Newline-aligned byte ranges of a plain file; compressed files and stdin are read whole."""
    if inp.path == "-" or inp.path.endswith((".gz", ".zst")):
        return [(0, None)]
    return list(split_ranges(inp.path, parts))
