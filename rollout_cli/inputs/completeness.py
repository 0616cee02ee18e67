"""Whether an input file is whole, read off its last bytes: the checks each format's descriptor
names (inputs/format.py, `cut_off` and `whole`) and run/live.py runs on every input before a
run reads it. A line file (JSONL, NeMo-RL logs, prime-rl traces) is cut off when it ends inside a
line: its last line has no newline and is not valid JSON (no proper prefix of a JSON object
parses, so a last line that parses is complete). A `.pt` dump is whole when it opens as a zip
archive, a Parquet file when it has its footer; one that is not, while its size changes, is
still being written."""
from __future__ import annotations

import struct
import zipfile

import orjson

from ..core import storage

_BLOCK = 1 << 20
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error, NotImplementedError)


def _open(path: str):
    return storage.open_read(path, seekable=True) if storage.is_uri(path) else open(path, "rb")


def _last_line(f, size: int) -> bytes:
    """The bytes after the file's last newline (all of it when it has none), read backwards in
    blocks that double from 64 KiB (most lines are shorter)."""
    pos, tail, block_size = size, b"", 64 << 10
    while pos > 0:
        n = min(block_size, pos)
        block_size = min(2 * block_size, _BLOCK)
        pos -= n
        f.seek(pos)
        block = f.read(n)
        k = block.rfind(b"\n")
        if k >= 0:
            return block[k + 1:] + tail
        tail = block + tail
    return tail


def _line_count(f) -> int:
    f.seek(0)
    count = 0
    while block := f.read(_BLOCK):
        count += block.count(b"\n")
    return count


def line_cut(path: str) -> str | None:
    """Why a line file (one JSON value a line) is plainly cut off mid-write: it ends inside a
    line. None when its last line is complete, or it is compressed (its size rule applies)."""
    if not path.lower().endswith(".jsonl"):
        return None
    line = ends_inside_line(path)
    return f"it ends inside line {line}" if line is not None else None


def ends_inside_line(path: str) -> int | None:
    """The number of the line a plain line file ends inside (no newline after it and not valid
    JSON), or None when its last line is complete."""
    with _open(path) as f:
        size = f.seek(0, 2)
        if not size:
            return None
        f.seek(size - 1)
        if f.read(1) == b"\n":  # the common case: one byte read
            return None
        tail = _last_line(f, size)
        if not tail.strip():
            return None
        from .jsonl.lenient import loads  # a last line with NaN in it is whole

        try:
            loads(tail)
            return None
        except orjson.JSONDecodeError:
            return _line_count(f) + 1


def zip_missing(path: str) -> str | None:
    """What a `.pt` dump lacks to open as a whole (a zip archive, as torch.save writes it), or None."""
    try:
        with _open(path) as f, zipfile.ZipFile(f):
            return None
    except _ZIP_ERRORS:
        return "not a complete zip archive"


def has_parquet_footer(path: str) -> bool:
    with _open(path) as f:
        size = f.seek(0, 2)
        if size < 12:
            return False
        f.seek(0)
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
    footer = int.from_bytes(tail[:4], "little")
    return head in (b"PAR1", b"PARE") and tail[4:] in (b"PAR1", b"PARE") and footer <= size - 12


def parquet_missing(path: str) -> str | None:
    """What a Parquet file lacks to open as a whole (its footer), or None."""
    return None if has_parquet_footer(path) else "no Parquet footer"


def pickle_missing(path: str) -> str | None:
    """What a bare pickle (`pickle.dump`) lacks to be whole: its protocol mark at the start and
    the STOP opcode (`.`) it ends with, or None."""
    with _open(path) as f:
        size = f.seek(0, 2)
        if size < 3:
            return "not a complete pickle"
        f.seek(0)
        head = f.read(1)
        f.seek(size - 1)
        tail = f.read(1)
    return None if head == b"\x80" and tail == b"." else "not a complete pickle (no STOP at its end)"
