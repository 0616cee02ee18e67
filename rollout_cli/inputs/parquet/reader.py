"""Parquet reader, column-wise: one row per sample, read by row group, list columns kept as
Arrow arrays. A string column for a field that is not text by nature (a list, dict or number)
is JSON text, as is any column named by the field metadata {"encoding": "json"} or by the
schema metadata key "json_columns" (a JSON list of names); the text `null` is null."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ...core import storage
from ...core.errors import InvalidInputError, Location, Problem
from ...core.sample_fields import JSON_LIST_TYPES, arrow_type
from ..base import KEPT_TEXT_FIELDS, SAMPLE_FIELDS, TEXT_FIELDS, RawChunk
from .parts import part_rows

# Rows per batch: the reader's buffers grow with the batch (a 1,024-row batch of 2,000-token
# samples peaked at ~200 MB, 256 rows at ~90 MB) while its CPU time stays the same.
CHUNK_ROWS = 256
READ_BUFFER = 1 << 20
# JSON text of these fields is parsed into Arrow lists of this type in one pass (pyarrow.json);
# where that fails (a value of another type, a line break in the text), row by row with orjson,
# so that validation words the problem as for any other input.
_JSON_LIST_TYPES = {name: arrow_type(t) for name, t in JSON_LIST_TYPES.items()}


def _open(path: str, display: str) -> pq.ParquetFile:
    try:
        if storage.is_uri(path):
            return pq.ParquetFile(storage.open_read(path, seekable=True))
        # read through a 1 MiB buffer: not mapped (mapped pages count towards the process's
        # memory) and not a column chunk at a time (one chunk can hold most of the file)
        return pq.ParquetFile(path, buffer_size=READ_BUFFER, pre_buffer=False)
    except (OSError, pa.ArrowException, UnicodeDecodeError) as e:
        raise storage.input_error(display, e, f"{display}: not a readable Parquet file: {e}") from None


def json_columns(schema: pa.Schema) -> set[str]:
    """The columns that hold JSON text: by type and field name, or as the metadata says."""
    named: set[str] = set()
    raw = (schema.metadata or {}).get(b"json_columns")
    if raw:
        try:
            listed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            listed = []
        named.update(x for x in listed if isinstance(x, str)) if isinstance(listed, list) else None
    for f in schema:
        if (f.metadata or {}).get(b"encoding") == b"json":
            named.add(f.name)
        elif f.name not in TEXT_FIELDS and _is_text(f.type):
            named.add(f.name)
    return {f.name for f in schema if f.name in named and _is_text(f.type)}


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _json_lists(texts: pa.Array, typ: pa.DataType) -> pa.Array | None:
    """JSON texts parsed into one Arrow array of `typ`, or None when any row does not fit."""
    import pyarrow.compute as pc  # here: JSON-text columns are rare, the import costs a worker 25 ms
    import pyarrow.json as pj

    n = len(texts)
    if not n:
        return None
    lines = pc.binary_join_element_wise('{"v":', pc.fill_null(texts.cast(pa.string()), "null"), "}\n", "")
    _, offsets, data = lines.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int32, count=lines.offset + n + 1)[[lines.offset, -1]]
    begin, end = int(bounds[0]), int(bounds[1])
    try:
        t = pj.read_json(
            pa.BufferReader(data[begin:end]),
            read_options=pj.ReadOptions(use_threads=False, block_size=min(max(end + 1, 1 << 20), 2**31 - 1)),
            parse_options=pj.ParseOptions(explicit_schema=pa.schema([("v", typ)]), unexpected_field_behavior="error"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if t.num_rows != n or t.num_columns != 1:
        return None
    return t.column(0).combine_chunks()


def _json_values(name: str, texts: pa.Array, display: str, row: int, problems: dict[int, Problem]) -> list:
    """JSON texts parsed row by row; a row that is not JSON gets its problem (the first per row)."""
    out = []
    for i, v in enumerate(texts.to_pylist()):
        if isinstance(v, str):
            try:
                v = orjson.loads(v)
            except orjson.JSONDecodeError as e:
                if name != "reward":  # a reward left as text: validation reports its type
                    problems.setdefault(i, Problem(Location(display, "row", row + i), name,
                                                   f"expected JSON text, got invalid JSON: {e}", "json.invalid"))
                v = None
        out.append(v)
    return out


def _columns(batch: pa.RecordBatch, json_cols: set[str], display: str, row: int):
    """The batch as the reader contract's columns: decoded JSON text, map columns as dicts."""
    cols: dict = {}
    problems: dict[int, Problem] = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if name in json_cols:
            typ = _JSON_LIST_TYPES.get(name)
            parsed = _json_lists(col, typ) if typ is not None else None
            cols[name] = parsed if parsed is not None else _json_values(name, col, display, row, problems)
        elif pa.types.is_map(col.type):
            cols[name] = [None if v is None else dict(v) for v in col.to_pylist()]
        else:
            cols[name] = col
    return cols, problems


