"""Rows of unpacked shards (output/views.unpack's dicts, views of the mapped files) taken
into new arrays: `take_ordered` (rows in any order, one copy a field), `take_blocks` (rows cut
into micro-batches, each micro-batch's arrays one block laid out by `block_layout`, PackedBatch's
staging layout, so a batch moves in one copy), `slice_rows` / `Slicer` (a run of rows as
views). A run of one shard's rows is never copied: views of the mapped file."""
from __future__ import annotations

import numpy as np

from .views import Ragged

__all__ = ["take_ordered", "take_blocks", "block_layout", "aligned_empty", "BLOCK_ALIGN",
           "slice_rows", "Slicer"]


_TOKEN_FIELDS = ("tokens",)
_RESPONSE_FIELDS = ("loss_mask", "rollout_log_probs", "teacher_log_probs")
_NULL_FILL = {"round_numbers": -1}


def slice_rows(a: dict, lo: int, hi: int, rcu: np.ndarray | None = None) -> dict:
    """Rows [lo, hi) of an unpacked shard: views (the offsets rebased, a small copy). `rcu`:
    the response offsets of `a` (_offsets of its response_lengths), when the caller has them."""
    return Slicer(a, rcu)(lo, hi)


class Slicer:
    """Rows [lo, hi) of one unpacked dict, again and again (a rank's micro-batches are runs of
    its gathered rows): which field is sliced how is settled once, not per micro-batch."""

    def __init__(self, a: dict, rcu: np.ndarray | None = None):
        self.a = a
        self.cu = a["cu_seqlens"]
        self.rcu = _offsets(a["response_lengths"], np.int64) if rcu is None else rcu
        self.tokens = [n for n in _TOKEN_FIELDS if a.get(n) is not None]
        self.responses = [n for n in _RESPONSE_FIELDS if a.get(n) is not None]
        self.rows = [n for n, v in a.items()
                     if isinstance(v, (np.ndarray, list)) and n != "cu_seqlens" and n not in _TOKEN_FIELDS
                     and n not in _RESPONSE_FIELDS]
        self.fixed = {n: v for n, v in a.items() if n not in self.rows and n not in ("cu_seqlens", "extras")
                      and n not in self.tokens and n not in self.responses}
        self.extras = a.get("extras") or {}

    def __call__(self, lo: int, hi: int) -> dict:
        a, cu = self.a, self.cu
        out = dict(self.fixed)
        c0, c1 = int(cu[lo]), int(cu[hi])
        out["cu_seqlens"] = cu[lo:hi + 1] if lo == 0 else (cu[lo:hi + 1] - cu[lo]).astype(cu.dtype)
        for n in self.tokens:
            out[n] = a[n][c0:c1]
        r0, r1 = int(self.rcu[lo]), int(self.rcu[hi])
        for n in self.responses:
            out[n] = a[n][r0:r1]
        for n in self.rows:
            out[n] = a[n][lo:hi]
        out["extras"] = {k: None if e is None else e.slice(lo, hi) if isinstance(e, Ragged) else e[lo:hi]
                         for k, e in self.extras.items()}
        return out


