"""The slime schedule (--schedule slime): a step's record adds up, and every shard's
rollout_position, optimizer_step and micro_batch columns follow it (none under balanced)."""
from __future__ import annotations

from ..core.layout import MANIFEST
from .common import Report
from .rows import StepState


def check_record(label: str, s: dict, opts: dict, rep: Report) -> None:
    """A --schedule slime step's record agrees with itself and with the step."""
    sc = s["schedule"]
    try:
        nmb, gbs, dropped = sc["num_microbatches"], sc["global_batch_sizes"], sc["dropped"]
        problems = []
        if len(nmb) != len(gbs) or len(nmb) != sc["optimizer_steps"]:
            problems.append(f"{len(nmb)} num_microbatches, {len(gbs)} global_batch_sizes, {sc['optimizer_steps']} optimizer steps")
        if any(n < 1 for n in nmb):
            problems.append(f"num_microbatches {nmb} holds a step without micro-batches")
        if sum(gbs) + len(dropped) != sc["rollouts"]:
            problems.append(f"global_batch_sizes {gbs} + {len(dropped)} dropped rollouts != the step's {sc['rollouts']} rollouts")
        if sum(d["samples"] for d in dropped) != s.get("dropped", 0) or any(len(d["positions"]) != d["samples"] for d in dropped):
            problems.append(f"dropped rollouts hold {sum(d['samples'] for d in dropped)} samples, the step records {s.get('dropped', 0)}")
        if opts.get("schedule") != "slime":
            problems.append("a schedule record, but options.schedule is not slime")
    except (KeyError, TypeError) as e:
        problems = [f"malformed schedule record ({e!r})"]
    for p in problems:
        rep.fail(MANIFEST, "schedule", f"{label}: {p}")


def check_columns(label: str, s: dict, st: StepState, paths: list[str], rep: Report) -> None:
    """The schedule columns against the step's record (or their absence under balanced)."""
    import numpy as np

    sc = s.get("schedule")
    if not isinstance(sc, dict):
        for shard, *_, nulls in st.sched:
            if nulls != 2 * len(_[0]):
                rep.fail(paths[shard], "schedule", f"{label}: schedule columns set under the balanced layout")
                return
        return
    if not st.complete:
        return
    nmb = sc.get("num_microbatches") or []
    positions, step_of = [], {}
    for shard, pos, opt, mb, ids, nulls in st.sched:
        if nulls:
            rep.fail(paths[shard], "schedule", f"{label}: {nulls} null schedule value(s) in a --schedule slime shard")
            return
        positions.append(pos)
        if len(opt) and (np.any(np.diff(opt) < 0) or opt.min() < 0 or opt.max() >= len(nmb)):
            rep.fail(paths[shard], "schedule", f"{label}: optimizer_step values out of order or outside 0..{len(nmb) - 1}")
            continue
        for k in range(len(nmb)):
            m = mb[opt == k]
            runs = m[np.r_[True, m[1:] != m[:-1]]] if len(m) else m
            if not np.array_equal(runs, np.arange(nmb[k])):
                rep.fail(paths[shard], "schedule", f"{label}, optimizer step {k}: micro-batches {runs.tolist()[:8]}, "
                         f"expected 0..{nmb[k] - 1} in order (num_microbatches {nmb[k]})")
        for rid, o in zip(ids.tolist(), opt.tolist()):
            if step_of.setdefault(rid, o) != o:
                rep.fail(paths[shard], "schedule", f"{label}: rollout {rid} spans optimizer steps {step_of[rid]} and {o}")
                step_of[rid] = o
    dropped = [p for d in sc.get("dropped", []) for p in d.get("positions", [])]
    allpos = np.sort(np.concatenate(positions + [np.asarray(dropped, dtype=np.int64)]))
    if not np.array_equal(allpos, np.arange(len(allpos))):
        rep.fail(MANIFEST, "schedule", f"{label}: rollout positions of the shards and dropped rollouts are not 0..{len(allpos) - 1} once each")
