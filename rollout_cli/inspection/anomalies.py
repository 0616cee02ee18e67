"""Anomalies: the kinds inspect reports, their capped store, and the ones visible in a step's
rows (all-zero loss masks, rollout mask sums, prompt-group sizes, reward variance and the
fan-out weighting of group baselines)."""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Callable

import numpy as np

from ..core.errors import Location
from .rows import StepData

ANOMALY_KINDS = (
    "invalid_sample",
    "loss_mask_length",
    "rejected_sibling",
    "id_reused_across_groups",
    "non_adjacent_siblings",
    "mixed_ids",
    "group_index_missing",
    "single_sample_group",
    "uneven_groups",
    "zero_variance_group",
    "all_zero_loss_mask",
    "rollout_mask_sum_mismatch",
    "fanout_baseline_shift",
    "sibling_reward_mismatch",
    "multi_version_sample",
    "stale_rollout",
    "template_drift",
)
LEVELS = ("error", "warning", "info")  # most severe first
_LOC_RE = re.compile(r"^(?P<file>.*):(?P<kind>line|row|sample) (?P<n>-?\d+)$")


class Anomalies:
    """Anomaly records in order; at most `cap` stored per kind, every one counted. Samples
    `remove_sample` left out of the loss on purpose are no anomaly: they are listed apart
    (`removed`, at most `cap`) and counted (`removed_count`)."""

    def __init__(self, cap: int | None):
        self.cap = cap
        self.items: list[dict] = []
        self.counts: Counter = Counter()
        self.levels: Counter = Counter()
        self.removed: list[dict] = []
        self.removed_count = 0

    def add_removed(self, split: str, step: int | None, where: list[dict], **extra) -> None:
        self.removed_count += 1
        if self.cap is None or len(self.removed) < self.cap:
            self.removed.append({"level": "info", "split": split, "step": step, **extra, "where": where})

    def sorted_items(self) -> list[dict]:
        """The stored anomalies, most severe first, then by step (none last), else as found."""
        rank = {lv: k for k, lv in enumerate(LEVELS)}
        return sorted(self.items, key=lambda a: (rank.get(a["level"], len(rank)), a["step"] is None, a["step"] or 0))

    def add(self, kind: str, level: str, split: str, step: int | None, message: str, where: list[dict], **extra) -> None:
        self.counts[kind] += 1
        self.levels[level] += 1
        if self.cap is not None and self.counts[kind] > self.cap:
            return
        rec: dict[str, Any] = {"kind": kind, "level": level, "split": split, "step": step}
        rec.update(extra)
        rec["where"] = where
        rec["message"] = message
        self.items.append(rec)

    def add_recorded(self, a: dict, split: str, step: int, fallback: dict) -> None:
        """An anomaly the pipeline recorded (assign_ids, or a manifest): its locations as
        LOCATION dicts, `fallback` where it names none."""
        extra = {k: v for k, v in a.items() if k not in ("kind", "level", "message", "where", "split", "step")}
        locs = [loc_dict(w) for w in a.get("where", [])] or [fallback]
        self.add(a.get("kind", "unknown"), a.get("level", "warning"), split, step, a.get("message", ""), locs, **extra)

    def count_dict(self) -> dict:
        return {k: self.counts[k] for k in ANOMALY_KINDS if self.counts[k]} | {
            k: v for k, v in sorted(self.counts.items()) if k not in ANOMALY_KINDS
        }


    def level_dict(self) -> dict:
        """Every anomaly counted by level, most severe first (zeros included)."""
        return {lv: self.levels[lv] for lv in LEVELS} | {k: v for k, v in sorted(self.levels.items()) if k not in LEVELS}


def loc_dict(loc: Location | str) -> dict:
    """A Location, or its `file:line N` text (as manifests keep it), as a LOCATION dict."""
    if isinstance(loc, Location):
        return loc.to_dict()
    m = _LOC_RE.match(loc)
    if not m:
        return {"file": loc}
    return {"file": m.group("file"), m.group("kind"): int(m.group("n"))}