def take_ordered(sources: list[dict], which: np.ndarray, local: np.ndarray, empty=np.empty,
                 tokens: bool = True) -> dict:
    """Rows of unpacked shards (unpack()'s dicts) in any order, as one unpacked dict: row j is
    row local[j] of sources[which[j]]. One run of one source's rows is a set of views (no
    copy); else each field is one copy: a fixed-width field one take per source, a per-token
    field one slice copy per run of rows adjacent in their source. A field one source lacks
    (None) and another has is filled: NaN log-probs, the field's null fill (-1, NaN, false), None."""
    which = np.asarray(which, dtype=np.int64)
    local = np.asarray(local, dtype=np.int64)
    n = len(which)
    if not n:
        return slice_rows(sources[0], 0, 0)
    w0 = int(which[0])
    if (which == w0).all() and int(local[-1]) - int(local[0]) + 1 == n and (np.diff(local) == 1).all():
        return slice_rows(sources[w0], int(local[0]), int(local[-1]) + 1)
    picks = [np.flatnonzero(which == s) for s in range(len(sources))]
    used = [s for s, p in enumerate(picks) if len(p)]
    # the sources' rows laid end to end: one take a field (joining a few hundred rows a shard
    # costs less than a take per source)
    counts = [len(a["response_lengths"]) for a in sources]
    glob = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)[which] + local

    def fixed(have: list, fill) -> np.ndarray:
        dtype = next(h.dtype for h in have if h is not None)
        whole = np.concatenate([h if h is not None else np.full(k, fill, dtype) for h, k in zip(have, counts)])
        return np.take(whole.astype(dtype, copy=False), glob, out=empty(n, dtype))

    def listed(have: list) -> list:
        whole = [x for h, k in zip(have, counts) for x in (h if h is not None else [None] * k)]
        return [whole[i] for i in glob.tolist()]

    def spans(values: list, offsets: list, dtype) -> tuple[np.ndarray, np.ndarray]:
        start, lens = np.empty(n, np.int64), np.empty(n, np.int64)
        for s in used:
            p, lp = picks[s], local[picks[s]]
            start[p] = offsets[s][lp]
            lens[p] = offsets[s][lp + 1] - start[p]
        total = int(lens.sum())
        out = empty(total, dtype)
        if not total:
            return out, lens
        # runs: rows adjacent in one source, copied as one slice; all in one concatenate into
        # `out` (a Python loop of slice assignments cost 2-3x as much at ~200 rows a gather)
        cuts = np.flatnonzero((which[1:] != which[:-1]) | (start[1:] != start[:-1] + lens[:-1])) + 1
        firsts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [n]])
        run_start = start[firsts]
        run_len = np.add.reduceat(lens, firsts) if len(firsts) else firsts
        pieces = []
        for src, st, ln in zip(which[firsts].tolist(), run_start.tolist(), run_len.tolist()):
            v = values[src]
            if ln:
                pieces.append(v[st:st + ln] if v is not None else np.full(ln, np.nan, dtype))
        np.concatenate(pieces, out=out)
        return out, lens

    first = sources[used[0]]
    out: dict = {k: v for k, v in first.items() if isinstance(v, int)}  # the step's values
    out["response_lengths"] = fixed([a["response_lengths"] for a in sources], 0)
    out["total_lengths"] = fixed([a["total_lengths"] for a in sources], 0)
    if tokens:
        out["cu_seqlens"] = _offsets(out["total_lengths"], np.int32)
        out["tokens"] = spans([a["tokens"] for a in sources], [a["cu_seqlens"] for a in sources],
                              first["tokens"].dtype)[0]
    rcus = [_offsets(a["response_lengths"], np.int64) for a in sources] if tokens else []
    for name in _RESPONSE_FIELDS if tokens else ():
        have = [a[name] for a in sources]
        if all(have[s] is None for s in used):
            out[name] = None
            continue
        dtype = next(have[s].dtype for s in used if have[s] is not None)
        out[name] = spans(have, rcus, dtype)[0]
    for name, v in first.items():
        if name in out or name == "extras" or (not tokens and (name in _TOKEN_FIELDS or name in _RESPONSE_FIELDS
                                                                or name == "cu_seqlens")):
            continue
        have = [a[name] for a in sources]
        live = [have[s] for s in used]
        if isinstance(v, (np.ndarray, type(None))) and any(isinstance(h, np.ndarray) for h in live):
            fill = _NULL_FILL.get(name)
            if fill is None and any(h is None for h in live):
                out[name] = None  # (the --schedule slime ids: set on every shard of a step or none)
                continue
            out[name] = fixed(have, fill)
        elif all(h is None for h in live):
            out[name] = None
        else:  # a list (source_names)
            out[name] = listed(have)
    extras = {}
    for name in first["extras"]:
        have = [a["extras"].get(name) for a in sources]
        live = [have[s] for s in used if have[s] is not None]
        if not live:
            extras[name] = None
        elif isinstance(live[0], Ragged):
            values, lens = spans([None if h is None else h.values for h in have],
                                 [np.zeros(len(a["response_lengths"]) + 1, np.int64) if h is None else h.offsets
                                  for h, a in zip(have, sources)], live[0].values.dtype)
            extras[name] = Ragged(values, _offsets(lens, np.int64))
        elif isinstance(live[0], np.ndarray):
            k = live[0].dtype.kind
            extras[name] = fixed(have, np.nan if k == "f" else (False if k == "b" else -1))
        else:
            extras[name] = listed(have)
    out["extras"] = extras
    return out


