"""The library side of `rollout-cli inspect`, as plain data: `inspect_paths` (summary, groups,
anomalies), `show_rollout` (one rollout's samples), `iter_steps` (per-step sample rows, e.g.
to compare with a conversion)."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from .aggregate import Totals, check_group_args, groups, summary
from .anomalies import Anomalies
from .options import InspectOptions
from .rows import StepData
from .show import show_rollout, show_rollouts
from .sources import Sources, iter_step_data, resolve

__all__ = ["InspectOptions", "StepData", "inspect_paths", "iter_steps", "show_rollout", "show_rollouts"]


def inspect_paths(
    paths: list[str],
    group_by: str | None = None,
    options: InspectOptions | None = None,
    *,
    sort: str | None = None,
    limit: int | None = None,
    each_step: Callable[[StepData], None] | None = None,
) -> dict:
    """`{"summary": {...}, "groups": [...], "anomalies": [...]}` for dumps or converted output.
    `each_step`, when given, sees every step's rows as they are aggregated (one read of the input
    for callers that need the rows too).

    Raises RolloutCliError (UsageError for bad arguments, InvalidInputError for unreadable input).
    """
    opts = options or InspectOptions()
    opts.check()
    check_group_args(group_by, sort, limit)  # before reading anything
    src = resolve(list(paths), opts)
    anomalies = Anomalies(opts.max_anomalies)
    notes = list(src.notes) + _other_split_notes(src, opts)
    totals = Totals()
    for sd in iter_step_data(src, opts, anomalies, notes):
        totals.add(sd)
        if each_step is not None:
            each_step(sd)
    table = totals.table()
    s = summary(totals, table, kind=src.kind, split=opts.split, files=_files(src, totals, opts.split),
                anomaly_counts=anomalies.count_dict(), options=_options(src, opts, notes), group_by=group_by, notes=notes)
    rows: list[dict] = []
    if group_by:
        rows, s["groups_total"] = groups(table, group_by, sort, limit)
    return {"summary": s, "groups": rows, "anomalies": anomalies.items}


def _other_split_notes(src: Sources, opts: InspectOptions) -> list[str]:
    if not src.other_split:
        return []
    other = "eval" if opts.split == "train" else "train"
    what = "step(s)" if src.kind == "converted" else "input file(s)"
    return [f"{src.other_split} {other} {what} not shown (--split {other} shows them)"]


def _files(src: Sources, totals: Totals, split: str) -> int:
    """Dumps: the steps read (one file each); converted: the shards of the steps shown."""
    if src.kind != "converted":
        return len(totals.per_step)
    shown = {p["step"] for p in totals.per_step}
    return sum(len(s.get("shards", [])) for _, m in src.outputs for s in m["steps"] if s["split"] == split and s["step"] in shown)


def _options(src: Sources, opts: InspectOptions, notes: list[str]) -> Any:
    """`summary.options`: the id/reward options used (dumps), or each manifest's options."""
    if src.kind != "converted":
        return opts.id_reward_options()
    ms = [m["options"] for _, m in src.outputs]
    if opts.id_reward_options() != InspectOptions().id_reward_options():
        notes.append("id and reward options apply to dumps only; converted output has the ids and rewards of its manifest's options")
    return ms[0] if len(ms) == 1 else ms


def iter_steps(paths: list[str], options: InspectOptions | None = None) -> Iterator[StepData]:
    """Per-step sample summaries (ROW_SCHEMA), in convert's order: what convert writes, without tokens."""
    opts = options or InspectOptions()
    opts.check()
    src = resolve(list(paths), opts)
    yield from iter_step_data(src, opts, Anomalies(opts.max_anomalies), [])
