"""write: a shard's Parquet file is pyarrow writing its row groups in bounded batches: the bytes
depend on the rows only, not on how the table is chunked or which memory pool is used."""
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


def test_the_file_is_what_pyarrow_writes_for_the_same_row_groups(tmp_path):
    t = train_table(400, seed=1)
    rgb = 1 << 16
    bounds = write.row_group_bounds(t, rgb)
    assert len(bounds) > 3
    wf = write.write_parquet(t, str(tmp_path / "s.parquet"), row_group_bytes=rgb)
    data = (tmp_path / "s.parquet").read_bytes()
    assert data == direct(t, bounds)
    assert wf.bytes == len(data) and wf.row_groups == len(bounds)
    assert wf.digest == hashing.bytes_digest(data)
    back = pq.read_table(tmp_path / "s.parquet")
    assert back.equals(t) and back.schema.metadata == t.schema.metadata


def test_bytes_do_not_depend_on_chunking(tmp_path):
    t = train_table(300, seed=3)
    outs = set()
    for k, table in enumerate([t, pa.Table.from_batches(t.to_batches(max_chunksize=7))]):
        write.write_parquet(table, str(tmp_path / f"{k}.parquet"), row_group_bytes=1 << 16)
        outs.add((tmp_path / f"{k}.parquet").read_bytes())
    assert len(outs) == 1


@pytest.mark.parametrize("backend", pa.supported_memory_backends())
def test_the_memory_pool_changes_no_byte(tmp_path, backend):
    """Workers encode from jemalloc (engines/worker_setup.py); the bytes are the same from any pool."""
    t = train_table(300, seed=4, max_len=3000)
    assert len(write.row_group_bounds(t, write.ENCODE_BATCH_BYTES)) > 2  # several batches
    write.write_parquet(t, str(tmp_path / "default.parquet"))
    pool = getattr(pa, f"{backend}_memory_pool")()
    counted = pa.proxy_memory_pool(pool)
    old = pa.default_memory_pool()
    pa.set_memory_pool(counted)
    try:
        write.write_parquet(t, str(tmp_path / "other.parquet"))
    finally:
        pa.set_memory_pool(old)
    assert counted.max_memory() > 0  # the encoder did allocate from it
    assert (tmp_path / "default.parquet").read_bytes() == (tmp_path / "other.parquet").read_bytes()


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
       chunk=st.integers(1, 50))
def test_property_any_chunking_gives_pyarrows_bytes_for_the_row_groups(tmp_path_factory, n, seed, rgb, chunk):
    t = train_table(n, seed=seed, max_len=2000)
    path = tmp_path_factory.mktemp("w") / "p.parquet"
    write.write_parquet(pa.Table.from_batches(t.to_batches(max_chunksize=chunk), schema=t.schema), str(path),
                        row_group_bytes=rgb)
    assert path.read_bytes() == direct(t, write.row_group_bounds(t, rgb))


@pytest.mark.parametrize("o_direct", [True, False])
def test_a_local_shard_spanning_several_write_chunks_is_whole_and_hashed(tmp_path, monkeypatch, o_direct):
    """Written straight to the device or through the page cache, columns larger than a write
    chunk (through the cache: written from Arrow's memory) and smaller ones (gathered): the files
    hold the table's bytes and the digests are of what is on disk."""
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

