"""The report's data: the inspect aggregations of each split, plus what the page plots and drills into.

Every number the page shows comes from the inspect library: `inspect_paths` (summary, per-step
table, anomalies: the very object `inspect --json` prints), its `each_step` hook (the per-sample rows
those aggregations are made of, seen in the same read) and `show_rollouts` (the
samples of the rollouts drilled into, loss-mask runs and text).
What is computed here is only what inspect does not aggregate (per-step quantiles and histograms)
and the compact per-sample table for the drill-down, from the same rows.

With train-side dumps (`train`), the trainer section is `audit_paths`' result (the object
`audit --json` prints), the distribution of d over every counted token, and for the rollouts
the page embeds, each response token's d and the trainer's loss mask, with their divergences.
"""
from __future__ import annotations

import hashlib

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..core.errors import UsageError
from ..inspection import InspectOptions, inspect_paths, show_rollouts
from ..core.layout import SPLITS

FORMAT_VERSION = 1
DEFAULT_DETAILS = 100  # rollouts whose samples (loss-mask runs, text) are embedded
TEXT_CHARS = 4000  # prompt/response/label characters embedded per sample
DECODED_TOKENS = 4000  # tokens shown decoded (--tokenizer) per sample
HIST_BINS = 40

Progress = Callable[[str, int, int], None]  # (what, done, total); total 0 when not known yet


@dataclass
class ReportOptions:
    """What the report reads (inspect's options) and how much of it the page embeds."""

    inspect: InspectOptions
    details: int = DEFAULT_DETAILS
    max_anomalies: int | None = 100
    train: list[str] | None = None  # the trainer's dumps: a trainer section (audit's numbers)

    @classmethod
    def default(cls) -> "ReportOptions":
        return cls(InspectOptions())

    def check(self) -> None:
        self.inspect.check()
        if self.details < 0:
            raise UsageError("--details: expected 0 or more")