# the anomaly kinds of rule ids (Problem.rule) that have their own; any other problem is an invalid_sample
_KIND_OF_RULE = {"loss_mask.length": "loss_mask_length", "weight_versions.stale": "stale_rollout"}
# the level of a kind of rejected sample: an invalid one is an error, one --max-staleness leaves out is not
_REJECT_LEVEL = {"stale_rollout": "info"}


def problem_kind(rule: str | None) -> str:
    """The anomaly kind of a validation problem, or of a reject record, by its rule id."""
    return _KIND_OF_RULE.get(rule, "invalid_sample")


def reject_level(kind: str) -> str:
    """The level of an anomaly of a rejected sample of `kind` (problem_kind's)."""
    return _REJECT_LEVEL.get(kind, "error")


def row_anomalies(sd: StepData, where_row: Callable[[int], dict], anomalies: Anomalies, n_expected: int | None) -> int:
    """Anomalies visible in the rows of one step; returns the number of zero-variance groups."""
    if not sd.rows.num_rows:
        return 0
    _zero_masks(sd, where_row, anomalies)
    _mask_sum_mismatches(sd, where_row, anomalies)
    if sd.split != "train" or not sd.groups_known:
        return 0  # eval rewards are not group-normalised, or the groups are unknown: group anomalies do not apply
    return _group_anomalies(sd, where_row, anomalies, n_expected)


def _zero_masks(sd: StepData, where_row, anomalies: Anomalies) -> None:
    """Samples that train on no token (`remove_sample` from the rows: the dump's flag, or the
    output's column; null for an output of schema version 2). Those `remove_sample` left out
    are listed apart (Anomalies.add_removed), not as anomalies."""
    t = sd.rows
    removed = t.column("remove_sample").to_pylist()
    mask_sum = t.column("mask_sum").to_numpy()
    rl = t.column("response_length").to_numpy()
    rid = t.column("rollout_id").to_numpy()
    sidx = t.column("sample_index").to_pylist()
    for i in np.flatnonzero(mask_sum == 0).tolist():
        rem = removed[i]
        if rem:
            anomalies.add_removed(sd.split, sd.step, [where_row(i)], rollout_id=int(rid[i]), sample_index=sidx[i])
            continue
        why = "an empty response" if rl[i] == 0 else ("remove_sample" if rem else "every loss-mask entry is 0")
        anomalies.add("all_zero_loss_mask", "warning", sd.split, sd.step,
                      f"sample trains on no token ({why}); rollout {int(rid[i])} mask sum "
                      f"{int(t.column('rollout_mask_sum')[i].as_py())}",
                      [where_row(i)], rollout_id=int(rid[i]), sample_index=sidx[i], remove_sample=rem)


def _mask_sum_mismatches(sd: StepData, where_row, anomalies: Anomalies) -> None:
    """Rollouts whose rollout_mask_sum is not the sum of their samples' masks (one each)."""
    t = sd.rows
    mask_sum = t.column("mask_sum").to_numpy()
    rid = t.column("rollout_id").to_numpy()
    uniq, inv = np.unique(rid, return_inverse=True)
    per = np.bincount(inv, weights=mask_sum.astype(np.float64), minlength=len(uniq))
    rms = t.column("rollout_mask_sum").to_numpy()
    bad = np.flatnonzero(np.rint(per[inv]).astype(np.int64) != rms)
    seen_bad: set = set()
    for i in bad.tolist():
        if int(rid[i]) in seen_bad:
            continue
        seen_bad.add(int(rid[i]))
        anomalies.add("rollout_mask_sum_mismatch", "error", sd.split, sd.step,
                      f"rollout {int(rid[i])}: rollout_mask_sum {int(rms[i])}, but its samples' loss masks sum to {int(round(per[inv[i]]))}",
                      [where_row(i)], rollout_id=int(rid[i]))