def _column_chunks(pf: pq.ParquetFile, groups) -> dict[str, list]:
    """Each top-level column's column-chunk metadata in `groups` (one entry per leaf and
    group), from the footer; {} when the footer cannot be read (the reader then says why)."""
    md = pf.metadata
    out: dict[str, list] = {}
    try:
        for g in groups:
            rg = md.row_group(g)
            for k in range(rg.num_columns):
                cc = rg.column(k)
                out.setdefault(cc.path_in_schema.split(".", 1)[0], []).append(cc)
    except (OSError, pa.ArrowException, UnicodeDecodeError):
        return {}
    return out


def _streams(chunks: dict[str, list], columns: list[str], threads: int) -> list[list[str]]:
    """`columns` cut into threads + 1 sets of about equal compressed bytes (`chunks`: the
    footer's, _column_chunks), each read as a stream of its own (_in_streams): the largest
    column alone, the small ones together."""
    size = {c: sum(cc.total_compressed_size for cc in chunks.get(c, ())) for c in columns}
    bins: list[list[str]] = [[] for _ in range(min(threads + 1, len(columns)))]
    load = [0] * len(bins)
    for c in sorted(columns, key=lambda c: -size[c]):
        k = load.index(min(load))
        bins[k].append(c)
        load[k] += size[c]
    order = {c: i for i, c in enumerate(columns)}
    return [sorted(b, key=order.get) for b in bins if b]


def _in_streams(pf: pq.ParquetFile, path: str, sets: list[list[str]], groups: list[int], chunk_rows: int,
                depth: int = 2) -> Iterator[pa.RecordBatch]:
    """The batches of `groups`, each set of columns decoded by a thread of its own, `depth`
    batches ahead of the consumer. pyarrow's own threads decode one batch's columns side by side
    and wait for the slowest before the next batch; independent streams keep both cores busy
    (a 387 MB file's parse: 1.44 -> 1.20 s). Every stream cuts the same rows into batches (one
    row per record, `chunk_rows` a batch), so batch k of each holds the same rows."""
    import collections
    import concurrent.futures as cf

    end = object()
    readers = [pq.ParquetFile(path, metadata=pf.metadata, buffer_size=READ_BUFFER, pre_buffer=False) for _ in sets]
    its = [r.iter_batches(batch_size=chunk_rows, row_groups=groups, columns=cols, use_threads=False)
           for r, cols in zip(readers, sets)]
    pools = [cf.ThreadPoolExecutor(1, thread_name_prefix="rollout-cli-parquet-read") for _ in its]
    try:
        ahead = [collections.deque(p.submit(next, it, end) for _ in range(depth)) for p, it in zip(pools, its)]
        while True:
            parts = [q.popleft().result() for q in ahead]
            if any(b is end for b in parts):
                if not all(b is end for b in parts):
                    raise RuntimeError(f"{path}: column streams ended apart")
                return
            if len({b.num_rows for b in parts}) != 1:
                raise RuntimeError(f"{path}: column streams cut batches apart: {[b.num_rows for b in parts]}")
            for p, it, q in zip(pools, its, ahead):
                q.append(p.submit(next, it, end))
            yield pa.RecordBatch.from_arrays([c for b in parts for c in b.columns],
                                             names=[n for b in parts for n in b.schema.names])
    finally:
        for p in pools:
            p.shutdown(wait=True, cancel_futures=True)


