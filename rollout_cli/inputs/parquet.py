"""Parquet reader: one row per sample; dict fields as struct/map columns or JSON text."""
from __future__ import annotations

from typing import Iterator

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..core import storage
from ..core.errors import InvalidInputError, Location, Problem
from ..core.schema import DICT_FIELDS
from .base import RawChunk

CHUNK_ROWS = 1024


def _open(path: str, display: str) -> pq.ParquetFile:
    try:
        if storage.is_uri(path):
            return pq.ParquetFile(storage.open_read(path, seekable=True))
        return pq.ParquetFile(path, memory_map=True)
    except (OSError, pa.ArrowException, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{display}: not a readable Parquet file: {e}") from None


def read_parquet(path: str, display: str | None = None, chunk_rows: int = CHUNK_ROWS) -> Iterator[RawChunk]:
    """Yield the rows of a Parquet sample dump as sample dicts, 0-based row numbers."""
    display = display or path
    pf = _open(path, display)
    schema = pf.schema_arrow
    map_cols = [f.name for f in schema if pa.types.is_map(f.type)]
    json_cols = [f.name for f in schema if f.name in DICT_FIELDS and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))]
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=chunk_rows):
            for name, col in zip(batch.schema.names, batch.columns):
                try:
                    col.validate(full=True)  # e.g. string data that is not UTF-8
                except pa.ArrowInvalid as e:
                    raise InvalidInputError(f"{display}: rows {row}..{row + batch.num_rows - 1}: {name}: invalid data: {e}") from None
            records = batch.to_pylist()
            problems: dict[int, Problem] = {}
            for i, rec in enumerate(records):
                for name in map_cols:
                    v = rec.get(name)
                    if isinstance(v, list):
                        rec[name] = dict(v)
                for name in json_cols:
                    v = rec.get(name)
                    if isinstance(v, str):
                        try:
                            rec[name] = orjson.loads(v)
                        except orjson.JSONDecodeError as e:
                            if name == "reward":
                                continue  # left as text; validation reports the type
                            problems[i] = Problem(Location(display, "row", row + i), name, f"expected JSON text, got invalid JSON: {e}")
                            records[i] = None
                            break
            numbers = list(range(row, row + len(records)))
            row += len(records)
            yield RawChunk(display, "row", numbers, records, problems)
    except (OSError, pa.ArrowException, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{display}: cannot read Parquet near row {row}: {e}") from None


def peek_step_value(path: str) -> object | None:
    """The first row's `step` value, when the file has such a column."""
    try:
        pf = pq.ParquetFile(storage.open_read(path, seekable=True) if storage.is_uri(path) else path)
    except (OSError, pa.ArrowException, UnicodeDecodeError):
        return None
    if "step" not in pf.schema_arrow.names or pf.metadata.num_rows == 0:
        return None
    try:
        first = next(pf.iter_batches(batch_size=1, columns=["step"]))
    except (OSError, pa.ArrowException, UnicodeDecodeError, StopIteration):
        return None
    return first.column(0)[0].as_py()
