"""parquet_stitch: the Thrift compact codec round-trips real footers, and stitched pieces (row
ranges, column splits, both) make one Parquet file that pyarrow, Polars and DuckDB read back as
the source table -- byte-identical to what pyarrow writes for the whole table in one go."""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_cli.core.thrift import (
    BINARY, BOOL, BYTE, DOUBLE, I16, I32, I64, LIST, MAP, SET, STRUCT, TList, TMap, TStruct,
    decode_struct, encode_struct, read_footer,
)
from rollout_cli.output.stitch import Stitcher
from rollout_cli.core.schema import DICTIONARY_COLUMNS, LIST_COLUMNS, SCHEMA_VERSION, train_schema

def stitch(template, pieces: Sequence, row_groups: Sequence[Sequence[tuple[int, int]]]) -> Iterator[memoryview | bytes]:
    """The whole-file form of `Stitcher` used by these tests: an iterator over the bytes of one Parquet file made of the pieces' column chunks.

    `template` is a Parquet file with the full schema (its footer supplies schema, version,
    key-value metadata, created_by and column orders). `pieces` are Parquet files, each holding a
    subset of the template's leaf columns. Final row group k is made of the column chunks of the
    `(piece index, row group index)` pairs in `row_groups[k]`, which must supply every leaf column
    exactly once with equal row counts; chunks are laid out in template column order and yielded
    as zero-copy slices of the piece buffers. All checks run before this returns, so a ValueError
    is raised before any byte is produced.
    """
    st = Stitcher(template)
    parsed = [st.parse(p, i) for i, p in enumerate(pieces)]
    parts: list[memoryview | bytes] = [st.header()]
    for k, members in enumerate(row_groups):
        resolved = []
        for pair in members:
            p, r = pair
            if not (isinstance(p, int) and 0 <= p < len(parsed)):
                raise ValueError(f"row group {k}: no piece {p!r}")
            resolved.append((parsed[p], r, p))
        parts += st.add(resolved, k)
    tail = st.footer()
    parts += [tail[:-8], tail[-8:-4], tail[-4:]]
    return iter(parts)


def stitch_to_bytes(template, pieces: Sequence, row_groups: Sequence[Sequence[tuple[int, int]]]) -> bytes:
    """`stitch`, joined into one bytes object."""
    return b"".join(stitch(template, pieces, row_groups))


COLUMNS = ["step", "sample_index", "tokens", "loss_mask", "reward", "raw_reward", "truncated", "status",
           "rollout_log_probs", "source_name"]
_TRAIN = train_schema()
SCHEMA = pa.schema([_TRAIN.field(c) for c in COLUMNS], metadata=_TRAIN.metadata)
STATUSES = ["completed", "truncated", "aborted"]


def make_table(n: int, seed: int = 0, max_len: int = 12) -> pa.Table:
    """Rows shaped like train data: token lists, masks, log-probs with some null rows."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, max_len + 1, n)
    tokens = [rng.integers(0, 50_000, k).astype(np.int32).tolist() for k in lens]
    cols = {
        "step": pa.array(np.repeat(seed, n), pa.int64()),
        "sample_index": pa.array([None if i % 7 == 3 else i for i in range(n)], pa.int64()),
        "tokens": pa.array(tokens, pa.list_(pa.int32())),
        "loss_mask": pa.array([rng.integers(0, 2, k).tolist() for k in lens], pa.list_(pa.uint8())),
        "reward": pa.array(rng.random(n), pa.float32()),
        "raw_reward": pa.array(rng.random(n), pa.float64()),
        "truncated": pa.array(rng.random(n) < 0.2, pa.bool_()),
        "status": pa.array([STATUSES[i % 3] for i in rng.integers(0, 3, n)], pa.string()),
        "rollout_log_probs": pa.array(
            [None if rng.random() < 0.25 else (-rng.random(k)).tolist() for k in lens], pa.list_(pa.float32())),
        "source_name": pa.array([None if i % 4 == 0 else f"src{i % 3}" for i in range(n)], pa.string()),
    }
    return pa.table(cols, schema=SCHEMA)


def options(names, **kw) -> dict:
    """rollout_cli.output.write's writer options for these columns."""
    opts = dict(
        compression="zstd",
        compression_level=1,
        use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names],
        write_statistics=[c for c in names if c not in LIST_COLUMNS],
    )
    opts.update(kw)
    if opts["compression"] != "zstd":
        opts["compression_level"] = None
    return opts


