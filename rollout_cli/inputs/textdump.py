"""Text-only dumps (a prompt text, a response text and a score per sample, no token ids): what
their detectors share (reading a file's first record or its columns) and their one reader, which
tokenizes them through the run's tokenizer (text/tokenizer.py).

A format of such dumps sets `text_dump` on its descriptor (its name in messages) and maps one of
its records to a `TextRecord` (its `record` function); the reader does the rest: tokens = the
prompt encoded as a text, then the response encoded on its own without special tokens; the loss
mask covers the response; the group is the record's own group field, else the prompt text (a
key renumbered per step in order of first appearance: the format's `content_groups`). Such
rows are not token-exact (a re-tokenized text need not be the ids sampled), which the output's
`token_exact` column says. No numpy or pyarrow at import: discovery imports the detectors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..core import storage
from .unmapped import Bad, kind

LINE_ENDINGS = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TABLE_ENDINGS = (".parquet", ".csv")
TOKENIZE_BATCH = 1024  # records tokenized in one encode_batch call (and one chunk)


def no_tokenizer_message(text_dump: str) -> str:
    """What a text dump without --tokenizer is told (exit 3)."""
    return f"{text_dump}: no token ids; pass --tokenizer PATH to tokenize (the rows will not be token-exact)"


@dataclass
class TextRecord:
    """One sample of a text dump, before tokenizing."""

    prompt: str
    response: str
    reward: float | None
    step: Any = None  # the record's own step, None where it has none
    group: str | None = None  # the dump's own group key, None: the prompt text groups
    metadata: dict | None = None


# ---------------------------------------------------------------------------- detection
def first_record(path: str) -> dict | None:
    """The first JSON object of a local JSONL file (None for stdin, a URI, another ending or an
    unreadable head)."""
    if path == "-" or storage.is_uri(path) or not path.lower().endswith(LINE_ENDINGS):
        return None
    from .jsonl.reader import peek_first_record

    return peek_first_record(path)


def table_columns(path: str) -> list[str] | None:
    """The column names of a local Parquet file (its footer) or CSV file (its header), in order;
    None for anything else or an unreadable file."""
    if path == "-" or storage.is_uri(path):
        return None
    low = path.lower()
    try:
        if low.endswith(".parquet"):
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        if low.endswith(".csv"):
            import csv

            with open(path, newline="", encoding="utf-8") as f:
                return next(csv.reader(f), None)
    except Exception:  # unreadable here: the reader of its extension (or none) reports it
        return None
    return None


def text_record_keys(keys, prompt: str, response: str, rewards: tuple[str, ...]) -> bool:
    """The keys hold the prompt and response text fields and one of `rewards`, and no token ids."""
    keys = set(keys)
    return prompt in keys and response in keys and bool(keys & set(rewards)) and "tokens" not in keys


def peek_step(path: str) -> Any:
    """The first record's `step` (JSONL) or the first row's (Parquet, CSV), or None."""
    rec = first_record(path)
    if rec is not None:
        return rec.get("step")
    cols = table_columns(path)
    if not cols or "step" not in cols:
        return None
    for rec in _table_records(path, path, ["step"]):
        v = rec[1].get("step")
        return int(v) if isinstance(v, float) and v.is_integer() else v
    return None


# ---------------------------------------------------------------------------- field checks
def text_field(rec: dict, key: str) -> str:
    v = rec.get(key)
    if not isinstance(v, str):
        raise Bad(key, f"expected text, got {'missing' if key not in rec else kind(v)}")
    return v


def number_field(rec: dict, key: str) -> float:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad(key, f"expected a number, got {'missing' if key not in rec else kind(v)}")
    return float(v)


def group_key(v: Any, key: str) -> str | None:
    """A dump's own group value as a string key (None: absent or null)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise Bad(key, f"expected a string or an integer, got {kind(v)}")
    return f"{type(v).__name__}:{v}"


