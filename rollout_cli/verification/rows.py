"""Row invariants of a shard, one row group at a time: non-null columns, the step column, the
lengths of tokens and loss_mask, loss_mask values, remove_sample, status; and each row group's
contribution to the step's per-rollout and per-group summary, which the step checks read."""
from __future__ import annotations

from ..pipeline.fields import STEP_FIELDS
from .common import EXAMPLES


class StepState:
    """Per-rollout summary of one step: shard, mask totals, rollout_mask_sum range."""

    def __init__(self):
        self.rollouts: dict[int, list] = {}  # id -> [shard, mask_total, rms_min, rms_max]
        self.complete = True  # every shard's content was read
        self.split: list[tuple[int, int, int]] = []  # (id, shard a, shard b)
        self.mask_total = 0
        self.rows = 0
        self.row_problems = False  # a row invariant failed in one of its shards
        # group_index -> [shard, mask_total, {rollout ids}, gms_min, gms_max, gr_min, gr_max]
        self.groups: dict[int, list] = {}
        self.grouped_rows = 0  # rows with a group_index
        self.unit_rewards: dict[tuple[int, int], list] = {}  # (group_index, rollout id) -> [shard, min, max]
        self.step_values: list[tuple[int, str, int, int]] = []  # (shard, column, min, max) per row group
        self.rollout_baseline = False
        self.sched: list[tuple] = []  # (shard, positions, optimizer steps, micro-batches, ids, nulls)


class ShardTally:
    """One shard's rows, tokens and rollout ids, and its row-invariant failures (a count and
    a few examples each)."""

    def __init__(self):
        self.rows = 0
        self.row_problems = False  # a row invariant failed in one of its shards
        self.tokens = 0
        self.ids: set = set()
        self.problems: dict[str, list] = {}  # invariant -> [count, examples]

    def bad(self, invariant: str, rows, describe) -> None:
        import numpy as np

        idx = np.flatnonzero(rows)
        if not len(idx):
            return
        entry = self.problems.setdefault(invariant, [0, []])
        entry[0] += len(idx)
        for i in idx[: max(0, EXAMPLES - len(entry[1]))].tolist():
            entry[1].append(describe(i))


def _list_totals(arr):
    """(lengths, per-row value sums, min value, max value) of a list<int> array without nulls."""
    import numpy as np

    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    lo, hi = int(offsets[0]), int(offsets[-1])
    vals = values[lo:hi]  # summed into int64 as they are: no widened copy
    cs = np.zeros(len(vals) + 1, dtype=np.int64)
    np.cumsum(vals, dtype=np.int64, out=cs[1:])
    rel = offsets - lo
    sums = cs[rel[1:]] - cs[rel[:-1]]
    vmin = int(vals.min()) if len(vals) else 0
    vmax = int(vals.max()) if len(vals) else 0
    return np.diff(offsets).astype(np.int64), sums, vmin, vmax