# A micro-batch's block: its arrays one after another, in the order the batch declares them
# (output/batches.ARRAY_FIELDS, which is PackedBatch's), each at a multiple of BLOCK_ALIGN
# bytes from the block's start. One buffer a batch: one pin, one host-to-device copy.
BLOCK_ALIGN = 64


def block_layout(items: list[tuple[str, int]]) -> tuple[dict[str, tuple[int, int]], int]:
    """(name -> (offset, bytes), total bytes) of arrays laid out one after another in the order
    given, each at a multiple of BLOCK_ALIGN."""
    layout, off = {}, 0
    for name, nbytes in items:
        off = -(-off // BLOCK_ALIGN) * BLOCK_ALIGN
        layout[name] = (off, nbytes)
        off += nbytes
    return layout, off


def aligned_empty(n: int, dtype) -> np.ndarray:
    """An uninitialised array of `n` items of `dtype` whose first byte is at a multiple of
    BLOCK_ALIGN (fresh memory: a batch handed out owns its block)."""
    dtype = np.dtype(dtype)
    size = n * dtype.itemsize
    raw = np.empty(size + BLOCK_ALIGN, np.uint8)
    at = -raw.ctypes.data % BLOCK_ALIGN
    return raw[at:at + size].view(dtype)


def take_blocks(sources: list[dict], which: np.ndarray, local: np.ndarray, sizes: list[int], order: tuple[str, ...],
                empty=aligned_empty, drop: tuple[str, ...] = ()) -> list[dict]:
    """Rows of unpacked shards (as take_ordered: row j is row local[j] of sources[which[j]]),
    cut into consecutive micro-batches of `sizes` rows, each micro-batch's arrays laid out in
    one block (block_layout over the array fields in `order`; the block as "_block", gaps
    zeroed) in one allocation of `empty`. Fields named in `drop` are left out, None (set them after). Extras
    stay outside the blocks (slices of one copy each)."""
    which = np.asarray(which, dtype=np.int64)
    local = np.asarray(local, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    n, m = len(which), len(sizes)
    if not n:
        return [dict(slice_rows(sources[0], 0, 0), _block=None) for _ in range(m)]
    base = take_ordered(sources, which, local, np.empty, tokens=False)  # per-sample fields: small
    ends = np.cumsum(sizes)
    firsts = ends - sizes
    mb_of = np.repeat(np.arange(m), sizes)
    picks = [np.flatnonzero(which == s) for s in range(len(sources))]

    def row_spans(offsets: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        start, lens = np.empty(n, np.int64), np.empty(n, np.int64)
        for s, p in enumerate(picks):
            if len(p):
                lp = local[p]
                start[p] = offsets[s][lp]
                lens[p] = offsets[s][lp + 1] - start[p]
        return start, lens

    tok_start, tok_len = row_spans([a["cu_seqlens"] for a in sources])
    res_start, res_len = row_spans([_offsets(a["response_lengths"], np.int64) for a in sources])
    ctok = np.concatenate([[0], np.cumsum(tok_len)])
    cres = np.concatenate([[0], np.cumsum(res_len)])
    tok_mb, res_mb = ctok[ends] - ctok[firsts], cres[ends] - cres[firsts]

    # the block's fields and their bytes per micro-batch
    ragged = {"tokens": ([a["tokens"] for a in sources], tok_start, tok_len, tok_mb)}
    for name in _RESPONSE_FIELDS:
        have = [a[name] for a in sources]
        if name not in drop and any(have[s] is not None for s in range(len(sources)) if len(picks[s])):
            ragged[name] = (have, res_start, res_len, res_mb)
    dtypes, counts = {}, {}
    for name in order:
        if name in drop:
            continue
        if name in ragged:
            have = ragged[name][0]
            dtypes[name] = next(have[s].dtype for s in range(len(sources)) if len(picks[s]) and have[s] is not None)
            counts[name] = ragged[name][3]
        elif name == "cu_seqlens":
            dtypes[name], counts[name] = np.dtype(np.int32), sizes + 1
        elif isinstance(base.get(name), np.ndarray):
            dtypes[name], counts[name] = base[name].dtype, sizes
    names = list(dtypes)
    nbytes = np.stack([counts[k] * dtypes[k].itemsize for k in names], axis=1)  # [m, fields]
    padded = -(-nbytes // BLOCK_ALIGN) * BLOCK_ALIGN
    field_off = np.cumsum(padded, axis=1) - padded  # each field's offset in its block (block_layout's)
    block_len = field_off[:, -1] + nbytes[:, -1]
    block_pad = -(-block_len // BLOCK_ALIGN) * BLOCK_ALIGN
    block_off = np.cumsum(block_pad) - block_pad
    total = int(block_off[-1] + block_pad[-1])
    mem = empty(total, np.uint8)
    # the gaps zeroed: each gap (after a field up to the next, after a block up to the next)
    # lies in the last 64 bytes of its field's padded room, zeroed before the data is written
    line = (block_off[:, None] + field_off + padded)[padded > 0] - BLOCK_ALIGN
    mem.view(np.uint64)[((line // 8)[:, None] + np.arange(BLOCK_ALIGN // 8)).reshape(-1)] = 0
    at = {k: block_off + field_off[:, i] for i, k in enumerate(names)}  # byte offset of each field, per block
    row_in_mb = np.arange(n) - firsts[mb_of]
    for k in names:  # per-sample fields: one scatter each
        if k in ragged or k == "cu_seqlens":
            continue
        item = dtypes[k].itemsize
        mem.view(dtypes[k])[at[k][mb_of] // item + row_in_mb] = base[k]
    cu = mem.view(np.int32)  # cu_seqlens: 0, then each sample's end within its micro-batch
    cu[at["cu_seqlens"] // 4] = 0
    cu[at["cu_seqlens"][mb_of] // 4 + 1 + row_in_mb] = ctok[1:] - ctok[firsts][mb_of]
    # per-token fields: runs of rows adjacent in one source within one micro-batch, one slice
    # each, a micro-batch's runs written by one concatenate
    cut = np.flatnonzero((which[1:] != which[:-1]) | (local[1:] != local[:-1] + 1) | (mb_of[1:] != mb_of[:-1])) + 1
    run_first = np.concatenate([[0], cut])
    run_last = np.concatenate([cut, [n]]) - 1
    run_src = which[run_first].tolist()
    run_mb = mb_of[run_first]
    run_bounds = np.searchsorted(run_mb, np.arange(m + 1)).tolist()
    for k, (have, start, lens, per_mb) in ragged.items():
        dt = dtypes[k]
        lo = start[run_first].tolist()
        hi = (start[run_last] + lens[run_last]).tolist()
        offs, want = at[k].tolist(), per_mb.tolist()
        for j in range(m):
            if not want[j]:
                continue
            dst = mem[offs[j]:offs[j] + want[j] * dt.itemsize].view(dt)
            pieces = [have[s][a:b] if have[s] is not None else np.full(b - a, np.nan, dt)
                      for s, a, b in zip(run_src[run_bounds[j]:run_bounds[j + 1]], lo[run_bounds[j]:run_bounds[j + 1]],
                                         hi[run_bounds[j]:run_bounds[j + 1]])]
            np.concatenate(pieces, out=dst)
    # the micro-batches: views of their blocks, and the rest sliced
    out = []
    typed = {k: mem.view(dtypes[k]) for k in names}
    offs = {k: (at[k] // dtypes[k].itemsize).tolist() for k in names}  # in items of the field's type
    counts_l = {k: counts[k].tolist() for k in names}
    boff, blen = block_off.tolist(), block_len.tolist()
    rest = {k: None if k in drop else v for k, v in base.items() if k not in dtypes and k != "extras"}
    extras = base.get("extras") or {}
    for j, (a, b) in enumerate(zip(firsts.tolist(), ends.tolist())):
        d = {k: (v[a:b] if isinstance(v, (np.ndarray, list)) else v) for k, v in rest.items()}
        for k in names:
            o = offs[k][j]
            d[k] = typed[k][o:o + counts_l[k][j]]
        d["extras"] = {k: None if e is None else e.slice(a, b) if isinstance(e, Ragged) else e[a:b]
                       for k, e in extras.items()}
        d["_block"] = mem[boff[j]:boff[j] + blen[j]]
        for k in (*_RESPONSE_FIELDS, *drop):
            d.setdefault(k, None)
        out.append(d)
    return out


def _offsets(lengths: np.ndarray, dtype) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=dtype)
    np.cumsum(lengths, out=out[1:])
    return out