# ---------------------------------------------------------------------------- reading
def _table_records(path: str, display: str, columns: list[str] | None = None) -> Iterator[tuple[int, dict]]:
    """(0-based row, record) for each row of a Parquet or CSV file, in batches."""
    import pyarrow as pa

    if path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        batches = pf.iter_batches(batch_size=TOKENIZE_BATCH, columns=columns)
    else:
        import pyarrow.csv as pcsv

        opts = pcsv.ConvertOptions(include_columns=columns) if columns else None
        try:
            table = pcsv.read_csv(path, convert_options=opts)
        except pa.ArrowInvalid as e:
            from ..core.errors import InvalidInputError

            raise InvalidInputError(f"{display}: not a readable CSV table: {e}") from None
        batches = table.to_batches(max_chunksize=TOKENIZE_BATCH)
    row = 0
    for b in batches:
        for rec in b.to_pylist():
            yield row, rec
            row += 1


def _line_records(inp, info) -> Iterator[tuple[int, Any]]:
    """(1-based line, parsed JSON or the JSONDecodeError) for each non-blank line."""
    import orjson

    from .jsonl.lenient import loads
    from .linesteps import file_lines

    for _, line_no, buf, a, b in file_lines(inp.path, inp.display, info):
        try:
            yield line_no, loads(memoryview(buf)[a:b])
        except orjson.JSONDecodeError as e:
            yield line_no, e


def read(inp, request, info, record: Callable[[dict], TextRecord], rule: str) -> Iterator:
    """The reader of a text-dump format: each record mapped by `record` (raising Bad for one it
    cannot map), tokenized in batches through request.tokenizer, handed on in columnar chunks."""
    import numpy as np
    import orjson

    from ..core.errors import InvalidInputError, Location, Problem
    from ..text.tokenizer import load
    from .base import RawChunk, line_json_error
    from .columns import columnar
    from .prime_rl.reader import string_id
    from .registry import format_of

    if not request.tokenizer:
        raise InvalidInputError(no_tokenizer_message(f"{inp.display}: {format_of(inp.format).text_dump}"))
    tok = load(request.tokenizer)
    lines = inp.path.lower().endswith(LINE_ENDINGS)
    kind_ = "line" if lines else "row"
    source = _line_records(inp, info) if lines else _table_records(inp.path, inp.display)
    per = request.chunk_records or TOKENIZE_BATCH

    def flush(numbers, mapped, problems):
        ok = [i for i, m in enumerate(mapped) if m is not None]
        encoded = tok.encode_pairs([mapped[i].prompt for i in ok], [mapped[i].response for i in ok])
        records: list = [None] * len(mapped)
        for i, (ids, rl) in zip(ok, encoded):
            r = mapped[i]
            s = {"tokens": np.asarray(ids, np.int64), "response_length": rl, "reward": r.reward,
                 "status": "completed",
                 "group_index": string_id(r.group if r.group is not None else "prompt:" + r.prompt)}
            if r.step is not None:
                s["step"] = r.step
            if r.metadata:
                s["metadata"] = r.metadata
            if request.keep_text:
                s["prompt"], s["response"] = r.prompt, r.response
            records[i] = s
        return columnar(RawChunk(inp.display, kind_, numbers, records, problems))

    numbers: list[int] = []
    mapped: list = []
    problems: dict = {}
    for number, rec in source:
        where = Location(inp.display, kind_, number)
        if isinstance(rec, orjson.JSONDecodeError):
            problems[len(mapped)] = Problem(where, None, line_json_error(rec), "json.invalid")
            mapped.append(None)
        elif not isinstance(rec, dict):
            problems[len(mapped)] = Problem(where, None, f"expected a JSON object, got {kind(rec)}", rule)
            mapped.append(None)
        else:
            try:
                mapped.append(record(rec))
            except Bad as e:
                problems[len(mapped)] = Problem(where, e.field, e.message, rule)
                mapped.append(None)
        numbers.append(number)
        if len(mapped) >= per:
            yield flush(numbers, mapped, problems)
            numbers, mapped, problems = [], [], {}
    if mapped:
        yield flush(numbers, mapped, problems)




def cut_off(path: str) -> str | None:
    """A line file's cut-off last line (the format's `cut_off`); a table file is checked whole."""
    from .completeness import line_cut

    return line_cut(path) if path.lower().endswith(LINE_ENDINGS) else None


def whole(path: str) -> str | None:
    """A Parquet file's missing footer (the format's `whole`)."""
    from .completeness import parquet_missing

    return parquet_missing(path) if path.lower().endswith(".parquet") else None
