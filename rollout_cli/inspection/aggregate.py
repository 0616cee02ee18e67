"""Aggregations over the per-sample rows of every step: the per-step table, the summary
(counts, tokens, histograms, statuses, reward statistics), and group rows (pyarrow group_by)
with their sort and limit."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.errors import UsageError
from ..core.schema import STATUSES
from .anomalies import LEVELS, group_rollouts
from .lineage import step_lineage
from .rows import ROW_SCHEMA, StepData

GROUP_BY = ("rollout_id", "group_index", "step", "status", "source_name")
# group-row columns --sort accepts (besides "key")
SORT_COLUMNS = (
    "samples", "rollouts", "prompt_groups", "tokens", "prompt_tokens", "response_tokens", "mask_sum",
    "rollout_mask_sum", "reward_mean", "reward_min", "reward_max", "raw_reward_mean", "raw_reward_min",
    "raw_reward_max", "truncated",
)

# The numbers of `summary` (by dotted path) and of `summary.per_step[]` that a gate can name
# (`--fail-on`, gates/figures.py), each with what it counts. summary() and _step_summary() below
# compute them; a test holds these tables to what they return.
_STATS = {"count": "how many are known", "mean": "mean", "std": "standard deviation", "min": "minimum",
          "max": "maximum"}
RUN_FIGURES = {
    "files": "dump files read, or output shards",
    "steps": "steps shown",
    "samples": "samples read, valid or not",
    "rows": "samples kept (what convert writes)",
    "rejected": "samples rejected",
    "rollouts": "distinct (step, rollout_id)",
    "prompt_groups": "distinct (step, prompt group)",
    "tokens.prompt": "prompt tokens",
    "tokens.response": "response tokens",
    "tokens.total": "tokens",
    "tokens.mask_sum": "tokens trained on (loss-mask sum)",
    "truncated": "truncated samples",
    "truncation_rate": "truncated samples over rows",
    "removed_samples": "samples remove_sample leaves out of the loss",
    "rewards_not_recorded": "samples whose reward the framework did not record",
    "multi_version_samples": "samples whose weight versions span more than one",
    "not_token_exact": "rows tokenized from text by --tokenizer",
} | {f"rewards.{col}.{k}": f"{col}: {text}" for col in ("raw_reward", "reward") for k, text in _STATS.items()} | {
    f"anomaly_levels.{lv}": f"anomalies of level {lv}, every kind" for lv in LEVELS}
STEP_FIGURES = {
    "samples": "samples read, valid or not",
    "rows": "samples kept",
    "rejected": "samples rejected",
    "rollouts": "distinct rollout ids",
    "prompt_groups": "prompt groups",
    "tokens": "tokens",
    "mask_sum": "tokens trained on (loss-mask sum)",
    "response_length_mean": "mean response length",
    "raw_reward_mean": "mean raw reward",
    "reward_mean": "mean normalised reward",
    "reward_std": "std of the normalised reward",
    "truncation_rate": "truncated samples over rows",
    "removed_samples": "samples remove_sample leaves out of the loss",
    "zero_variance_groups": "groups whose samples share one reward",
    "zero_variance_share": "zero-variance groups over prompt groups",
    "rewards_not_recorded": "samples whose reward the framework did not record",
    "multi_version_samples": "samples whose weight versions span more than one",
    "not_token_exact": "rows tokenized from text by --tokenizer",
}


def r6(x: Any) -> float | None:
    """A float rounded to 6 decimals; None for None and NaN (unknown)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else round(x, 6) + 0.0  # + 0.0: no -0.0


def _stats(values: np.ndarray) -> dict:
    v = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if not len(v):
        return {"count": 0, "mean": None, "std": None, "min": None, "max": None}
    v = v.astype(np.float64)
    return {"count": int(len(v)), "mean": r6(v.mean()), "std": r6(v.std()), "min": r6(v.min()), "max": r6(v.max())}


