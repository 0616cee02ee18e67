"""Input readers: each turns one file into RawChunks of sample dicts in Sample.to_dict() form."""
from __future__ import annotations

from typing import Iterator

from .base import RawChunk

__all__ = ["RawChunk", "read_input"]


def read_input(inp, *, trust_pickle: bool = False, payload: dict | None = None, start: int = 0, end: int | None = None,
               chunk_records: int | None = None, handover=None) -> Iterator[RawChunk]:
    """Read an InputFile (or its byte range, for plain JSONL) by its format.

    `payload` receives what the file says about itself: `step` and `train_dump` for `.pt`
    dumps, `lines` consumed for JSONL. `handover` (plain JSONL only) lets another worker take
    over the rest of the range.
    """
    payload = {} if payload is None else payload
    extra = {} if chunk_records is None else {"chunk_records": chunk_records}
    if inp.format == "jsonl":
        from .jsonl import read_jsonl

        yield from read_jsonl(inp.path, inp.display, start=start, end=end, stats=payload, handover=handover, **extra)
    elif inp.format == "parquet":
        from .parquet import read_parquet

        yield from read_parquet(inp.path, inp.display, **({"chunk_rows": chunk_records} if chunk_records else {}))
    else:
        from .slime_pt import read_pt

        dump = read_pt(inp.path, inp.display, trust_pickle)
        payload["step"] = dump.step
        payload["train_dump"] = dump.train_dump
        if dump.chunk is not None:
            yield dump.chunk