def write(table: pa.Table, bounds=None, **kw) -> pa.Buffer:
    """Write `table` into memory, one row group per (start, end) in `bounds` (default: one)."""
    sink = pa.BufferOutputStream()
    if bounds is None:
        pq.write_table(table, sink, **options(table.column_names, **kw))
    else:
        with pq.ParquetWriter(sink, table.schema, **options(table.column_names, **kw)) as w:
            for s, e in bounds:
                w.write_table(table.slice(s, e - s), row_group_size=max(e - s, 1))
    return sink.getvalue()


def template(schema: pa.Schema = SCHEMA, **kw) -> pa.Buffer:
    return write(schema.empty_table(), **kw)


def read(buf) -> pa.Table:
    return pq.read_table(pa.BufferReader(pa.py_buffer(buf)))


def footer_bytes(buf) -> bytes:
    b = bytes(buf)
    _, start = read_footer(b)
    return b[start:-8]


def check_layout(buf, row_counts) -> None:
    """Column chunks lie in the file, in order, back to back; row groups hold `row_counts`."""
    b = bytes(buf)
    md = pq.ParquetFile(pa.BufferReader(b)).metadata
    footer_start = len(b) - 8 - int.from_bytes(b[-8:-4], "little")
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == list(row_counts)
    assert md.num_rows == sum(row_counts)
    raw_rgs = read_footer(b)[0].get(4).items
    pos = 4
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        assert rg.num_columns == md.num_columns
        first, compressed, uncompressed = pos, 0, 0
        for j in range(rg.num_columns):
            c = rg.column(j)
            start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            assert start == pos, (i, j)
            assert c.data_page_offset >= start
            pos = start + c.total_compressed_size
            compressed += c.total_compressed_size
            uncompressed += c.total_uncompressed_size
        assert rg.total_byte_size == uncompressed
        # total_compressed_size and file_offset are not exposed by pyarrow's metadata objects
        assert raw_rgs[i].get(6) == compressed
        assert raw_rgs[i].get(5) == first
    assert pos == footer_start


# ---------------------------------------------------------------------------------------------
# Thrift compact codec


def _footers():
    t = make_table(40, seed=1)
    nested = pa.table({
        "s": pa.array([{"a": 1, "b": ["x", None]}, None, {"a": None, "b": []}],
                      pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])),
        "m": pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int32())),
        "d": pa.array([1.5, float("nan"), None]),
    })
    return {
        "stats_dict_nulls_3rg": write(t, [(0, 10), (10, 25), (25, 40)]),
        "no_stats": write(t, write_statistics=False),
        "all_dictionary": write(t, use_dictionary=True, write_statistics=True),
        "uncompressed_v2_pages": write(t, compression="none", data_page_version="2.0"),
        "zero_rows": template(),
        "full_train_schema_zero_rows": template(train_schema(keep_text=True)),
        "nested": write(nested, use_dictionary=True, write_statistics=True),
        "page_index": write(t, write_page_index=True),
    }


FOOTERS = _footers()


@pytest.mark.parametrize("name", sorted(FOOTERS))
def test_codec_round_trips_pyarrow_footers(name):
    raw = footer_bytes(FOOTERS[name])
    meta = decode_struct(raw)
    assert encode_struct(meta) == raw
    assert encode_struct(meta.copy()) == raw
    md = pq.ParquetFile(pa.BufferReader(FOOTERS[name])).metadata
    assert meta.get(3) == md.num_rows
    assert len(meta.get(4).items) == md.num_row_groups
    for i, rg in enumerate(meta.get(4).items):
        for j, cc in enumerate(rg.get(1).items):
            assert cc.get(3).get(9) == md.row_group(i).column(j).data_page_offset