def _num(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else round(x, 6) + 0.0


def _nums(a: np.ndarray) -> list:
    """Floats rounded to 6 decimals (as inspect rounds), NaN as null."""
    r = np.round(a.astype(np.float64), 6)
    return [None if math.isnan(v) else (int(v) if v == int(v) and abs(v) < 2**53 else v) for v in r.tolist()]


def _int_hist(values: np.ndarray) -> dict:
    """{"x": bin starts, "w": bin width, "n": counts} over integer values, at most HIST_BINS bins."""
    if not len(values):
        return {"x": [], "w": 1, "n": []}
    lo, hi = int(values.min()), int(values.max())
    width = max(1, math.ceil((hi - lo + 1) / HIST_BINS))
    counts = np.bincount((values - lo) // width)
    return {"x": [lo + k * width for k in range(len(counts))], "w": width, "n": counts.tolist()}


def _float_hist(values: np.ndarray) -> dict:
    v = values[~np.isnan(values)]
    if not len(v):
        return {"x": [], "w": 0, "n": []}
    lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        return {"x": [_num(lo)], "w": 0, "n": [int(len(v))]}
    counts, edges = np.histogram(v, bins=HIST_BINS, range=(lo, hi))
    return {"x": _nums(edges[:-1]), "w": _num(edges[1] - edges[0]), "n": counts.tolist()}


def _step_view(rows, statuses: dict) -> tuple[dict, dict]:
    """Per-step extras for the trends and the step's compact sample table (ordered by rollout)."""
    n = rows.num_rows
    rl = rows.column("response_length").to_numpy()
    tl = rows.column("total_length").to_numpy()
    raw = rows.column("raw_reward").to_numpy(zero_copy_only=False).astype(np.float64)  # NaN: not recorded
    rid = rows.column("rollout_id").to_numpy()
    ids, first, counts = np.unique(rid, return_index=True, return_counts=True) if n else (rid, rid, rid)
    extra = {
        "response_length_p50": _num(np.percentile(rl, 50)) if n else None,
        "response_length_p90": _num(np.percentile(rl, 90)) if n else None,
        "raw_reward_std": _num(np.nanstd(raw)) if n and not np.isnan(raw).all() else None,
        "samples_per_rollout_mean": _num(counts.mean()) if n else None,
        "samples_per_rollout_max": int(counts.max()) if n else None,
    }
    order = np.argsort(rid, kind="stable")  # a rollout's samples together, in input order
    codes = np.array([statuses.setdefault(s, len(statuses)) for s in rows.column("status").to_pylist()], dtype=np.int64)
    gi = rows.column("group_index").to_pylist()
    table = {
        "rollouts": {"id": ids.tolist(), "n": counts.tolist(), "group": [gi[i] for i in first.tolist()]},
        "samples": {
            "sample_index": [rows.column("sample_index")[i].as_py() for i in order.tolist()],
            "group_index": [gi[i] for i in order.tolist()],
            "status": codes[order].tolist(),
            "reward": _nums(rows.column("reward").to_numpy(zero_copy_only=False)[order]),
            "raw_reward": _nums(raw[order]),
            "response_length": rl[order].tolist(),
            "prompt_length": (tl - rl)[order].tolist(),
            "mask_sum": rows.column("mask_sum").to_numpy()[order].tolist(),
            "truncated": rows.column("truncated").to_numpy(zero_copy_only=False)[order].astype(np.int8).tolist(),
            # the sample's weight versions, joined (null where none recorded)
            "weight_versions": [", ".join(v) if v else None for v in
                                (rows.column("weight_versions").to_pylist()[i] for i in order.tolist())],
        },
    }
    return extra, table


def _clip(s: str | None) -> str | None:
    if s is None or len(s) <= TEXT_CHARS:
        return s
    return s[:TEXT_CHARS] + f"\u2026 ({len(s) - TEXT_CHARS} more characters)"


def _pick_details(anomalies: list[dict], tables: dict[int, dict], budget: int,
                  first: list[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Rollouts to embed in full: `first` (the trainer section's), those `anomalies` name (and
    inspect's removed samples), then round-robin over the steps. Only rollouts that have rows: an anomaly may name one whose
    samples were all rejected."""
    picked: list[tuple[int, int]] = []
    seen: set = set()
    present = {step: {int(i) for i in t["rollouts"]["id"]} for step, t in tables.items()}

    def take(step: int, rid: int) -> None:
        if len(picked) < budget and (step, rid) not in seen and rid in present.get(step, ()):
            seen.add((step, rid))
            picked.append((step, rid))

    for step, rid in first:
        take(step, rid)
    for a in anomalies:
        if a.get("rollout_id") is not None and a.get("step") is not None:
            take(int(a["step"]), int(a["rollout_id"]))
    k = 0
    while len(picked) < budget:
        more = False
        for step, t in tables.items():
            ids = t["rollouts"]["id"]
            if k < len(ids):
                more = True
                take(step, int(ids[k]))
        if not more:
            break
        k += 1
    return sorted(picked)


def _split_data(paths: list[str], opts: ReportOptions, split: str, progress: Progress | None,
                first: list[tuple[int, int]] = ()) -> dict | None:
    iopts = dataclasses.replace(opts.inspect, split=split, max_anomalies=opts.max_anomalies)
    statuses: dict[str, int] = {}
    trends: dict[int, dict] = {}
    tables: dict[int, dict] = {}
    rl_all: list[np.ndarray] = []
    raw_all: list[np.ndarray] = []
    rew_all: list[np.ndarray] = []

    def each_step(sd) -> None:  # the rows inspect aggregates, seen in the same read
        extra, table = _step_view(sd.rows, statuses)
        trends[sd.step] = extra
        tables[sd.step] = table
        rl_all.append(sd.rows.column("response_length").to_numpy())
        raw_all.append(sd.rows.column("raw_reward").to_numpy(zero_copy_only=False).astype(np.float64))
        rew_all.append(sd.rows.column("reward").to_numpy(zero_copy_only=False).astype(np.float64))
        if progress:
            progress(f"{split}: rows", len(tables), 0)

    if progress:
        progress(f"{split}: inspect", 0, 1)
    ins = inspect_paths(paths, None, iopts, each_step=each_step)
    if not tables:
        return None
    if progress:
        progress(f"{split}: inspect", 1, 1)
    s = ins["summary"]
    for p in s["per_step"]:  # the step order of the page is inspect's
        t = trends.get(p["step"], {})
        t["zero_variance_share"] = p["zero_variance_share"]
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    details: dict[str, dict] = {}
    images: dict[str, str] = {}  # each distinct image the page embeds, once: digest -> lossless PNG data URI
    picked = _pick_details(ins["anomalies"] + ins["removed"], tables, opts.details, first)
    shown = show_rollouts(paths, list(picked), iopts) if picked else {}  # each step read once
    for j, (step, rid) in enumerate(picked):
        r = shown[(step, rid)]
        for smp in r["samples"]:
            for f in ("prompt", "response", "label"):
                if f in smp:
                    smp[f] = _clip(smp[f])
            dec = smp.get("decoded")
            if dec and len(dec["ids"]) > DECODED_TOKENS:  # the page embeds the first tokens only
                smp["decoded"] = dict({k: v[:DECODED_TOKENS] for k, v in dec.items()}, clipped=len(dec["ids"]))
            if smp.get("images"):  # the sample names its images by digest; the page holds each once
                keys = []
                for b64 in smp["images"]:
                    key = hashlib.sha256(b64.encode()).hexdigest()[:16]
                    images.setdefault(key, "data:image/png;base64," + b64)
                    keys.append(key)
                smp["images"] = keys
        details[f"{step}:{rid}"] = r
        if progress:
            progress(f"{split}: rollouts", j + 1, len(picked))
    return {
        "inspect": ins,
        "trends": {str(k): v for k, v in trends.items()},
        "distributions": {
            "response_length": _int_hist(cat(rl_all).astype(np.int64)),
            "raw_reward": _float_hist(cat(raw_all).astype(np.float64)),
            "reward": _float_hist(cat(rew_all)),
            "group_sizes": s["group_sizes"],
            "samples_per_rollout": s["samples_per_rollout"],
        },
        "statuses": list(statuses),
        "steps": {str(k): v for k, v in tables.items()},
        "details": details,
        "images": images,
    }


def collect(paths: list[str], options: ReportOptions | None = None, progress: Progress | None = None) -> dict:
    """The page's data, as plain JSON-able data: per split, inspect's result plus trends,
    distributions, per-step sample tables and the embedded rollouts.

    Raises RolloutCliError as `inspect_paths` does; UsageError when no split has samples.
    """
    opts = options or ReportOptions.default()
    opts.check()
    trainer = _trainer(list(paths), opts, progress) if opts.train else None
    splits = {}
    for split in SPLITS:
        first = trainer.pop("_picks") if trainer is not None and split == "train" else ()
        d = _split_data(list(paths), opts, split, progress, first)
        if d is not None:
            splits[split] = d
    if not splits:
        raise UsageError("no samples in the input: nothing to report")
    out = {"format_version": FORMAT_VERSION, "inputs": list(paths), "details_budget": opts.details, "splits": splits}
    if trainer is not None:
        shown = set(splits.get("train", {}).get("details", {}))
        trainer["tokens"] = {k: v for k, v in trainer["tokens"].items() if k in shown}
        for st in trainer["audit"]["steps"]:  # the page keeps what it shows: movers, embedded rollouts
            st["loss_weight"] = st["loss_weight"] and {k: st["loss_weight"][k] for k in ("modes", "movers")}
            st["rollouts"] = [r for r in st["rollouts"] if f"{st['step']}:{r['rollout_id']}" in shown]
        out["train_inputs"] = list(opts.train)
        out["trainer"] = trainer
    return out


D_DECIMALS = 4  # per-token d embedded for the drill-down


def _trainer(paths: list[str], opts: ReportOptions, progress: Progress | None) -> dict:
    """audit's result for the trainer section, the histogram of d, and per-token d and mask of
    the rollouts to embed: those with divergences first, then each step's most mismatched
    (`_picks`, in the order the drill-down budget takes them)."""
    from ..auditing import AuditOptions, audit_paths
    from ..core.options import RuleOptions

    rules = {f.name: getattr(opts.inspect, f.name) for f in dataclasses.fields(RuleOptions)}
    aopts = AuditOptions(**rules, max_divergences=opts.max_anomalies, keep_tokens=True)
    d_all: list[np.ndarray] = []
    kept: dict[str, list] = {}
    divergent: list[tuple[int, int]] = []
    ranked: dict[int, list[int]] = {}

    def each_step(sa) -> None:
        for _, d, _ in sa.tokens.values():
            d_all.append(d[~np.isnan(d)])
        bad = sorted({r["rollout_id"] for r in sa.divergences if r.get("rollout_id") is not None})
        divergent.extend((sa.step, rid) for rid in bad)
        order = sorted((r for r in sa.rollouts if r["mismatch"] and r["mismatch"]["tokens"]),
                       key=lambda r: (-r["mismatch"]["max_abs_diff"], r["rollout_id"]))
        ranked[sa.step] = [r["rollout_id"] for r in order][:opts.details]
        want = set(bad) | set(ranked[sa.step])
        for p, (rid, d, m) in sorted(sa.tokens.items()):
            if rid in want:
                kept.setdefault(f"{sa.step}:{rid}", []).append(
                    {"rollout_position": p, "d": _nums(np.round(d.astype(np.float64), D_DECIMALS)), "mask": m.tolist()})
        if progress:
            progress("train side: audit", len(ranked), 0)

    res = audit_paths(paths, list(opts.train or []), aopts, each_step=each_step)
    picks = list(dict.fromkeys(divergent))
    k = 0
    while len(picks) < opts.details and any(k < len(v) for v in ranked.values()):
        for step in sorted(ranked):
            if k < len(ranked[step]):
                picks.append((step, ranked[step][k]))
        k += 1
    picks = list(dict.fromkeys(picks))[:opts.details]
    d = np.concatenate(d_all) if d_all else np.zeros(0)
    return {"audit": res, "d_hist": _float_hist(d.astype(np.float64)), "tokens": kept, "_picks": picks}
