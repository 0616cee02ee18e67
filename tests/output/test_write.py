"""write: a shard's Parquet file is encoded as column pieces on several threads and stitched;
its bytes are those of pyarrow writing the same row groups in one go, whatever the thread count."""
from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_cli.core import hashing
from rollout_cli.output import write
from rollout_cli.core.schema import DICTIONARY_COLUMNS, LIST_COLUMNS, train_schema


def train_table(n: int, seed: int = 0, max_len: int = 300) -> pa.Table:
    """A full train-schema table: token, mask and log-prob lists, the rest scalars or null."""
    rng = np.random.default_rng(seed)
    schema = train_schema()
    lens = rng.integers(1, max_len, n)
    cols = {}
    for f in schema:
        if f.name == "tokens":
            cols[f.name] = pa.array([rng.integers(0, 150_000, k).tolist() for k in lens], f.type)
        elif f.name == "loss_mask":
            cols[f.name] = pa.array([rng.integers(0, 2, k).tolist() for k in lens], f.type)
        elif f.name == "rollout_log_probs":
            cols[f.name] = pa.array([None if i % 5 == 0 else (-rng.random(k)).tolist() for i, k in enumerate(lens)], f.type)
        elif f.name == "status":
            cols[f.name] = pa.array(rng.choice(["completed", "truncated"], n).tolist(), f.type)
        elif f.name == "source_name":
            cols[f.name] = pa.array(["math"] * n, f.type)
        elif pa.types.is_list(f.type) or pa.types.is_string(f.type):
            cols[f.name] = pa.nulls(n, f.type)
        elif pa.types.is_boolean(f.type):
            cols[f.name] = pa.array(rng.random(n) < 0.5)
        elif pa.types.is_floating(f.type):
            cols[f.name] = pa.array(rng.random(n), f.type)
        else:
            cols[f.name] = pa.array(rng.integers(0, 1000, n), f.type)
    return pa.table(cols, schema=schema)


def direct(table: pa.Table, bounds) -> bytes:
    """pyarrow writing the same row groups with the same options, single-threaded."""
    names = table.column_names
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd", compression_level=1,
                          use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names],
                          write_statistics=[c for c in names if c not in LIST_COLUMNS]) as w:
        for s, e in bounds:
            w.write_table(table.slice(s, e - s), row_group_size=e - s)
    return sink.getvalue().to_pybytes()


def test_list_lengths_read_from_the_buffers():
    arr = pa.array([[1, 2], None, [], [3, 4, 5], None, [6]], pa.list_(pa.int32()))
    # a null row over a non-empty segment (Arrow allows it) counts 0, as list_value_length says
    odd = pa.ListArray.from_arrays(pa.array([0, 2, 4, 4], pa.int32()), pa.array(range(4), pa.int32()),
                                   mask=pa.array([False, True, False]))
    col = pa.chunked_array([arr.slice(1, 4), arr.slice(0, 1), odd, arr.slice(5)])
    want = [0, 0, 3, 0, 2, 2, 0, 0, 1]
    assert write.list_lengths(col).tolist() == want
    import pyarrow.compute as pc
    assert pc.list_value_length(col).fill_null(0).to_pylist() == want
    assert write.list_lengths(pa.chunked_array([], pa.list_(pa.int32()))).tolist() == []


def test_column_groups_put_each_filled_list_column_alone():
    t = train_table(20)
    groups = write.column_groups(t)
    assert groups[:3] == [["tokens"], ["loss_mask"], ["rollout_log_probs"]]
    rest = groups[3]
    assert "teacher_log_probs" in rest and "step" in rest  # all-null lists travel with the scalars
    assert sorted(c for g in groups for c in g) == sorted(t.column_names)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_stitched_file_is_what_pyarrow_writes_in_one_go(tmp_path, threads):
    t = train_table(400, seed=threads)
    rgb = 1 << 16
    bounds = write.row_group_bounds(t, rgb)
    assert len(bounds) > 3
    wf = write.write_parquet(t, str(tmp_path / "s.parquet"), row_group_bytes=rgb, threads=threads)
    data = (tmp_path / "s.parquet").read_bytes()
    assert data == direct(t, bounds)
    assert wf.bytes == len(data) and wf.row_groups == len(bounds)
    assert wf.digest == hashing.bytes_digest(data)
    back = pq.read_table(tmp_path / "s.parquet")
    assert back.equals(t) and back.schema.metadata == t.schema.metadata