def read_parquet(path: str, display: str | None = None, chunk_rows: int = CHUNK_ROWS, *, part: int = 0,
                 parts: int = 1, keep_text: bool = True, threads: int = 1, info=None) -> Iterator[RawChunk]:
    """Yield the rows of a Parquet sample dump (or of part `part` of `parts`: ranges of row
    groups, or of rows when the file has fewer groups than parts) as columnar chunks, numbered
    by their 0-based row in the file. With `threads` > 1 the columns are decoded on threads,
    ahead of the consumer."""
    display = display or path
    pf = _open(path, display)
    schema = pf.schema_arrow
    wanted = SAMPLE_FIELDS | (set(KEPT_TEXT_FIELDS) if keep_text else set())
    names = [n for n in schema.names if n in wanted]
    json_cols = json_columns(schema)
    groups, lo, hi = part_rows(part, parts, [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)])
    if not len(groups):
        return
    row = sum(pf.metadata.row_group(g).num_rows for g in range(groups.start))  # the first batch's
    chunks = _column_chunks(pf, groups) if threads > 1 else {}
    # with no sample field at all, read one column for the row count: every row then lacks tokens
    read_cols = names or schema.names[:1]
    try:
        # one thread unless cores are spare: parts of other inputs use them, and the reader's
        # threads only add buffers in flight (more memory, more system time)
        if threads > 1 and len(read_cols) > 1 and not storage.is_uri(path):
            batches = _in_streams(pf, path, _streams(chunks, read_cols, threads), list(groups), chunk_rows)
        else:
            batches = pf.iter_batches(batch_size=chunk_rows, row_groups=list(groups), columns=read_cols,
                                      use_threads=threads > 1)
        for batch in batches:
            # a part that starts or ends inside a row group: the rows before it are decoded
            # and dropped (Parquet has no row seek without a page index), those after not read
            if row + batch.num_rows <= lo:
                row += batch.num_rows
                continue
            if row >= hi:
                break
            if row < lo or row + batch.num_rows > hi:
                a = max(lo - row, 0)
                batch = batch.slice(a, min(hi - row, batch.num_rows) - a)
                row += a
            n = batch.num_rows
            for name, col in zip(batch.schema.names, batch.columns):
                try:
                    col.validate(full=True)  # e.g. string data that is not UTF-8
                except pa.ArrowInvalid as e:
                    raise InvalidInputError(f"{display}: rows {row}..{row + n - 1}: {name}: invalid data: {e}") from None
            if not names:
                batch = batch.select([])
            cols, problems = _columns(batch, json_cols, display, row)
            yield RawChunk(display, "row", list(range(row, row + n)), None, problems, cols)
            row += n
    except (OSError, pa.ArrowException, UnicodeDecodeError) as e:
        raise storage.input_error(display, e, f"{display}: cannot read Parquet near row {row}: {e}") from None


def read(inp, request, info) -> Iterator[RawChunk]:
    """The registry's entry: the whole file, or part `request.start` of `request.end`."""
    part, parts = (request.start, request.end) if request.end else (0, 1)
    yield from read_parquet(inp.path, inp.display, request.chunk_records or CHUNK_ROWS, part=part, parts=parts,
                            keep_text=request.keep_text, threads=request.threads, info=info)


def peek_step_value(path: str) -> object | None:
    """The first row's `step` value, when the file has such a column (JSON text decoded)."""
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
    v = first.column(0)[0].as_py()
    if isinstance(v, str) and "step" in json_columns(pf.schema_arrow):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            return v
    return v