def test_codec_all_types_and_unknown_fields():
    inner = TStruct([[1, BOOL, False], [2, BINARY, b""]])
    s = TStruct([
        [-3, I32, -7],                           # negative id: long form
        [1, BOOL, True],
        [2, BOOL, False],
        [3, BYTE, -128],
        [4, I16, -32768],
        [5, I32, 2**31 - 1],
        [6, I64, -(2**63)],
        [7, DOUBLE, -0.25],
        [8, BINARY, bytes(range(256))],
        [9, LIST, TList(I64, list(range(-20, 20)))],   # long list header
        [10, SET, TList(BINARY, [b"a", b"b"], SET)],
        [11, MAP, TMap(BINARY, I32, [(b"k", 1), (b"l", -1)])],
        [12, MAP, TMap(0, 0, [])],
        [13, LIST, TList(BOOL, [True, False, True])],
        [14, LIST, TList(STRUCT, [inner, TStruct()])],
        [15, LIST, TList(I32, [])],
        [40, STRUCT, TStruct([[2, LIST, TList(LIST, [TList(I16, [1]), TList(I16, [])])]])],  # delta > 15
        [32767, BINARY, b"last"],
    ])
    raw = encode_struct(s)
    back = decode_struct(raw)
    assert back == s
    assert encode_struct(back) == raw
    # an unknown field in a real footer survives decode/encode
    meta = decode_struct(footer_bytes(FOOTERS["no_stats"]))
    meta.set(99, STRUCT, TStruct([[1, I64, 5]]))
    assert decode_struct(encode_struct(meta)).get(99) == TStruct([[1, I64, 5]])


def test_codec_rejects_malformed_data():
    raw = footer_bytes(FOOTERS["nested"])
    for n in range(0, len(raw), 3):
        with pytest.raises(ValueError):
            decode_struct(raw[:n])
    with pytest.raises(ValueError, match="after the struct"):
        decode_struct(raw + b"\x00")
    for bad in (b"\x0d\x00", b"\x18\xff\xff\xff\xff\x0f", b"\x19\x11\x05\x00", b"\x16" + b"\xff" * 11):
        with pytest.raises(ValueError):
            decode_struct(bad)
    with pytest.raises(ValueError):
        encode_struct(TStruct([[1, I32, 2**31]]))


# ---------------------------------------------------------------------------------------------
# Stitching


def test_row_range_pieces_equal_a_direct_write():
    t = make_table(90, seed=2)
    bounds = [(0, 30), (30, 40), (40, 75), (75, 90)]
    pieces = [write(t.slice(0, 30)), write(t, [(30, 40), (40, 75)]), write(t.slice(75, 15))]
    out = stitch_to_bytes(template(), pieces, [[(0, 0)], [(1, 0)], [(1, 1)], [(2, 0)]])
    assert out == write(t, bounds).to_pybytes()
    back = read(out)
    assert back.equals(t)
    assert back.schema.metadata == SCHEMA.metadata
    check_layout(out, [30, 10, 35, 15])


def test_row_groups_may_take_pieces_in_any_order():
    t = make_table(30, seed=3)
    a, b = write(t.slice(0, 10)), write(t.slice(10, 20))
    out = stitch_to_bytes(template(), [a, b], [[(1, 0)], [(0, 0)]])
    assert read(out).equals(pa.concat_tables([t.slice(10, 20), t.slice(0, 10)]))
    check_layout(out, [20, 10])


def test_column_split_pieces():
    t = make_table(60, seed=4)
    rest = [c for c in COLUMNS if c != "tokens"]
    bounds = [(0, 25), (25, 60)]
    tokens, others = write(t.select(["tokens"]), bounds), write(t.select(rest), bounds)
    out = stitch_to_bytes(template(), [tokens, others], [[(1, 0), (0, 0)], [(0, 1), (1, 1)]])
    assert out == write(t, bounds).to_pybytes()
    back = read(out)
    assert back.equals(t)
    assert back.schema == SCHEMA
    assert pq.read_schema(pa.BufferReader(out)).metadata[b"rollout_cli.schema_version"] == str(SCHEMA_VERSION).encode()
    check_layout(out, [25, 35])


def test_pieces_out_of_template_order_and_mixed_codecs():
    t = make_table(20, seed=5)
    groups = [["status", "tokens"], ["rollout_log_probs", "step"],
              [c for c in COLUMNS if c not in ("status", "tokens", "rollout_log_probs", "step")]]
    pieces = [write(t.select(groups[0]), compression="snappy"), write(t.select(groups[1]), compression="none"),
              write(t.select(groups[2]))]
    out = stitch_to_bytes(template(), pieces, [[(2, 0), (0, 0), (1, 0)]])
    back = read(out)
    assert back.equals(t)
    check_layout(out, [20])
    md = pq.ParquetFile(pa.BufferReader(out)).metadata.row_group(0)
    codecs = {md.column(j).path_in_schema.split(".")[0]: md.column(j).compression for j in range(md.num_columns)}
    assert codecs["tokens"] == "SNAPPY" and codecs["step"] == "UNCOMPRESSED" and codecs["reward"] == "ZSTD"