def test_bytes_do_not_depend_on_threads_or_chunking(tmp_path):
    t = train_table(300, seed=3)
    chunked = pa.Table.from_batches(t.to_batches(max_chunksize=7))
    outs = set()
    for k, (table, threads) in enumerate([(t, 1), (t, 4), (chunked, 2)]):
        write.write_parquet(table, str(tmp_path / f"{k}.parquet"), row_group_bytes=1 << 16, threads=threads)
        outs.add((tmp_path / f"{k}.parquet").read_bytes())
    assert len(outs) == 1


@pytest.mark.parametrize("backend", pa.supported_memory_backends())
def test_the_memory_pool_changes_no_byte(tmp_path, backend):
    """Workers encode from jemalloc (engines.local); the bytes are the same from any pool."""
    t = train_table(300, seed=4, max_len=3000)
    assert len(write.row_group_bounds(t, write.ENCODE_BATCH_BYTES)) > 2  # several batches
    write.write_parquet(t, str(tmp_path / "default.parquet"), threads=1)
    pool = getattr(pa, f"{backend}_memory_pool")()
    counted = pa.proxy_memory_pool(pool)
    old = pa.default_memory_pool()
    pa.set_memory_pool(counted)
    try:
        write.write_parquet(t, str(tmp_path / "other.parquet"), threads=2)
    finally:
        pa.set_memory_pool(old)
    assert counted.max_memory() > 0  # the encoder did allocate from it
    assert (tmp_path / "default.parquet").read_bytes() == (tmp_path / "other.parquet").read_bytes()


def test_an_encoding_larger_than_the_bound_is_redone(tmp_path, monkeypatch):
    t = train_table(50, seed=4)
    monkeypatch.setattr(write, "_encoded_bound", lambda table: 64)  # far too small
    write.write_parquet(t, str(tmp_path / "small.parquet"), threads=2)
    monkeypatch.undo()
    write.write_parquet(t, str(tmp_path / "ok.parquet"), threads=2)
    assert (tmp_path / "small.parquet").read_bytes() == (tmp_path / "ok.parquet").read_bytes()


def test_no_room_for_the_sized_buffer_falls_back_to_a_growing_one(tmp_path, monkeypatch):
    t = train_table(40, seed=6)
    write.write_parquet(t, str(tmp_path / "ok.parquet"), threads=2)

    def refuse(size):
        raise MemoryError("capped address space")

    monkeypatch.setattr(write.pa, "allocate_buffer", refuse)
    write.write_parquet(t, str(tmp_path / "capped.parquet"), threads=2)
    assert (tmp_path / "capped.parquet").read_bytes() == (tmp_path / "ok.parquet").read_bytes()


def test_empty_table(tmp_path):
    t = train_table(5).slice(0, 0)
    wf = write.write_parquet(t, str(tmp_path / "e.parquet"))
    back = pq.read_table(tmp_path / "e.parquet")
    assert back.num_rows == 0 and back.schema.equals(t.schema) and wf.row_groups == 1


def test_ipc_copy_is_one_batch_of_the_table(tmp_path):
    t = pa.Table.from_batches(train_table(60, seed=5).to_batches(max_chunksize=9))
    wf = write.write_ipc(t, str(tmp_path / "s.arrow"))
    with pa.memory_map(str(tmp_path / "s.arrow")) as src:
        reader = pa.ipc.open_file(src)
        assert reader.num_record_batches == 1
        assert reader.read_all().equals(t)
    assert wf.digest == hashing.bytes_digest((tmp_path / "s.arrow").read_bytes())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 120), seed=st.integers(0, 10_000), rgb=st.sampled_from([1 << 16, 1 << 17, 1 << 20]),
       threads=st.integers(1, 4))
