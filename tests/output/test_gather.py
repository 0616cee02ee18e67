"""output/gather.py: aligned arrays; batches held across steps keep their bytes; a Slicer's rows equal slice_rows'; take_blocks gives take_ordered's rows, each
micro-batch one block in block_layout's layout with its gaps zeroed."""
from __future__ import annotations

import numpy as np
from test_batches import BUDGET, out4  # noqa: F401  (the 4-shard output fixture)

from rollout_cli.output import gather, views
from rollout_cli.output.batches import ARRAY_FIELDS
from rollout_cli.output.model import open_output


def test_aligned_arrays_start_on_a_block_boundary_and_do_not_overlap():
    xs = [gather.aligned_empty(n, dt) for n, dt in [(3, np.int32), (5, np.float64), (1, np.uint8), (7, np.int64)]]
    for x in xs:
        assert x.ctypes.data % gather.BLOCK_ALIGN == 0
        x[:] = 1
    spans = sorted((x.ctypes.data, x.ctypes.data + x.nbytes) for x in xs)
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))
    assert gather.aligned_empty(0, np.int32).shape == (0,)


def test_batches_held_across_steps_are_never_overwritten(out4):  # noqa: F811
    kept = [b for b in open_output(out4).iter_batches(1, world_size=3, max_tokens=BUDGET, backend="numpy")]
    copies = [(b.tokens.copy(), b.loss_mask.copy(), b.rollout_ids.copy()) for b in kept]
    # a stream let go of batch by batch reuses memory; the kept one's bytes stay as served
    for _ in open_output(out4).iter_batches(1, world_size=3, max_tokens=BUDGET, backend="numpy"):
        pass
    for b, (t, m, r) in zip(kept, copies):
        assert np.array_equal(b.tokens, t) and np.array_equal(b.loss_mask, m) and np.array_equal(b.rollout_ids, r)


def test_a_slicer_gives_slice_rows(out4):  # noqa: F811
    o = open_output(out4)
    it = o.iter_batches(0, world_size=4, backend="numpy")
    next(it)
    a = it._arrays(o.step_numbers()[0], 0)
    n = len(a["response_lengths"])
    s = gather.Slicer(a)
    for lo, hi in [(0, n), (1, n), (0, 1), (n // 2, n), (2, 2)]:
        want, got = gather.slice_rows(a, lo, hi), s(lo, hi)
        assert set(want) == set(got)
        for k, v in want.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(v, got[k]), k
            elif k != "extras":
                assert v == got[k], k


def _sources(out):
    o = open_output(out)
    it = o.iter_batches(0, world_size=4, backend="numpy")
    step = o.step_numbers()[0]
    return [it._arrays(step, r) for r in range(4)]


def _same(want: dict, got: dict) -> None:
    for k, v in want.items():
        if k == "extras":
            assert set(v) == set(got[k])
            for e, x in v.items():
                y = got[k][e]
                if isinstance(x, views.Ragged):
                    assert np.array_equal(x.values, y.values) and np.array_equal(x.offsets, y.offsets), e
                elif isinstance(x, np.ndarray):
                    assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), e
                else:
                    assert x == y, e
        elif isinstance(v, np.ndarray):
            assert got[k].dtype == v.dtype and np.array_equal(v, got[k], equal_nan=v.dtype.kind == "f"), k
        else:
            assert v == got[k], k


def test_take_blocks_gives_take_ordered_rows_one_block_a_micro_batch(out4):  # noqa: F811
    srcs = _sources(out4)
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(1, 40))
        which = rng.integers(0, len(srcs), n)
        local = np.array([rng.integers(0, len(srcs[w]["response_lengths"])) for w in which])
        if trial % 3 == 0:  # runs of adjacent rows, as a plan's micro-batches often hold
            local = np.minimum(np.sort(local), [len(srcs[w]["response_lengths"]) - 1 for w in which])
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 6))))
        sizes = np.diff(np.concatenate([[0], cuts, [n]])).tolist()  # some micro-batches empty
        whole = gather.take_ordered(srcs, which, local)
        got = gather.take_blocks(srcs, which, local, sizes, ARRAY_FIELDS)
        assert len(got) == len(sizes)
        lo = 0
        for size, d in zip(sizes, got):
            want = gather.slice_rows(whole, lo, lo + size)
            lo += size
            block = d.pop("_block")
            _same(want, d)
            # every array a view of the block, where block_layout puts it; the gaps zero
            items = [(k, d[k].nbytes) for k in ARRAY_FIELDS if isinstance(d.get(k), np.ndarray)]
            layout, total = gather.block_layout(items)
            assert block.nbytes == total and block.ctypes.data % gather.BLOCK_ALIGN == 0
            covered = np.zeros(total, bool)
            for k, (off, nb) in layout.items():
                assert not nb or d[k].ctypes.data == block.ctypes.data + off, k
                covered[off:off + nb] = True
            assert not block[~covered].any()


def test_take_blocks_leaves_out_what_it_is_told_and_serves_nothing_as_empty(out4):  # noqa: F811
    srcs = _sources(out4)
    got = gather.take_blocks(srcs, np.array([0, 1]), np.array([0, 0]), [2], ARRAY_FIELDS, drop=("rollout_log_probs", "rollout_ids"))
    assert got[0]["rollout_log_probs"] is None and got[0]["rollout_ids"] is None  # for the caller to set
    assert got[0]["tokens"].base is got[0]["_block"].base
    empty = gather.take_blocks(srcs, np.zeros(0, np.int64), np.zeros(0, np.int64), [0, 0], ARRAY_FIELDS)
    assert len(empty) == 2 and all(d["_block"] is None and len(d["tokens"]) == 0 for d in empty)


def test_a_gathered_batch_is_one_buffer(out4):  # noqa: F811
    seen = 0
    for b in open_output(out4).iter_batches(1, world_size=3, max_tokens=BUDGET, backend="numpy"):
        if b.num_samples:
            bufs = b.buffers()
            assert bufs[0] is b._block
            assert sum(x.nbytes for x in bufs[1:]) == sum(
                (v.values.nbytes + v.offsets.nbytes) if isinstance(v, views.Ragged) else v.nbytes
                for v in b.extras.values() if isinstance(v, (np.ndarray, views.Ragged)))
            seen += 1
    assert seen
    native = next(iter(open_output(out4).iter_batches(1, backend="numpy")))  # views of the shard: each array
    assert native._block is None and len(native.buffers()) >= len(native.arrays())


def test_a_pickled_batch_sends_its_bytes_once(out4):  # noqa: F811
    import pickle

    b = next(b for b in open_output(out4).iter_batches(1, world_size=3, max_tokens=BUDGET, backend="numpy")
             if b.num_samples)
    back = pickle.loads(pickle.dumps(b))
    assert back._block is None and np.array_equal(back.tokens, b.tokens)
    assert len(pickle.dumps(b)) < b._block.nbytes * 1.5 + 4096