def test_nested_columns():
    t = pa.table({
        "id": pa.array(range(6), pa.int64()),
        "s": pa.array([{"a": i, "b": [str(i)] * (i % 3)} if i % 4 else None for i in range(6)],
                      pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])),
        "m": pa.array([[("k", i)] if i % 2 else [] for i in range(6)], pa.map_(pa.string(), pa.int32())),
    })
    pieces = [write(t.select(["m"])), write(t.select(["id", "s"]))]
    out = stitch_to_bytes(template(t.schema), pieces, [[(0, 0), (1, 0)]])
    assert out == write(t).to_pybytes()
    assert read(out).equals(t)


def test_empty_outputs():
    t = make_table(0)
    out = stitch_to_bytes(template(), [write(t)], [[(0, 0)]])
    assert out == write(t).to_pybytes()
    assert read(out).equals(t)
    none = stitch_to_bytes(template(), [], [])
    back = read(none)
    assert back.num_rows == 0 and back.schema == SCHEMA
    assert pq.ParquetFile(pa.BufferReader(none)).metadata.num_row_groups == 0


def test_polars_and_duckdb_read_the_output(tmp_path):
    import duckdb
    import polars as pl
    t = make_table(80, seed=6)
    rest = [c for c in COLUMNS if c not in ("tokens", "loss_mask")]
    bounds = [(0, 50), (50, 80)]
    pieces = [write(t.select(["tokens", "loss_mask"]), bounds), write(t.select(rest), bounds)]
    path = tmp_path / "stitched.parquet"
    with open(path, "wb") as f:
        for part in stitch(template(), pieces, [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]):
            f.write(part)

    n_tokens = pc.sum(pc.list_value_length(t["tokens"])).as_py()
    tok_sum = pc.sum(pc.list_flatten(t["tokens"]).cast(pa.int64())).as_py()
    mask_sum = pc.sum(pc.list_flatten(t["loss_mask"]).cast(pa.int64())).as_py()
    lp_nulls = t["rollout_log_probs"].null_count
    lp_sum = pc.sum(pc.list_flatten(t["rollout_log_probs"]).cast(pa.float64())).as_py()
    completed = pc.sum(pc.equal(t["status"], "completed").cast(pa.int64())).as_py()

    df = pl.read_parquet(path)
    assert df.height == 80
    assert df["tokens"].list.len().sum() == n_tokens
    assert df["tokens"].explode().cast(pl.Int64).sum() == tok_sum
    assert df["loss_mask"].explode().cast(pl.Int64).sum() == mask_sum
    assert df["rollout_log_probs"].null_count() == lp_nulls
    assert (df["status"] == "completed").sum() == completed
    assert df["step"].to_list() == t["step"].to_pylist()

    row = duckdb.sql(
        "select count(*), sum(len(tokens)), sum(list_sum(tokens)), sum(list_sum(loss_mask)), "
        "count(*) filter (where rollout_log_probs is null), sum(list_sum(rollout_log_probs)), "
        f"count(*) filter (where status = 'completed') from read_parquet('{path}')").fetchall()[0]
    assert row[:5] == (80, n_tokens, tok_sum, mask_sum, lp_nulls)
    assert row[5] == pytest.approx(lp_sum, rel=1e-5)
    assert row[6] == completed


def test_deterministic_and_zero_copy():
    t = make_table(40, seed=7)
    tmpl = template()
    pieces = [write(t.select(["tokens"])), write(t.select([c for c in COLUMNS if c != "tokens"]))]
    groups = [[(0, 0), (1, 0)]]
    out = stitch_to_bytes(tmpl, pieces, groups)
    assert stitch_to_bytes(tmpl, pieces, groups) == out
    # any buffer type gives the same bytes
    for conv in (bytes, bytearray, memoryview, pa.py_buffer):
        assert stitch_to_bytes(conv(tmpl.to_pybytes()), [conv(p.to_pybytes()) for p in pieces], groups) == out
    # column chunks are views of the piece buffers, not copies
    piece = bytearray(pieces[0].to_pybytes())
    parts = list(stitch(tmpl, [piece, pieces[1]], groups))
    assert parts[0] == b"PAR1" and parts[-1] == b"PAR1"
    views = [p for p in parts if isinstance(p, memoryview) and p.obj is piece]
    assert len(views) == 1
    piece[4] ^= 0xFF
    assert views[0][0] == piece[4]