def test_property_stitched_equals_direct(tmp_path_factory, n, seed, rgb, threads):
    t = train_table(n, seed=seed, max_len=2000)
    path = tmp_path_factory.mktemp("w") / "p.parquet"
    write.write_parquet(t, str(path), row_group_bytes=rgb, threads=threads)
    assert path.read_bytes() == direct(t, write.row_group_bounds(t, rgb))


@pytest.mark.parametrize("o_direct", [True, False])
def test_a_local_shard_spanning_several_write_chunks_is_whole_and_hashed(tmp_path, monkeypatch, o_direct):
    """Written straight to the device or through the page cache, the files hold the same bytes
    and the digests are of what is on disk."""
    monkeypatch.setattr(write.storage, "LocalWriter", functools.partial(write.storage.LocalWriter, direct=o_direct))
    n = 3 * write.storage.WRITE_CHUNK_BYTES // 16 + 5  # each column's buffer is 1.5 chunks
    table = pa.table({k: pa.array(np.arange(n, dtype=np.int64) * i) for i, k in enumerate("abc")})
    wf = write.write_ipc(table, str(tmp_path / "x.arrow"))
    data = (tmp_path / "x.arrow").read_bytes()
    assert wf.bytes == len(data) and wf.digest == hashing.bytes_digest(data)
    assert pa.ipc.open_file(pa.py_buffer(data)).read_all().equals(table)
    t = train_table(300, seed=5, max_len=20000)
    wp = write.write_parquet(t, str(tmp_path / "x.parquet"), row_group_bytes=1 << 20)
    pdata = (tmp_path / "x.parquet").read_bytes()
    assert len(pdata) > write.storage.WRITE_CHUNK_BYTES
    assert wp.bytes == len(pdata) and wp.digest == hashing.bytes_digest(pdata)
    assert pdata == direct(t, write.row_group_bounds(t, 1 << 20))


def _with_unknown_footer_field(real_encode, only_template: bool):
    """write._encode, but every file it makes (or only the empty template) has a FileMetaData
    field the stitcher does not know, as a future pyarrow might write."""
    from rollout_cli.core.thrift import I32, encode_struct, read_footer

    def encode(table, options):
        buf = real_encode(table, options)
        if only_template and table.num_rows:
            return buf
        b = buf.to_pybytes()
        meta, start = read_footer(b)
        meta.set(30, I32, 1)
        footer = encode_struct(meta)
        return pa.py_buffer(b[:start] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    return encode


@pytest.mark.parametrize("only_template", [True, False])
def test_a_footer_the_stitcher_does_not_know_falls_back_to_pyarrows_writer(tmp_path, monkeypatch, only_template):
    t = train_table(400, seed=9)
    rgb = 1 << 16
    bounds = write.row_group_bounds(t, rgb)
    monkeypatch.setattr(write, "_encode", _with_unknown_footer_field(write._encode, only_template))
    wf = write.write_parquet(t, str(tmp_path / "f.parquet"), row_group_bytes=rgb, threads=2)
    data = (tmp_path / "f.parquet").read_bytes()
    assert data == direct(t, bounds)  # the same rows, written by pyarrow itself
    assert wf.bytes == len(data) and wf.digest == hashing.bytes_digest(data) and wf.row_groups == len(bounds)


def test_the_installed_pyarrow_is_stitched_not_written_by_the_fallback(tmp_path, monkeypatch):
    """The stitcher understands every footer this pyarrow writes for a shard: a new pyarrow
    that changes what it relies on fails here loudly (the fallback keeps the output right)."""
    t = train_table(300, seed=4)
    monkeypatch.setattr(write, "_write_direct", lambda *a: pytest.fail("fell back to pyarrow's writer"))
    write.write_parquet(t, str(tmp_path / "s.parquet"), row_group_bytes=1 << 16, threads=2)
    assert pq.read_table(tmp_path / "s.parquet").equals(t)