def check_rows(t, first_row: int, step: int, shard_no: int, tally: ShardTally, st: StepState) -> None:
    """Row invariants of one row group, and its contribution to the step summary."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..core.schema import CORE_FIELDS, STATUSES

    n = t.num_rows
    if not n:
        return

    def col(name):
        c = t.column(name)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c

    for f in CORE_FIELDS:
        if not f.nullable and f.name in t.column_names and t.column(f.name).null_count:
            c = col(f.name)
            tally.bad("not_null", c.is_null().to_numpy(zero_copy_only=False), lambda i, f=f: f"row {first_row + i}: {f.name} is null")
    if "not_null" in tally.problems:
        return  # the arithmetic below needs values
    steps = col("step").to_numpy()
    tally.bad("step_column", steps != step, lambda i: f"row {first_row + i}: step {int(steps[i])}, filed under step {step}")
    tok_len = np.diff(col("tokens").offsets.to_numpy()).astype(np.int64)  # lengths: the values are not summed
    total_length = col("total_length").to_numpy().astype(np.int64)
    tally.bad("total_length", tok_len != total_length, lambda i: f"row {first_row + i}: total_length {int(total_length[i])} != len(tokens) {int(tok_len[i])}")
    mask_len, mask_tot, mmin, mmax = _list_totals(col("loss_mask"))
    resp = col("response_length").to_numpy().astype(np.int64)
    tally.bad("loss_mask_length", mask_len != resp, lambda i: f"row {first_row + i}: len(loss_mask) {int(mask_len[i])} != response_length {int(resp[i])}")
    if mmin < 0 or mmax > 1:
        lens = mask_len
        lm = col("loss_mask")
        vals = lm.values.to_numpy(zero_copy_only=False)[int(lm.offsets[0].as_py()):int(lm.offsets[-1].as_py())]
        bad_rows = np.zeros(n, dtype=bool)
        bad_at = np.flatnonzero(vals > 1)
        bad_rows[np.searchsorted(np.cumsum(lens), bad_at, side="right")] = True
        tally.bad("loss_mask_values", bad_rows, lambda i: f"row {first_row + i}: loss_mask holds values other than 0/1")
    if "remove_sample" in t.column_names:  # schema version 3 on
        removed = col("remove_sample").to_numpy(zero_copy_only=False)
        tally.bad("remove_sample", removed & (mask_tot != 0),
                  lambda i: f"row {first_row + i}: remove_sample is true but its loss_mask sums to {int(mask_tot[i])} (expected all zeros)")
    status = col("status")
    known = pc.is_in(status, value_set=pa.array(STATUSES)).to_numpy(zero_copy_only=False)
    status_py = None

    def st_of(i):
        nonlocal status_py
        if status_py is None:
            status_py = status.to_pylist()
        return status_py[i]

    tally.bad("status", ~known, lambda i: f"row {first_row + i}: status {st_of(i)!r}")
    trunc = col("truncated").to_numpy(zero_copy_only=False)
    is_trunc = pc.equal(status, "truncated").to_numpy(zero_copy_only=False)
    tally.bad("status", trunc != is_trunc, lambda i: f"row {first_row + i}: truncated {bool(trunc[i])} but status {st_of(i)!r}")
    tally.rows += n
    tally.tokens += int(total_length.sum())
    ids = col("rollout_id").to_numpy()
    if "micro_batch" in t.column_names:
        cols = [col(c) for c in ("optimizer_step", "micro_batch")]
        nulls = sum(c.null_count for c in cols)
        vals = [col("rollout_position").to_numpy().astype(np.int64)] + [c.fill_null(-1).to_numpy().astype(np.int64) for c in cols]
        st.sched.append((shard_no, *vals, ids, nulls))
    rms = col("rollout_mask_sum").to_numpy()
    order = np.argsort(ids, kind="stable")
    sids = ids[order]
    starts = np.flatnonzero(np.r_[True, sids[1:] != sids[:-1]])
    uniq = sids[starts]
    tot = np.add.reduceat(mask_tot[order], starts)
    rmin = np.minimum.reduceat(rms[order], starts)
    rmax = np.maximum.reduceat(rms[order], starts)
    st.mask_total += int(mask_tot.sum())
    st.rows += n
    for name in STEP_FIELDS:
        v = col(name).to_numpy()
        st.step_values.append((shard_no, name, int(v.min()), int(v.max())))
    _group_summary(col, ids, mask_tot, shard_no, st)
    for rid, a, lo, hi in zip(uniq.tolist(), tot.tolist(), rmin.tolist(), rmax.tolist()):
        tally.ids.add(rid)
        e = st.rollouts.get(rid)
        if e is None:
            st.rollouts[rid] = [shard_no, a, lo, hi]
        else:
            if e[0] != shard_no:
                st.split.append((rid, e[0], shard_no))
            e[1] += a
            e[2] = min(e[2], lo)
            e[3] = max(e[3], hi)


def _group_summary(col, ids, mask_tot, shard_no: int, st: StepState) -> None:
    """One row group's contribution to the per-prompt-group summary (rows with a group_index)."""
    import numpy as np

    gcol = col("group_index")
    has = gcol.is_valid().to_numpy(zero_copy_only=False)
    if not has.any():
        return
    gi = (gcol.fill_null(0) if gcol.null_count else gcol).to_numpy()[has]
    st.grouped_rows += int(has.sum())
    rid, mt = ids[has], mask_tot[has]
    gms, gro = col("group_mask_sum").to_numpy()[has], col("group_rollouts").to_numpy()[has]
    order = np.argsort(gi, kind="stable")
    sg = gi[order]
    starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]])
    ends = np.r_[starts[1:], len(sg)]
    sums = np.add.reduceat(mt[order], starts)
    red = [f.reduceat(a[order], starts) for a in (gms, gro) for f in (np.minimum, np.maximum)]
    for k, g in enumerate(sg[starts].tolist()):
        e = st.groups.get(g)
        members = set(rid[order[starts[k]:ends[k]]].tolist())
        lo_s, hi_s, lo_r, hi_r = (int(r[k]) for r in red)
        if e is None:
            st.groups[g] = [shard_no, int(sums[k]), members, lo_s, hi_s, lo_r, hi_r]
        else:
            e[1] += int(sums[k])
            e[2] |= members
            e[3], e[4], e[5], e[6] = min(e[3], lo_s), max(e[4], hi_s), min(e[5], lo_r), max(e[6], hi_r)
    if st.rollout_baseline:
        rw = col("reward").to_numpy()[has]
        for g, r, w in zip(gi.tolist(), rid.tolist(), rw.tolist()):
            u = st.unit_rewards.get((g, r))
            if u is None:
                st.unit_rewards[(g, r)] = [shard_no, w, w]
            elif w != u[1] or w != u[2]:
                u[1], u[2] = min(u[1], w), max(u[2], w)