@st.composite
def _cases(draw):
    n = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**16))
    max_len = draw(st.sampled_from([0, 3, 20]))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=4))) if n > 1 else []
    bounds = list(zip([0] + cuts, cuts + [n]))
    owner = draw(st.lists(st.integers(0, 2), min_size=len(COLUMNS), max_size=len(COLUMNS)))
    groups = [[c for c, o in zip(COLUMNS, owner) if o == g] for g in range(3)]
    groups = [g for g in groups if g]
    order = draw(st.permutations(range(len(groups))))
    return n, seed, max_len, bounds, [groups[i] for i in order]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_property_stitched_reads_back_as_source(case):
    n, seed, max_len, bounds, groups = case
    t = make_table(n, seed, max_len)
    pieces = [write(t.select(g), bounds) for g in groups]
    row_groups = [[(p, r) for p in reversed(range(len(groups)))] for r in range(len(bounds))]
    out = stitch_to_bytes(template(), pieces, row_groups)
    assert read(out).equals(t)
    check_layout(out, [e - s for s, e in bounds])
    assert out == write(t, bounds).to_pybytes()


# ---------------------------------------------------------------------------------------------
# Refusals


def _rebuild(buf, edit) -> bytes:
    """The file with its footer decoded, changed by `edit(meta)` and encoded again."""
    b = bytes(buf)
    meta, start = read_footer(b)
    edit(meta)
    footer = encode_struct(meta)
    return b[:start] + footer + len(footer).to_bytes(4, "little") + b"PAR1"


@pytest.fixture(scope="module")
def split():
    t = make_table(20, seed=8)
    return t, write(t.select(["tokens"])), write(t.select([c for c in COLUMNS if c != "tokens"]))


def test_refuses_non_parquet(split):
    _, a, b = split
    tmpl = template()
    for junk in (b"", b"PAR1", b"hello world, not parquet", b"PAR1" + b"\0" * 20 + b"PAR1",
                 b"PARE" + bytes(a)[4:]):
        with pytest.raises(ValueError):
            stitch(junk, [a, b], [[(0, 0), (1, 0)]])
        with pytest.raises(ValueError, match="piece 1"):
            stitch(tmpl, [a, junk], [[(0, 0)]])
    with pytest.raises(ValueError, match="footer length"):
        stitch(tmpl, [bytes(a)[:-8] + (10**6).to_bytes(4, "little") + b"PAR1"], [])
    with pytest.raises(ValueError, match="cannot decode footer"):
        raw = bytearray(bytes(a))
        raw[-9] = 0x0D  # the footer's STOP byte becomes an unknown type
        stitch(tmpl, [bytes(raw)], [])
    with pytest.raises(ValueError):
        stitch(object(), [], [])


def test_refuses_bad_row_group_lists(split):
    t, a, b = split
    tmpl = template()
    other = write(t.select(["tokens"]).slice(0, 10))
    with pytest.raises(ValueError, match="'tokens.list.element' supplied twice"):
        stitch(tmpl, [a, b, a], [[(0, 0), (1, 0), (2, 0)]])
    with pytest.raises(ValueError, match="'tokens.list.element' supplied twice"):
        stitch(tmpl, [a, b], [[(0, 0), (1, 0), (0, 0)]])
    with pytest.raises(ValueError, match=r"missing columns \['tokens.list.element'\]"):
        stitch(tmpl, [a, b], [[(1, 0)]])
    with pytest.raises(ValueError, match="missing columns"):
        stitch(tmpl, [a, b], [[]])
    with pytest.raises(ValueError, match="has 10 rows, expected 20"):
        stitch(tmpl, [b, other], [[(0, 0), (1, 0)]])
    with pytest.raises(ValueError, match="no piece 2"):
        stitch(tmpl, [a, b], [[(0, 0), (2, 0)]])
    with pytest.raises(ValueError, match="no row group 1"):
        stitch(tmpl, [a, b], [[(0, 0), (1, 1)]])