def _hist(c: Counter) -> dict:
    return {int(k): int(v) for k, v in sorted(c.items())}


def check_group_args(group_by: str | None, sort: str | None, limit: int | None) -> None:
    """--group-by, --sort and --limit, checked before anything is read."""
    if group_by is not None and group_by not in GROUP_BY:
        raise UsageError(f"--group-by: expected one of {', '.join(GROUP_BY)}")
    if limit is not None and limit < 0:
        raise UsageError("--limit: expected 0 or more")
    _sort_spec(sort, group_by or "rollout_id")


class Totals:
    """The steps seen so far: their rows, per-step summaries and size histograms."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.per_step: list[dict] = []
        self.samples_per_rollout: Counter = Counter()
        self.group_sizes: Counter = Counter()
        self.samples = 0
        self.rejected = 0

    def add(self, sd: StepData) -> None:
        t = sd.rows
        self.samples += sd.samples
        self.rejected += sd.rejected
        rid = t.column("rollout_id").to_numpy()
        pg = t.column("pgroup").to_numpy()
        rcounts = np.unique(rid, return_counts=True)[1] if len(rid) else np.zeros(0, np.int64)
        gcounts = group_rollouts(pg, rid)  # a group's size in rollouts: a compact rollout is one member
        self.samples_per_rollout.update(rcounts.tolist())
        self.group_sizes.update(gcounts.tolist())
        self.per_step.append(_step_summary(sd, len(rcounts), len(gcounts)))
        self.tables.append(t)

    def table(self) -> pa.Table:
        return pa.concat_tables(self.tables) if self.tables else ROW_SCHEMA.empty_table()


def _step_summary(sd: StepData, rollouts: int, prompt_groups: int) -> dict:
    t = sd.rows
    n = t.num_rows
    reward = t.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)
    raw = t.column("raw_reward").to_numpy(zero_copy_only=False).astype(np.float64)  # NaN: not recorded
    known = n and not np.isnan(reward).all()
    raw_known = n and not np.isnan(raw).all()
    return {
        "split": sd.split,
        "step": sd.step,
        "source": sd.source,
        "samples": sd.samples,
        "rows": n,
        "rejected": sd.rejected,
        "rollouts": int(rollouts),
        "prompt_groups": int(prompt_groups),
        "tokens": int(pc.sum(t.column("total_length")).as_py() or 0),
        "mask_sum": int(pc.sum(t.column("mask_sum")).as_py() or 0),
        "response_length_mean": r6(t.column("response_length").to_numpy().mean()) if n else None,
        "raw_reward_mean": r6(np.nanmean(raw)) if raw_known else None,
        "reward_mean": r6(np.nanmean(reward)) if known else None,
        "reward_std": r6(np.nanstd(reward)) if known else None,
        "truncation_rate": r6(t.column("truncated").to_numpy(zero_copy_only=False).mean()) if n else None,
        "removed_samples": int(pc.sum(pc.cast(pc.fill_null(t.column("remove_sample"), False), pa.int64())).as_py() or 0),
        "zero_variance_groups": sd.zero_variance_groups,
        "zero_variance_share": r6(sd.zero_variance_groups / prompt_groups) if prompt_groups else None,
        "not_token_exact": sd.not_token_exact,
        **step_lineage(t),
        # a vision-language step's raw images and processor patches (only where it has any)
        **({"images": sd.images, "patches": sd.patches} if sd.images or sd.patches else {}),
    }


def summary(totals: Totals, table: pa.Table, *, kind: str, split: str, files: int, anomaly_counts: dict, anomaly_levels: dict,
            options: Any, group_by: str | None, notes: list[str]) -> dict:
    """The `summary` object of `inspect --json` (docs/inspect.md); groups_total filled in later."""
    n = table.num_rows
    per_step = totals.per_step
    total = int(pc.sum(table.column("total_length")).as_py() or 0)
    resp = int(pc.sum(table.column("response_length")).as_py() or 0)
    status_counts = Counter(table.column("status").to_pylist()) if n else Counter()
    truncated = int(pc.sum(pc.cast(table.column("truncated"), pa.int64())).as_py() or 0)
    return {
        "input": kind,
        "split": split,
        "files": files,
        "steps": len(per_step),
        "samples": totals.samples,
        "rows": n,
        "rejected": totals.rejected,
        "rollouts": sum(p["rollouts"] for p in per_step),
        "prompt_groups": sum(p["prompt_groups"] for p in per_step),
        "tokens": {"prompt": total - resp, "response": resp, "total": total,
                   "mask_sum": int(pc.sum(table.column("mask_sum")).as_py() or 0)},
        "samples_per_rollout": _hist(totals.samples_per_rollout),
        "group_sizes": _hist(totals.group_sizes),
        "status": {s: status_counts[s] for s in STATUSES if status_counts[s]}
        | {s: c for s, c in sorted(status_counts.items()) if s not in STATUSES},
        "truncated": truncated,
        "truncation_rate": r6(truncated / n) if n else None,
        "removed_samples": sum(p["removed_samples"] for p in per_step),
        "rewards_not_recorded": sum(p["rewards_not_recorded"] for p in per_step),
        "multi_version_samples": sum(p["multi_version_samples"] for p in per_step),
        "not_token_exact": sum(p["not_token_exact"] for p in per_step),
        "rewards": {
            "raw_reward": _stats(table.column("raw_reward").to_numpy(zero_copy_only=False).astype(np.float64)),
            "reward": _stats(table.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)),
        },
        "per_step": per_step,
        "anomaly_counts": anomaly_counts,
        "anomaly_levels": anomaly_levels,
        "options": options,
        "group_by": group_by,
        "groups_total": 0,
        "notes": notes,
    }


_AGGREGATES = [
    ("step", "count", "samples"),
    ("_rkey", "count_distinct", "rollouts"),
    ("_gkey", "count_distinct", "prompt_groups"),
    ("total_length", "sum", "tokens"),
    ("prompt_tokens", "sum", "prompt_tokens"),
    ("response_length", "sum", "response_tokens"),
    ("mask_sum", "sum", "mask_sum"),
    ("rollout_mask_sum", "max", "rollout_mask_sum"),
    ("_reward64", "mean", "reward_mean"),
    ("_reward64", "min", "reward_min"),
    ("_reward64", "max", "reward_max"),
    ("raw_reward", "mean", "raw_reward_mean"),
    ("raw_reward", "min", "raw_reward_min"),
    ("raw_reward", "max", "raw_reward_max"),
    ("_trunc", "sum", "truncated"),
]


PER_STEP = ("rollout_id", "group_index")  # ids that are unique within a step only: grouped per (step, id)


def _group_keys(group_by: str) -> list[str]:
    return ["step", group_by] if group_by in PER_STEP else [group_by]


def _with_group_columns(table: pa.Table) -> pa.Table:
    """The row table plus the columns the group aggregates read."""
    n = table.num_rows
    # distinct rollouts and prompt groups, globally: per (step, id) serials
    step = table.column("step").to_numpy()
    rid = table.column("rollout_id").to_numpy()
    pg = table.column("pgroup").to_numpy()
    rkey = np.unique(np.stack([step, rid], axis=1), axis=0, return_inverse=True)[1].reshape(-1) if n else np.zeros(0, np.int64)
    gkey = np.unique(np.stack([step, pg], axis=1), axis=0, return_inverse=True)[1].reshape(-1) if n else np.zeros(0, np.int64)
    t = table.append_column("_rkey", pa.array(rkey, pa.int64())).append_column("_gkey", pa.array(gkey, pa.int64()))
    t = t.append_column("prompt_tokens", pc.subtract(t.column("total_length"), t.column("response_length")))
    t = t.append_column("_reward64", pc.cast(t.column("reward"), pa.float64()))
    status = t.column("status")
    for s in STATUSES:
        t = t.append_column(f"_n_{s}", pc.cast(pc.equal(status, s), pa.int64()))
    other = pc.invert(pc.is_in(status, value_set=pa.array(sorted(STATUSES))))
    t = t.append_column("_n_other", pc.cast(other, pa.int64()))
    return t.append_column("_trunc", pc.cast(t.column("truncated"), pa.int64()))


def _group_rows(table: pa.Table, group_by: str) -> pa.Table:
    """One row per group (pyarrow group_by): counts, token sums, reward mean/min/max, statuses."""
    aggs = [(c, f) for c, f, _ in _AGGREGATES] + [(f"_n_{s}", "sum") for s in STATUSES] + [("_n_other", "sum")]
    if group_by == "rollout_id":
        aggs.append(("group_index", "distinct"))
    g = _with_group_columns(table).group_by(_group_keys(group_by), use_threads=False).aggregate(aggs)
    rename = {f"{c}_{f}": name for c, f, name in _AGGREGATES} | {"group_index_distinct": "group_indices"}
    return g.rename_columns([rename.get(c, c) for c in g.column_names])


def _sort_spec(sort: str | None, group_by: str) -> tuple[str, str]:
    if not sort:
        return "key", "ascending"
    col, _, direction = sort.partition(":")
    allowed = ("key",) + tuple(c for c in SORT_COLUMNS if c != "rollout_mask_sum" or group_by == "rollout_id")
    if col not in allowed:
        raise UsageError(f"--sort: expected one of {', '.join(allowed)} (optionally :asc or :desc), got {sort!r}")
    if direction not in ("", "asc", "desc"):
        raise UsageError(f"--sort: direction must be asc or desc, got {direction!r}")
    if not direction:
        direction = "asc" if col == "key" else "desc"
    return col, "ascending" if direction == "asc" else "descending"


def _group_view(r: dict, group_by: str) -> dict:
    """One group row as `groups[]` of the JSON shows it."""
    key = [r["step"], r[group_by]] if group_by in PER_STEP else r[group_by]
    row: dict[str, Any] = {"key": key, "samples": r["samples"], "rollouts": r["rollouts"], "prompt_groups": r["prompt_groups"],
                           "tokens": r["tokens"], "prompt_tokens": r["prompt_tokens"], "response_tokens": r["response_tokens"],
                           "mask_sum": r["mask_sum"]}
    if group_by == "rollout_id":
        row["rollout_mask_sum"] = r["rollout_mask_sum"]
        gis = r["group_indices"] or []
        row["group_index"] = sorted(gis, key=lambda x: (x is None, x)) if len(gis) != 1 else gis[0]
    for k in ("reward_mean", "reward_min", "reward_max", "raw_reward_mean", "raw_reward_min", "raw_reward_max"):
        row[k] = r6(r[k])
    row["truncated"] = r["truncated"]
    row["statuses"] = {s: r[f"_n_{s}_sum"] for s in STATUSES if r[f"_n_{s}_sum"]}
    if r["_n_other_sum"]:
        row["statuses"]["other"] = r["_n_other_sum"]
    return row


def groups(table: pa.Table, group_by: str, sort: str | None, limit: int | None) -> tuple[list[dict], int]:
    """Group rows, sorted (nulls last) and limited; and how many groups there are in all."""
    col, order = _sort_spec(sort, group_by)
    if table.num_rows == 0:
        return [], 0
    keys = _group_keys(group_by)
    by = [(k, order) for k in keys] if col == "key" else [(col, order)] + [(k, "ascending") for k in keys]
    g = _group_rows(table, group_by).sort_by(by)  # nulls last (the default)
    total = g.num_rows
    if limit is not None and limit > 0:
        g = g.slice(0, limit)
    return [_group_view(r, group_by) for r in g.to_pylist()], total
