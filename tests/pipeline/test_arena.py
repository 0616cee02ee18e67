"""pipeline/arena.py: a held step's list values cast into one buffer per column, so the step
combines without copying them."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rollout_cli.inputs.base import ReadInfo
from rollout_cli.inputs.parquet.reader import read
from rollout_cli.inputs.base import ReadRequest
from rollout_cli.pipeline import arena as step_arena
from rollout_cli.pipeline.arena import ValueArena
from rollout_cli.pipeline.validate import normalize_chunk, pre_schema
from rollout_cli.run.stages import _one_chunk


def test_room_is_handed_out_in_order_until_it_runs_out():
    arena = ValueArena(10)
    a, b = arena.take("tokens", 4), arena.take("tokens", 6)
    assert a.dtype == np.int32 and len(a) == 4 and len(b) == 6
    assert b.ctypes.data == a.ctypes.data + 16  # end to end
    assert arena.take("tokens", 1) is None  # full: the batch makes its own array
    assert arena.take("loss_mask", 10).dtype == np.uint8  # each column has its own room
    assert arena.take("rollout_log_probs", 3).dtype == np.float32
    assert arena.take("rollout_routed_experts", 3) is None  # not gathered


def _step(tmp_path, recs, chunk_rows):
    path = tmp_path / "1.parquet"
    pq.write_table(pa.Table.from_pylist(recs), path, row_group_size=7)
    inp = type("Inp", (), {"path": str(path), "display": "1.parquet"})()
    info = ReadInfo()
    chunks = read(inp, ReadRequest(chunk_records=chunk_rows, keep_text=False), info)
    return chunks, info


def test_a_held_parquet_step_combines_into_the_arena(tmp_path):
    rng = np.random.default_rng(0)
    recs = []
    for i in range(23):
        n = int(rng.integers(2, 9))
        rl = int(rng.integers(1, n))
        recs.append({"index": i, "group_index": i // 4, "tokens": rng.integers(0, 1000, n).tolist(),
                     "response_length": rl, "loss_mask": rng.integers(0, 2, rl).tolist(),
                     "rollout_log_probs": rng.random(rl).tolist(), "reward": 1.0, "status": "completed"})
    chunks, info = _step(tmp_path, recs, 5)
    batches, plain, arena, pos = [], [], None, 0
    for raw in chunks:
        if arena is None:
            assert info.values_bound >= sum(len(r["tokens"]) for r in recs)  # from the footer
            arena = ValueArena(info.values_bound)
        with step_arena.placing(arena):
            batches += normalize_chunk(raw, pos, reward_key=None, keep_text=False).batches
        plain += normalize_chunk(raw, pos, reward_key=None, keep_text=False).batches
        pos += len(raw)
    schema = pre_schema(False)
    got, want = _one_chunk(list(batches), schema), _one_chunk(plain, schema)
    assert got.equals(want)
    for name in ("tokens", "loss_mask", "rollout_log_probs"):  # combined where the batches put them
        col = got.column(name).chunk(0)
        assert col.values.buffers()[1].address == arena._bufs[name].ctypes.data
    for b in plain:  # outside placing, each batch keeps arrays of its own
        for name in ("tokens", "loss_mask", "rollout_log_probs"):
            addr = b.column(name).values.buffers()[1].address
            assert not arena._bufs[name].ctypes.data <= addr < arena._bufs[name].ctypes.data + arena._bufs[name].nbytes


def test_the_switch_turns_the_arena_off(monkeypatch):
    assert isinstance(step_arena.for_step(100), ValueArena)
    assert step_arena.for_step(None) is None  # no bound from the reader
    monkeypatch.setenv("ROLLOUT_CLI_VALUE_ARENA", "0")
    assert step_arena.for_step(100) is None


def test_take_outside_placing_hands_out_nothing():
    arena = ValueArena(10)
    assert step_arena.take("tokens", 4) is None
    with step_arena.placing(arena):
        assert len(step_arena.take("tokens", 4)) == 4
        with step_arena.placing(None):
            assert step_arena.take("tokens", 1) is None
    assert step_arena.take("tokens", 1) is None
    assert arena.take("tokens", 6) is not None and arena.take("tokens", 1) is None  # 4 were taken


def test_a_bound_without_address_space_leaves_each_batch_its_own_array():
    arena = ValueArena(2**62)  # a damaged footer's count: no mapping that large
    assert arena.take("tokens", 3) is None
    assert arena.take("loss_mask", 1) is None