def test_refuses_columns_unlike_the_template(split):
    t, a, _ = split
    tmpl = template()
    extra = write(t.select(["tokens"]).append_column("bogus", pa.array(range(20), pa.int64())))
    with pytest.raises(ValueError, match="'bogus' is not in the template"):
        stitch(tmpl, [extra], [])
    wide = write(pa.table({"tokens": t["tokens"].cast(pa.list_(pa.int64()))}))
    with pytest.raises(ValueError, match="different schema"):
        stitch(tmpl, [wide], [])
    nullable = write(pa.table({"step": t["step"]}))  # the template's step is non-nullable
    with pytest.raises(ValueError, match="'step' has a different schema"):
        stitch(tmpl, [nullable], [])
    with pytest.raises(ValueError, match="created_by"):
        stitch(tmpl, [_rebuild(a, lambda m: m.set(6, BINARY, b"other writer"))], [])


def _edit_chunk(fid, ttype, value, in_meta_data=False):
    def edit(meta):
        cc = meta.get(4).items[0].get(1).items[0]
        (cc.get(3) if in_meta_data else cc).set(fid, ttype, value)
    return edit


@pytest.mark.parametrize("name, edit, message", [
    ("encryption", lambda m: m.set(8, STRUCT, TStruct()), "encrypted file"),
    ("unknown file field", lambda m: m.set(30, I32, 1), "unknown FileMetaData field 30"),
    ("sorting columns", lambda m: m.get(4).items[0].set(4, LIST, TList(STRUCT, [])), "sorting_columns"),
    ("file_path", _edit_chunk(1, BINARY, b"other.parquet"), "file_path"),
    ("column index", _edit_chunk(6, I64, 100), "page index"),
    ("column crypto", _edit_chunk(8, STRUCT, TStruct()), "encrypted column"),
    ("bloom filter", _edit_chunk(14, I64, 100, True), "bloom filter"),
    ("unknown column field", _edit_chunk(40, I64, 1, True), "unknown ColumnMetaData field 40"),
    ("offset past the data", _edit_chunk(9, I64, 10**6, True), "outside"),
    ("offset of wrong type", _edit_chunk(9, I32, 4, True), "Thrift type"),
])
def test_refuses_unsupported_footers(split, name, edit, message):
    _, a, b = split
    with pytest.raises(ValueError, match=message):
        stitch(template(), [_rebuild(a, edit), b], [[(0, 0), (1, 0)]])


def test_refuses_real_page_indexes_bloom_filters_and_sorting(split):
    t, _, b = split
    tokens = t.select(["tokens"])
    cases = [
        (dict(write_page_index=True), "page index"),
        (dict(bloom_filter_options={"tokens.list.element": {"ndv": 20}}), "bloom filter"),
        (dict(sorting_columns=[pq.SortingColumn(0)]), "sorting_columns"),
    ]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            stitch(template(), [write(tokens, **kw), b], [[(0, 0), (1, 0)]])
    with pytest.raises(ValueError, match="unknown FileMetaData"):
        stitch(_rebuild(template(), lambda m: m.set(10, I32, 0)), [b], [])


def test_errors_come_before_any_byte(split):
    _, a, _ = split
    with pytest.raises(ValueError):
        stitch(template(), [a], [[(0, 0)]])  # raised by the call, not by iterating


def test_stitcher_row_group_at_a_time_equals_stitch():
    from rollout_cli.output.stitch import Stitcher

    t = make_table(90, seed=11)
    tmpl = template()
    bounds = [(0, 30), (30, 75), (75, 90)]
    split = [["tokens"], [c for c in COLUMNS if c != "tokens"]]
    pieces = [write(t.slice(s, e - s).select(cols)) for s, e in bounds for cols in split]
    whole = stitch_to_bytes(tmpl, pieces, [[(2 * k, 0), (2 * k + 1, 0)] for k in range(len(bounds))])
    st = Stitcher(tmpl)
    out = [st.header()]
    for k in range(len(bounds)):
        members = [(st.parse(pieces[j], j), 0, j) for j in (2 * k, 2 * k + 1)]
        out += st.add(members, k)
    out.append(st.footer())
    assert b"".join(bytes(p) for p in out) == whole
    assert pq.read_table(pa.BufferReader(whole)).equals(t)