def _group_anomalies(sd: StepData, where_row, anomalies: Anomalies, n_expected: int | None) -> int:
    """One-sample, uneven and zero-variance prompt groups; returns the zero-variance count."""
    t = sd.rows
    split, step = sd.split, sd.step
    pg = t.column("pgroup").to_numpy()
    gidx = t.column("group_index").to_pylist()
    sizes = np.bincount(pg)
    first = np.unique(pg, return_index=True)[1]  # first row of each group (pgroup is dense, in order of appearance)
    reward = t.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)
    for g in np.flatnonzero(sizes == 1).tolist():
        i = int(first[g])
        anomalies.add("single_sample_group", "warning", split, step,
                      f"prompt group {gidx[i]} has one sample: its normalised reward is 0.0 (no learning signal)",
                      [where_row(i)], group_index=gidx[i])
    members = group_rollouts(pg, t.column("rollout_id").to_numpy())  # a compact rollout is one member
    expected = n_expected if n_expected else int(np.bincount(members).argmax())
    odd = np.flatnonzero(members != expected)
    if len(odd):
        hist = {int(k): int(v) for k, v in sorted(Counter(members.tolist()).items())}
        anomalies.add("uneven_groups", "info", split, step,
                      f"{len(odd)} of {len(members)} prompt groups differ from the group size {expected} rollouts "
                      f"({'--n-samples-per-prompt' if n_expected else 'the most common size'}); sizes {hist}",
                      [where_row(int(first[g])) for g in odd[:6].tolist()], expected=expected, group_sizes=hist,
                      groups=[gidx[int(first[g])] for g in odd[:20].tolist()])
    _fanout_shift(sd, pg, gidx, where_row, anomalies)
    order = np.argsort(pg, kind="stable")
    bounds = np.r_[0, np.cumsum(sizes)]
    sr = reward[order]
    zero_var = 0
    for g in np.flatnonzero(sizes > 1).tolist():
        r = sr[bounds[g]:bounds[g + 1]]
        if np.isnan(r).any() or r.max() != r.min():
            continue
        zero_var += 1
        i = int(first[g])
        anomalies.add("zero_variance_group", "info", split, step,
                      f"prompt group {gidx[i]}: all {int(sizes[g])} samples have the same reward, so every normalised reward is "
                      f"{float(r[0]):g} (no learning signal)",
                      [where_row(i)], group_index=gidx[i], samples=int(sizes[g]),
                      raw_reward=float(t.column("raw_reward")[i].as_py()))
    return zero_var


def group_rollouts(pg: np.ndarray, rollout_ids: np.ndarray) -> np.ndarray:
    """Per prompt group (dense labels `pg`), its distinct rollouts: the group's size."""
    from ..pipeline.rewards import rollout_units

    if not len(pg):
        return np.zeros(0, np.int64)
    _, unit_group = rollout_units(pg, rollout_ids)
    return np.bincount(unit_group, minlength=int(pg.max()) + 1)


def _fanout_shift(sd: StepData, pg: np.ndarray, gidx: list, where_row, anomalies: Anomalies) -> None:
    """One anomaly per step naming the prompt groups whose raw_reward mean moves when each
    rollout counts once (--reward-baseline rollout) instead of each sample: fan-out weighting."""
    from ..pipeline.rewards import baseline_shift

    t = sd.rows
    raw = t.column("raw_reward").to_numpy(zero_copy_only=False).astype(np.float64)
    found = baseline_shift(raw, pg.tolist(), t.column("rollout_id").to_numpy())
    if not found:
        return
    found.sort(key=lambda g: -abs(g["shift"]))
    groups = [dict(group_index=gidx[g["row"]], **{k: v for k, v in g.items() if k != "row"}) for g in found[:20]]
    top = groups[0]
    anomalies.add("fanout_baseline_shift", "info", sd.split, sd.step,
                  f"{len(found)} prompt group(s) have a different raw_reward mean when each rollout counts once "
                  f"(--reward-baseline rollout) than when each sample does; largest: group {top['group_index']}, "
                  f"{top['samples']} samples of {top['rollouts']} rollouts, mean {top['sample_mean']:.6g} -> "
                  f"{top['rollout_mean']:.6g} ({top['shift']:+.6g})",
                  [where_row(g["row"]) for g in found[:6]], groups=groups, shifted_groups=len(found),
                  max_shift=abs(top["shift"]))
