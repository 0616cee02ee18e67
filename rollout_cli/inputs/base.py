"""The one reader contract: every reader yields RawChunks with each row's source location, and
fills a ReadInfo with what the file says about itself."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import Location, Problem
# the sample's fields (core/sample_fields.py): those the validation reads (readers may read only
# these), those read only with --keep-text, and those that hold text by nature (a string
# column for any other field is JSON text, see inputs/parquet/reader.py)
from ..core.sample_fields import KEPT_TEXT_FIELDS, SAMPLE_FIELDS, TEXT_FIELDS  # noqa: F401


def line_json_error(e: ValueError) -> str:
    """A JSON line's parse error, worded for its line: the decoder's "line 1 column C" would
    read as another line next to the file's line number."""
    column = getattr(e, "colno", None)
    return f"invalid JSON at column {column}: {e.msg}" if column else f"invalid JSON: {e}"


@dataclass
class RawChunk:
    """A run of consecutive records from one input file, in one of two forms.

    Row form (`records`): ``records[i]`` is the sample dict (numeric lists may be numpy arrays),
    or None when the record could not be parsed at all.
    Columnar form (`columns`): field name -> a pyarrow Array with one entry per row, or a
    list of Python values per row (fields decoded from JSON text or nested data); a field the
    file lacks is absent. ``rows`` holds, by position, the records that are validated from
    their own dict instead (their column entries are null; see inputs/columns.py).
    ``problems`` holds why a record could not be parsed, by position.
    """

    source: str
    kind: str  # "line" (JSONL, 1-based), "row" (Parquet, 0-based), "sample" (.pt, 0-based)
    numbers: list[int]
    records: list | None = None
    problems: dict[int, Problem] = field(default_factory=dict)
    columns: dict[str, Any] | None = None
    rows: dict[int, dict] = field(default_factory=dict)

    def location(self, i: int) -> Location:
        return Location(self.source, self.kind, self.numbers[i])

    def __len__(self) -> int:
        return len(self.numbers)

    def values(self, name: str) -> list:
        """One field's value per record, in either form (None where absent or unparseable)."""
        if self.records is not None:
            return [r.get(name) if isinstance(r, dict) else None for r in self.records]
        col = (self.columns or {}).get(name)
        vals = [None] * len(self) if col is None else list(col) if isinstance(col, list) else col.to_pylist()
        for i in self.problems:
            vals[i] = None
        for i, rec in self.rows.items():
            vals[i] = rec.get(name)
        return vals


@dataclass
class ReadInfo:
    """What a file says about itself, known once it has been read."""

    step: int | None = None  # a .pt dump's own step key
    train_dump: bool = False  # slime's train-side .pt dump: no rollout samples
    lines: int = 0  # lines consumed (JSONL)
    notes: list[str] = field(default_factory=list)  # what the reader left out or made of the file, said by convert
    # the file's fingerprint (core.hashing.fingerprint) taken from the bytes read, when asked
    # (ReadRequest.fingerprint) and the file did not change while it was read
    fingerprint: dict | None = None


@dataclass
class ReadRequest:
    """Which part of an input to read, and how."""

    start: int = 0  # JSONL: byte offset; Parquet: part index
    end: int | None = None  # JSONL: byte offset; Parquet: number of parts (row-group ranges)
    trust_pickle: bool = False
    keep_text: bool = True
    chunk_records: int | None = None
    threads: int = 1  # cores the reader may use for this part (Parquet decodes columns on them)
    max_line_bytes: int | None = None  # inputs/limits.py's, set for the read (None: as they are)
    max_storage_bytes: int | None = None
    tokenizer: str | None = None  # --tokenizer: what a text dump's reader tokenizes with
    fingerprint: bool = False  # fingerprint the file as it is read whole (Format.fingerprint_on_read)
