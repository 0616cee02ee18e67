"""Inspect aggregations as plain data: the library side of `rollout-cli inspect`.

Two kinds of input:

- **dumps** (.pt, JSONL, Parquet): read and validated with the pipeline's own stage functions
  (readers, `normalize_chunk`, `assign_ids`, `group_keys` / `normalize_rewards`,
  `rollout_mask_sums`), so the ids and rewards shown are the ones `convert` writes. Invalid
  samples are not fatal: they are listed as anomalies and, with their rollouts, left out of the
  rows, exactly as `convert --on-error skip` leaves them out. Without invalid samples and
  id conflicts that is the same output as a plain `convert`.
- **converted output** (a folder with manifest.json): the manifest and the shards, read one
  record batch at a time, only the small columns (never `tokens`).

Memory: one step's records at a time go through validation in chunks; what is kept is one small
row per sample (ids, lengths, mask sum, rewards, status: about 100 bytes), never token lists.

Entry points: `inspect_paths` (summary, groups, anomalies), `show_rollout` (one rollout's
samples), `iter_steps` (per-step sample summaries, e.g. to compare with a conversion).
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..core.options import ConvertOptions, RuleOptions
from ..core.errors import IntegrityError, InvalidInputError, Location, Problem, UsageError
from ..core.schema import STATUSES

GROUP_BY = ("rollout_id", "group_index", "step", "status", "source_name")
SPLITS = ("train", "eval")
# group-row columns --sort accepts (besides "key")
SORT_COLUMNS = (
    "samples", "rollouts", "prompt_groups", "tokens", "prompt_tokens", "response_tokens", "mask_sum",
    "rollout_mask_sum", "reward_mean", "reward_min", "reward_max", "raw_reward_mean", "raw_reward_min",
    "raw_reward_max", "truncated",
)
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
)
# Records parsed at a time. The parsed Python lists of a chunk are the peak of memory (a 1 GB JSONL
# step of 2k-token samples: about 160 MB over the interpreter's baseline at 256, 400 MB at 1024);
# the ids, rewards and positions are the same for any chunk size.
CHUNK_RECORDS = 256
DEFAULT_MAX_ANOMALIES = 100  # stored per kind; counts are always complete

# One row per sample that conversion keeps: the per-sample summary every aggregation uses.
ROW_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64()),
        pa.field("rollout_id", pa.int64()),
        pa.field("sample_index", pa.int64()),
        pa.field("group_index", pa.int64()),
        pa.field("pgroup", pa.int64()),  # prompt group (reward-normalisation group), dense per step
        pa.field("response_length", pa.int64()),
        pa.field("total_length", pa.int64()),
        pa.field("mask_sum", pa.int64()),
        pa.field("reward", pa.float32()),  # post-processed; null where unknown
        pa.field("raw_reward", pa.float64()),
        pa.field("truncated", pa.bool_()),
        pa.field("status", pa.string()),
        pa.field("source_name", pa.string()),
        pa.field("rollout_mask_sum", pa.int64()),
        pa.field("pos", pa.int64()),  # record position in the dump (dumps) or row in the step (output)
    ]
)

_SMALL_PRE = ["_pos", "sample_index", "group_index", "response_length", "total_length", "_mask_total", "_reward_value",
              "raw_reward", "truncated", "status", "source_name"]
_OUT_COLUMNS = ["rollout_id", "sample_index", "group_index", "response_length", "total_length", "loss_mask", "reward",
                "raw_reward", "truncated", "status", "source_name", "rollout_mask_sum"]
_LOC_RE = re.compile(r"^(?P<file>.*):(?P<kind>line|row|sample) (?P<n>-?\d+)$")


# ------------------------------------------------------------------------------------------ options


@dataclass
class InspectOptions(RuleOptions):
    """The id and reward rules of `convert` (dumps only), plus what to look at."""

    split: str = "train"
    max_anomalies: int | None = DEFAULT_MAX_ANOMALIES  # per kind; None = all

    def convert_options(self) -> ConvertOptions:
        return ConvertOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RuleOptions)})

    def check(self) -> None:
        super().check()
        if self.split not in SPLITS:
            raise UsageError(f"--split: expected one of {', '.join(SPLITS)}")
        if self.max_anomalies is not None and self.max_anomalies < 0:
            raise UsageError("--max-anomalies: expected 0 or more")

    def id_reward_options(self) -> dict:
        d = self.rule_options()
        if not self.slime_compat:  # inspect's JSON names slime_compat only when it is on
            d.pop("slime_compat")
        return d


# ----------------------------------------------------------------------------------------- anomalies


class Anomalies:
    """Anomaly records in order; at most `cap` stored per kind, every one counted."""

    def __init__(self, cap: int | None):
        self.cap = cap
        self.items: list[dict] = []
        self.counts: Counter = Counter()

    def add(self, kind: str, level: str, split: str, step: int | None, message: str, where: list[dict], **extra) -> None:
        self.counts[kind] += 1
        if self.cap is not None and self.counts[kind] > self.cap:
            return
        rec: dict[str, Any] = {"kind": kind, "level": level, "split": split, "step": step}
        rec.update(extra)
        rec["where"] = where
        rec["message"] = message
        self.items.append(rec)

    def count_dict(self) -> dict:
        return {k: self.counts[k] for k in ANOMALY_KINDS if self.counts[k]} | {
            k: v for k, v in sorted(self.counts.items()) if k not in ANOMALY_KINDS
        }


def _loc_dict(loc: Location | str) -> dict:
    if isinstance(loc, Location):
        return loc.to_dict()
    m = _LOC_RE.match(loc)
    if not m:
        return {"file": loc}
    return {"file": m.group("file"), m.group("kind"): int(m.group("n"))}


# -------------------------------------------------------------------------------------- step data


@dataclass
class StepData:
    """One step of one split: its per-sample rows plus counts."""

    split: str
    step: int
    source: str  # the dump file, or the converted output folder
    samples: int  # records read (valid or not); rows + rejected
    rejected: int
    rows: pa.Table  # ROW_SCHEMA, survivors in order
    zero_variance_groups: int = 0
    groups_known: bool = True  # False where group_index is missing and no --n-samples-per-prompt chunks it
    # dumps only (for --show): every record's id, whether assigned, whether rejected, and why
    _ids: np.ndarray | None = None
    _assigned: np.ndarray | None = None
    _rejected: np.ndarray | None = None
    _reasons: dict | None = None
    _where: Callable[[int], Location] | None = None
    _input: Any = None
    # converted only (for --show)
    _shards: list | None = None


def _raw_chunks(inp, trust_pickle: bool, payload: dict):
    """The same reader dispatch as convert, in smaller chunks."""
    from ..inputs.registry import read_input

    return read_input(inp, trust_pickle=trust_pickle, payload=payload, chunk_records=CHUNK_RECORDS)


def _locator(metas: list[tuple[str, str, list[int]]]) -> Callable[[int], Location]:
    starts = np.cumsum([0] + [len(m[2]) for m in metas])

    def where(pos: int) -> Location:
        k = int(np.searchsorted(starts, pos, side="right")) - 1
        src, kind, numbers = metas[k]
        return Location(src, kind, numbers[pos - int(starts[k])])

    return where


def _dense(keys: list) -> np.ndarray:
    index: dict = {}
    return np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))


def _conflicts(id_state: np.ndarray, explicit: np.ndarray, group_index: list) -> dict[int, list]:
    """Explicit ids used by samples of more than one prompt group: {id: [groups in order]}."""
    from ..pipeline.validate import ID_EXPLICIT

    keys_of: dict[int, list] = {}
    for i in np.flatnonzero(id_state == ID_EXPLICIT).tolist():
        gs = keys_of.setdefault(int(explicit[i]), [])
        if group_index[i] not in gs:
            gs.append(group_index[i])
    return {v: gs for v, gs in keys_of.items() if len(gs) > 1}


def _dump_step(unit, opts: InspectOptions, anomalies: Anomalies, seen: set, notes: list) -> StepData | None:
    """Read, validate and id one dump file as convert does; keep per-sample summaries only."""
    from ..inputs.discover import parse_steps
    from ..pipeline.validate import ID_EXPLICIT, normalize_chunk, pre_schema
    from ..pipeline.step import compute_step

    inp = unit.input
    payload: dict = {}
    metas: list[tuple[str, str, list[int]]] = []
    id_state: list[int] = []
    explicit: list = []
    group_index: list = []
    valid: list[bool] = []
    removed: list[bool] = []
    chunk_problems: list[tuple[int, Problem]] = []
    small: list[pa.RecordBatch] = []
    base = 0
    for raw in _raw_chunks(inp, opts.trust_pickle, payload):
        removed.extend(bool(r.get("remove_sample")) if isinstance(r, dict) else False for r in raw.records)
        nc = normalize_chunk(raw, base, reward_key=opts.reward_key, keep_text=False)
        metas.append((nc.source, nc.kind, nc.numbers))
        id_state.extend(nc.id_state)
        explicit.extend(nc.explicit_id)
        group_index.extend(nc.group_index)
        valid.extend(nc.valid)
        chunk_problems.extend((base + i, p) for i, p in nc.problems)
        small.extend(b.select(_SMALL_PRE) for b in nc.batches)
        base += len(raw)
        del nc
    if payload.get("train_dump"):
        notes.append(f"{inp.display}: slime train-side dump (format_version key), skipped")
        return None
    step = payload.get("step") if payload.get("step") is not None else unit.step
    if step is None:
        raise UsageError(f"{inp.display}: cannot tell its step: no rollout_id key in the dump and no number in its name")
    lo, hi = parse_steps(opts.steps)
    if (lo is not None and step < lo) or (hi is not None and step > hi):
        return None  # a .pt whose payload step (which wins over its name) is not selected
    if (inp.split, step) in seen:
        raise InvalidInputError(f"{inp.display}: step {step} ({inp.split}) is already given by another input")
    seen.add((inp.split, step))
    split = inp.split
    n = len(id_state)
    where = _locator(metas)
    st = np.asarray(id_state, dtype=np.int8)
    ex = np.fromiter((0 if v is None else v for v in explicit), dtype=np.int64, count=n)
    sch = pa.schema([pre_schema(False).field(c) for c in _SMALL_PRE])
    pre = pa.Table.from_batches(small, schema=sch) if small else sch.empty_table()
    del small
    sf = compute_step(
        id_state=st, explicit=ex, group_index=group_index, problems=chunk_problems, where=where,
        row_pos=pre.column("_pos").to_numpy(), reward_values=pre.column("_reward_value").to_numpy(),
        mask_totals=pre.column("_mask_total").to_numpy(), split=split, step=step, opts=opts, fail=False,
        unknown_groups_ok=True,
    )
    rejected, reasons, problems = sf.rejected, sf.reasons, sf.problems

    # invalid samples: anomalies (convert fails or, with --on-error skip, rejects their rollouts)
    for i, p in chunk_problems:
        kind = "loss_mask_length" if p.field == "loss_mask" and p.message.startswith("expected length") else "invalid_sample"
        extra = {"rollout_id": int(sf.ids[i])} if sf.assigned[i] else {}
        anomalies.add(kind, "error", split, step, f"{p.field}: {p.message}" if p.field else p.message, [_loc_dict(p.location)],
                      field=p.field, **extra)
    own = {i for i, _ in problems}
    first_bad: dict[int, int] = {}
    for i, _ in problems:
        if sf.assigned[i]:
            first_bad.setdefault(int(sf.ids[i]), i)
    for i in np.flatnonzero(rejected).tolist():
        if i not in own:
            j = first_bad[int(sf.ids[i])]
            anomalies.add("rejected_sibling", "info", split, step,
                          f"left out with its rollout {int(sf.ids[i])}: sibling of invalid sample {where(j)}",
                          [_loc_dict(where(i))], rollout_id=int(sf.ids[i]))

    # id anomalies: explicit ids reused across prompt groups, then assign_ids' own findings
    for v, gs in _conflicts(st, ex, group_index).items():
        members = np.flatnonzero((st == ID_EXPLICIT) & (ex == v)).tolist()
        if opts.rollout_id_scope == "strict":
            level, what = "error", ("convert fails on this under --rollout-id-scope strict (--on-error skip leaves these samples out); "
                                    "--rollout-id-scope step merges them as slime does, group keeps them apart")
        elif opts.rollout_id_scope == "step":
            level, what = "warning", "merged into one rollout (--rollout-id-scope step)"
        else:
            level, what = "warning", "split per prompt group (--rollout-id-scope group)"
        anomalies.add("id_reused_across_groups", level, split, step,
                      f"explicit id {v} is used by {len(members)} samples of prompt groups {gs}: {what}",
                      [_loc_dict(where(i)) for i in members[:6]], rollout_id=v, groups=gs, samples=len(members))
    for a in sf.anomalies:
        kind = a.get("kind")
        if kind == "id_reused_across_groups":
            continue  # reported above, with locations, for every scope
        extra = {k: v for k, v in a.items() if k not in ("kind", "level", "message", "where", "step", "split")}
        locs = [_loc_dict(w) for w in a.get("where", [])] or [{"file": inp.display}]
        anomalies.add(kind, a.get("level", "warning"), split, step, a.get("message", ""), locs, **extra)

    # the rows convert keeps, their rewards and mask sums
    if not sf.keep.all():
        pre = pre.filter(pa.array(sf.keep))
    pos = pre.column("_pos").to_numpy()
    ids = sf.ids[pos]
    keys = sf.group_keys
    groups_known = sf.groups_known
    rewards = sf.rewards if groups_known or split == "eval" else None
    if not groups_known:
        missing = [int(pos[k]) for k, g in enumerate(keys) if isinstance(g, tuple)]
        anomalies.add("group_index_missing", "error", split, step,
                      f"{len(missing)} samples have no group_index, so prompt groups are unknown: convert fails; "
                      "pass --n-samples-per-prompt N to group consecutive samples (rewards shown as unknown)",
                      [_loc_dict(where(p)) for p in missing[:6]], samples=len(missing))
    sums = sf.mask_sums

    m = len(pos)
    rows = pa.Table.from_arrays(
        [
            pa.array(np.full(m, step, dtype=np.int64)),
            pa.array(ids, pa.int64()),
            pre.column("sample_index"),
            pre.column("group_index"),
            pa.array(_dense(keys), pa.int64()),
            pc.cast(pre.column("response_length"), pa.int64()),
            pc.cast(pre.column("total_length"), pa.int64()),
            pre.column("_mask_total"),
            pa.array(np.full(m, np.nan, np.float32) if rewards is None else rewards, pa.float32(), from_pandas=True),
            pre.column("raw_reward"),
            pre.column("truncated"),
            pre.column("status"),
            pre.column("source_name"),
            pa.array(sums, pa.int64()),
            pa.array(pos, pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )
    removed_rows = np.asarray(removed, dtype=bool)[pos] if m else np.zeros(0, dtype=bool)
    sd = StepData(split, step, inp.display, n, int(rejected.sum()), rows, groups_known=groups_known)
    sd.zero_variance_groups = _row_anomalies(sd, lambda i: _loc_dict(where(int(pos[i]))), anomalies, opts.n_samples_per_prompt,
                                             removed_rows)
    sd._ids, sd._assigned, sd._rejected, sd._reasons, sd._where, sd._input = sf.ids, sf.assigned, rejected, reasons, where, inp
    return sd


def _row_anomalies(sd: StepData, where_row: Callable[[int], dict], anomalies: Anomalies, n_expected: int | None,
                   removed: np.ndarray | None) -> int:
    """Anomalies visible in the rows of one step; returns the number of zero-variance groups."""
    t = sd.rows
    m = t.num_rows
    split, step = sd.split, sd.step
    if not m:
        return 0
    mask_sum = t.column("mask_sum").to_numpy()
    rl = t.column("response_length").to_numpy()
    rid = t.column("rollout_id").to_numpy()
    sidx = t.column("sample_index").to_pylist()
    # all-zero loss masks
    for i in np.flatnonzero(mask_sum == 0).tolist():
        rem = None if removed is None else bool(removed[i])
        why = "an empty response" if rl[i] == 0 else ("remove_sample" if rem else "every loss-mask entry is 0")
        anomalies.add("all_zero_loss_mask", "info" if rem else "warning", split, step,
                      f"sample trains on no token ({why}); rollout {int(rid[i])} mask sum "
                      f"{int(t.column('rollout_mask_sum')[i].as_py())}",
                      [where_row(i)], rollout_id=int(rid[i]), sample_index=sidx[i], remove_sample=rem)
    # rollout_mask_sum must be the sum of its samples' masks
    uniq, inv = np.unique(rid, return_inverse=True)
    per = np.bincount(inv, weights=mask_sum.astype(np.float64), minlength=len(uniq))
    rms = t.column("rollout_mask_sum").to_numpy()
    bad = np.flatnonzero(np.rint(per[inv]).astype(np.int64) != rms)
    seen_bad: set = set()
    for i in bad.tolist():
        if int(rid[i]) in seen_bad:
            continue
        seen_bad.add(int(rid[i]))
        anomalies.add("rollout_mask_sum_mismatch", "error", split, step,
                      f"rollout {int(rid[i])}: rollout_mask_sum {int(rms[i])}, but its samples' loss masks sum to {int(round(per[inv[i]]))}",
                      [where_row(i)], rollout_id=int(rid[i]))
    if split != "train" or not sd.groups_known:
        return 0  # eval rewards are not group-normalised, or the groups are unknown: group anomalies do not apply
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
    expected = n_expected if n_expected else int(np.bincount(sizes).argmax())
    odd = np.flatnonzero(sizes != expected)
    if len(odd):
        hist = {int(k): int(v) for k, v in sorted(Counter(sizes.tolist()).items())}
        anomalies.add("uneven_groups", "info", split, step,
                      f"{len(odd)} of {len(sizes)} prompt groups differ from the group size {expected} "
                      f"({'--n-samples-per-prompt' if n_expected else 'the most common size'}); sizes {hist}",
                      [where_row(int(first[g])) for g in odd[:6].tolist()], expected=expected, group_sizes=hist,
                      groups=[gidx[int(first[g])] for g in odd[:20].tolist()])
    _fanout_shift(t, pg, gidx, where_row, anomalies, split, step)
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


def _fanout_shift(t: pa.Table, pg: np.ndarray, gidx: list, where_row: Callable[[int], dict], anomalies: Anomalies,
                  split: str, step: int) -> None:
    """One anomaly per step naming the prompt groups whose raw_reward mean moves when each
    rollout counts once (--reward-baseline rollout) instead of each sample: fan-out weighting."""
    from ..pipeline.rewards import baseline_shift

    raw = t.column("raw_reward").to_numpy(zero_copy_only=False).astype(np.float64)
    found = baseline_shift(raw, pg.tolist(), t.column("rollout_id").to_numpy())
    if not found:
        return
    found.sort(key=lambda g: -abs(g["shift"]))
    groups = [dict(group_index=gidx[g["row"]], **{k: v for k, v in g.items() if k != "row"}) for g in found[:20]]
    top = groups[0]
    anomalies.add("fanout_baseline_shift", "info", split, step,
                  f"{len(found)} prompt group(s) have a different raw_reward mean when each rollout counts once "
                  f"(--reward-baseline rollout) than when each sample does; largest: group {top['group_index']}, "
                  f"{top['samples']} samples of {top['rollouts']} rollouts, mean {top['sample_mean']:.6g} -> "
                  f"{top['rollout_mean']:.6g} ({top['shift']:+.6g})",
                  [where_row(g["row"]) for g in found[:6]], groups=groups, shifted_groups=len(found),
                  max_shift=abs(top["shift"]))


# ----------------------------------------------------------------------------------- converted output


def _is_output(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "manifest.json"))


def _read_manifest(out: str) -> dict:
    from ..output import manifest as manifest_mod

    try:
        return manifest_mod.read(out)
    except IntegrityError as e:
        raise InvalidInputError(str(e)) from None


def _mask_sums(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per-row sum and length of a list<uint8> loss-mask column (nulls count as empty)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy().astype(np.int64)
    flat = pc.list_flatten(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    cs = np.r_[0, np.cumsum(flat)]
    ends = np.cumsum(lengths)
    return cs[ends] - cs[ends - lengths], lengths


def _output_steps(out: str, opts: InspectOptions, anomalies: Anomalies, seen: set, notes: list,
                  only: tuple[int, int] | None = None) -> Iterator[StepData]:
    import pyarrow.parquet as pq

    from ..inputs.discover import parse_steps
    from ..pipeline.rewards import group_keys

    m = _read_manifest(out)
    mopts = m.get("options", {})
    lo, hi = parse_steps(opts.steps)
    for s in m.get("steps", []):
        split, step = s["split"], int(s["step"])
        if split != opts.split or (lo is not None and step < lo) or (hi is not None and step > hi):
            continue
        if only is not None and only != (split, step):
            continue
        if (split, step) in seen:
            raise UsageError(f"{out}: {split} step {step} is also given by another input")
        seen.add((split, step))
        parts: list[pa.Table] = []
        shard_of: list[np.ndarray] = []
        row_in: list[np.ndarray] = []
        length_bad: list[tuple[str, int, int, int]] = []
        shards = []
        for k, sh in enumerate(s.get("shards", [])):
            path = os.path.join(out, sh["path"])
            display = os.path.join(out, sh["path"])
            shards.append(display)
            try:
                pf = pq.ParquetFile(path, memory_map=True)
                names = set(pf.schema_arrow.names)
                missing = [c for c in _OUT_COLUMNS if c not in names and c not in ("source_name",)]
                if missing:
                    raise InvalidInputError(f"{display}: not a rollout-cli shard: no column {missing[0]}")
                cols = [c for c in _OUT_COLUMNS if c in names]
                r0 = 0
                for b in pf.iter_batches(batch_size=8192, columns=cols):
                    msum, mlen = _mask_sums(b.column("loss_mask"))
                    rl = b.column("response_length").to_numpy(zero_copy_only=False).astype(np.int64)
                    for i in np.flatnonzero(mlen != rl).tolist():
                        length_bad.append((display, r0 + i, int(rl[i]), int(mlen[i])))
                    nb = b.num_rows
                    src = b.column("source_name") if "source_name" in names else pa.array(["unknown"] * nb)
                    parts.append(pa.table({
                        "rollout_id": b.column("rollout_id"),
                        "sample_index": b.column("sample_index"),
                        "group_index": b.column("group_index"),
                        "response_length": pc.cast(b.column("response_length"), pa.int64()),
                        "total_length": pc.cast(b.column("total_length"), pa.int64()),
                        "mask_sum": pa.array(msum, pa.int64()),
                        "reward": pc.cast(b.column("reward"), pa.float32()),
                        "raw_reward": pc.cast(b.column("raw_reward"), pa.float64()),
                        "truncated": b.column("truncated"),
                        "status": pc.cast(b.column("status"), pa.string()),
                        "source_name": pc.cast(src, pa.string()),
                        "rollout_mask_sum": pc.cast(b.column("rollout_mask_sum"), pa.int64()),
                    }))
                    shard_of.append(np.full(nb, k, dtype=np.int64))
                    row_in.append(np.arange(r0, r0 + nb, dtype=np.int64))
                    r0 += nb
            except (OSError, pa.ArrowException) as e:
                raise InvalidInputError(f"{display}: cannot read shard: {e}") from None
        n = sum(p.num_rows for p in parts)
        gi = [g for p in parts for g in p.column("group_index").to_pylist()]
        if mopts.get("n_samples_per_prompt") and mopts.get("shards", 1) == 1:
            keys = group_keys(gi, mopts["n_samples_per_prompt"])  # rows kept input order: same chunks as convert
            groups_known = True
        else:
            keys = [g if g is not None else ("sample", k) for k, g in enumerate(gi)]
            groups_known = all(g is not None for g in gi)
        if parts:
            t = pa.concat_tables(parts)
            rows = pa.Table.from_arrays(
                [pa.array(np.full(n, step, dtype=np.int64)), t.column("rollout_id"), t.column("sample_index"),
                 t.column("group_index"), pa.array(_dense(keys), pa.int64())]
                + [t.column(c) for c in ("response_length", "total_length", "mask_sum", "reward", "raw_reward", "truncated", "status",
                                         "source_name", "rollout_mask_sum")]
                + [pa.array(np.arange(n, dtype=np.int64))],
                schema=ROW_SCHEMA,
            )
        else:
            rows = ROW_SCHEMA.empty_table()
        sh_a = np.concatenate(shard_of) if shard_of else np.zeros(0, np.int64)
        ri_a = np.concatenate(row_in) if row_in else np.zeros(0, np.int64)
        sd = StepData(split, step, out, n + int(s.get("rejected", 0)), int(s.get("rejected", 0)), rows, groups_known=groups_known)
        sd._shards = shards

        def where_row(i: int, _sh=sh_a, _ri=ri_a, _names=shards) -> dict:
            return {"file": _names[int(_sh[i])], "row": int(_ri[i])}

        for display, r, rl, ml in length_bad:
            anomalies.add("loss_mask_length", "error", split, step,
                          f"loss_mask: expected length {rl} (response_length), got {ml}", [{"file": display, "row": r}], field="loss_mask")
        for a in m.get("anomalies", []):
            if a.get("split") == split and a.get("step") == step:
                extra = {k: v for k, v in a.items() if k not in ("kind", "level", "message", "where", "split", "step")}
                locs = [_loc_dict(w) for w in a.get("where", [])] or [{"file": os.path.join(out, "manifest.json")}]
                anomalies.add(a.get("kind", "unknown"), a.get("level", "warning"), split, step, a.get("message", ""), locs, **extra)
        _reject_anomalies(out, m, split, step, anomalies)
        sd.zero_variance_groups = _row_anomalies(sd, where_row, anomalies, mopts.get("n_samples_per_prompt"), None)
        yield sd


def _reject_anomalies(out: str, m: dict, split: str, step: int, anomalies: Anomalies) -> None:
    """rejects.jsonl records of one step, as the anomalies inspect lists for invalid dump samples."""
    info = m.get("rejects")
    if not info:
        return
    path = os.path.join(out, info.get("path", "rejects.jsonl"))
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InvalidInputError(f"{path}: cannot open: {e.strerror or e}") from None
    with f:
        for line in f:
            if not line.strip():
                continue
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise InvalidInputError(f"{path}: invalid JSON: {e}") from None
            if r.get("split") != split or r.get("step") != step:
                continue
            loc = {k: r[k] for k in ("file", "line", "row", "sample") if k in r}
            extra = {"rollout_id": r["rollout_id"]} if "rollout_id" in r else {}
            fld, reason = r.get("field"), r.get("reason", "")
            if fld is None and str(reason).startswith("sibling of"):
                anomalies.add("rejected_sibling", "info", split, step, f"left out with its rollout: {reason}", [loc], **extra)
            else:
                kind = "loss_mask_length" if fld == "loss_mask" and str(reason).startswith("expected length") else "invalid_sample"
                anomalies.add(kind, "error", split, step, f"{fld}: {reason}" if fld else str(reason), [loc], field=fld, **extra)


# ------------------------------------------------------------------------------------------- sources


@dataclass
class _Sources:
    kind: str  # "dumps" | "converted"
    outputs: list[str] = field(default_factory=list)
    units: list = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    other_split: int = 0


def _resolve(paths: list[str], opts: InspectOptions) -> _Sources:
    if not paths:
        raise UsageError("no input given")
    outs = []
    for p in paths:
        if os.path.basename(p) == "manifest.json" and os.path.isfile(p):
            outs.append(os.path.dirname(p) or ".")
        elif _is_output(p):
            outs.append(p)
    if outs:
        if len(outs) != len(paths):
            raise UsageError("give either converted outputs (folders with manifest.json) or dumps, not both")
        src = _Sources("converted", outputs=outs)
        src.other_split = sum(s.get("split") != opts.split for o in outs for s in _read_manifest(o).get("steps", []))
        return src
    from ..run.convert import plan_units

    units, skipped, notes = plan_units(list(paths), opts.convert_options())
    for u in units:
        if u.input.format == "parquet" and u.input.path != "-" and _is_train_rows(u.input.path):
            raise UsageError(f"{u.input.display}: a shard of converted output; inspect its output folder (the one with manifest.json)")
    src = _Sources("dumps", units=[u for u in units if u.input.split == opts.split], skipped=skipped, notes=notes)
    src.other_split = len(units) - len(src.units)
    if not units:
        raise UsageError("no input files found (expected .pt, .jsonl, .jsonl.gz, .jsonl.zst, .parquet, or a converted output folder)")
    return src


def _is_train_rows(path: str) -> bool:
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return b"rollout_cli.schema_version" in md


def _iter(src: _Sources, opts: InspectOptions, anomalies: Anomalies, notes: list) -> Iterator[StepData]:
    seen: set = set()
    if src.kind == "converted":
        for out in src.outputs:
            yield from _output_steps(out, opts, anomalies, seen, notes)
        return
    for unit in src.units:
        sd = _dump_step(unit, opts, anomalies, seen, notes)
        if sd is not None:
            yield sd


def iter_steps(paths: list[str], options: InspectOptions | None = None) -> Iterator[StepData]:
    """Per-step sample summaries (ROW_SCHEMA), in convert's order: what convert writes, without tokens."""
    opts = options or InspectOptions()
    opts.check()
    src = _resolve(list(paths), opts)
    yield from _iter(src, opts, Anomalies(opts.max_anomalies), [])


# ---------------------------------------------------------------------------------------- aggregation


def _r(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else round(x, 6) + 0.0  # + 0.0: no -0.0


def _stats(values: np.ndarray) -> dict:
    v = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if not len(v):
        return {"count": 0, "mean": None, "std": None, "min": None, "max": None}
    v = v.astype(np.float64)
    return {"count": int(len(v)), "mean": _r(v.mean()), "std": _r(v.std()), "min": _r(v.min()), "max": _r(v.max())}


def _hist(c: Counter) -> dict:
    return {int(k): int(v) for k, v in sorted(c.items())}


def _group_rows(table: pa.Table, group_by: str) -> pa.Table:
    """One row per group (pyarrow group_by): counts, token sums, reward mean/min/max, statuses."""
    keys = ["step", "rollout_id"] if group_by == "rollout_id" else [group_by]
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
    known = set(STATUSES)
    other = pc.invert(pc.is_in(status, value_set=pa.array(sorted(known))))
    t = t.append_column("_n_other", pc.cast(other, pa.int64()))
    t = t.append_column("_trunc", pc.cast(t.column("truncated"), pa.int64()))
    aggs = [
        ("step", "count"),
        ("_rkey", "count_distinct"),
        ("_gkey", "count_distinct"),
        ("total_length", "sum"),
        ("prompt_tokens", "sum"),
        ("response_length", "sum"),
        ("mask_sum", "sum"),
        ("rollout_mask_sum", "max"),
        ("_reward64", "mean"),
        ("_reward64", "min"),
        ("_reward64", "max"),
        ("raw_reward", "mean"),
        ("raw_reward", "min"),
        ("raw_reward", "max"),
        ("_trunc", "sum"),
    ] + [(f"_n_{s}", "sum") for s in STATUSES] + [("_n_other", "sum")]
    if group_by == "rollout_id":
        aggs.append(("group_index", "distinct"))
    g = t.group_by(keys, use_threads=False).aggregate(aggs)
    rename = {
        "step_count": "samples",
        "_rkey_count_distinct": "rollouts",
        "_gkey_count_distinct": "prompt_groups",
        "total_length_sum": "tokens",
        "prompt_tokens_sum": "prompt_tokens",
        "response_length_sum": "response_tokens",
        "mask_sum_sum": "mask_sum",
        "rollout_mask_sum_max": "rollout_mask_sum",
        "_reward64_mean": "reward_mean",
        "_reward64_min": "reward_min",
        "_reward64_max": "reward_max",
        "raw_reward_mean": "raw_reward_mean",
        "raw_reward_min": "raw_reward_min",
        "raw_reward_max": "raw_reward_max",
        "_trunc_sum": "truncated",
        "group_index_distinct": "group_indices",
    }
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


def _groups(table: pa.Table, group_by: str, sort: str | None, limit: int | None) -> tuple[list[dict], int]:
    col, order = _sort_spec(sort, group_by)
    if table.num_rows == 0:
        return [], 0
    g = _group_rows(table, group_by)
    keys = ["step", "rollout_id"] if group_by == "rollout_id" else [group_by]
    by = [(k, order) for k in keys] if col == "key" else [(col, order)] + [(k, "ascending") for k in keys]
    g = g.sort_by(by)  # nulls last (the default)
    total = g.num_rows
    if limit is not None and limit > 0:
        g = g.slice(0, limit)
    out = []
    for r in g.to_pylist():
        key = [r["step"], r["rollout_id"]] if group_by == "rollout_id" else r[group_by]
        row: dict[str, Any] = {"key": key, "samples": r["samples"], "rollouts": r["rollouts"], "prompt_groups": r["prompt_groups"],
                               "tokens": r["tokens"], "prompt_tokens": r["prompt_tokens"], "response_tokens": r["response_tokens"],
                               "mask_sum": r["mask_sum"]}
        if group_by == "rollout_id":
            row["rollout_mask_sum"] = r["rollout_mask_sum"]
            gis = r["group_indices"] or []
            row["group_index"] = sorted(gis, key=lambda x: (x is None, x)) if len(gis) != 1 else gis[0]
        for k in ("reward_mean", "reward_min", "reward_max", "raw_reward_mean", "raw_reward_min", "raw_reward_max"):
            row[k] = _r(r[k])
        row["truncated"] = r["truncated"]
        row["statuses"] = {s: r[f"_n_{s}_sum"] for s in STATUSES if r[f"_n_{s}_sum"]}
        if r["_n_other_sum"]:
            row["statuses"]["other"] = r["_n_other_sum"]
        out.append(row)
    return out, total


def inspect_paths(
    paths: list[str],
    group_by: str | None = None,
    options: InspectOptions | None = None,
    *,
    sort: str | None = None,
    limit: int | None = None,
) -> dict:
    """`{"summary": {...}, "groups": [...], "anomalies": [...]}` for dumps or converted output.

    Raises RolloutCliError (UsageError for bad arguments, InvalidInputError for unreadable input).
    """
    opts = options or InspectOptions()
    opts.check()
    if group_by is not None and group_by not in GROUP_BY:
        raise UsageError(f"--group-by: expected one of {', '.join(GROUP_BY)}")
    if limit is not None and limit < 0:
        raise UsageError("--limit: expected 0 or more")
    _sort_spec(sort, group_by or "rollout_id")  # validate before reading anything
    src = _resolve(list(paths), opts)
    anomalies = Anomalies(opts.max_anomalies)
    notes: list[str] = list(src.notes)
    if src.other_split:
        other = "eval" if opts.split == "train" else "train"
        what = "step(s)" if src.kind == "converted" else "input file(s)"
        notes.append(f"{src.other_split} {other} {what} not shown (--split {other} shows them)")
    tables: list[pa.Table] = []
    per_step: list[dict] = []
    spr: Counter = Counter()
    gsz: Counter = Counter()
    samples = rejected = 0
    for sd in _iter(src, opts, anomalies, notes):
        t = sd.rows
        samples += sd.samples
        rejected += sd.rejected
        rid = t.column("rollout_id").to_numpy()
        pg = t.column("pgroup").to_numpy()
        rcounts = np.unique(rid, return_counts=True)[1] if len(rid) else np.zeros(0, np.int64)
        gcounts = np.bincount(pg) if len(pg) else np.zeros(0, np.int64)
        spr.update(rcounts.tolist())
        gsz.update(gcounts.tolist())
        n = t.num_rows
        reward = t.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)
        raw = t.column("raw_reward").to_numpy()
        per_step.append({
            "split": sd.split,
            "step": sd.step,
            "source": sd.source,
            "samples": sd.samples,
            "rows": n,
            "rejected": sd.rejected,
            "rollouts": int(len(rcounts)),
            "prompt_groups": int(len(gcounts)),
            "tokens": int(pc.sum(t.column("total_length")).as_py() or 0),
            "mask_sum": int(pc.sum(t.column("mask_sum")).as_py() or 0),
            "response_length_mean": _r(t.column("response_length").to_numpy().mean()) if n else None,
            "raw_reward_mean": _r(raw.mean()) if n else None,
            "reward_mean": _r(np.nanmean(reward)) if n and not np.isnan(reward).all() else None,
            "reward_std": _r(np.nanstd(reward)) if n and not np.isnan(reward).all() else None,
            "truncation_rate": _r(t.column("truncated").to_numpy(zero_copy_only=False).mean()) if n else None,
            "zero_variance_groups": sd.zero_variance_groups,
        })
        tables.append(t)
    table = pa.concat_tables(tables) if tables else ROW_SCHEMA.empty_table()
    n = table.num_rows
    total = int(pc.sum(table.column("total_length")).as_py() or 0)
    resp = int(pc.sum(table.column("response_length")).as_py() or 0)
    status_counts = Counter(table.column("status").to_pylist()) if n else Counter()
    truncated = int(pc.sum(pc.cast(table.column("truncated"), pa.int64())).as_py() or 0)
    if src.kind == "converted":
        ms = [_read_manifest(o)["options"] for o in src.outputs]
        options_d: Any = ms[0] if len(ms) == 1 else ms
        defaults = InspectOptions()
        if opts.id_reward_options() != defaults.id_reward_options():
            notes.append("id and reward options apply to dumps only; converted output has the ids and rewards of its manifest's options")
    else:
        options_d = opts.id_reward_options()
    summary = {
        "input": src.kind,
        "split": opts.split,
        "files": (sum(len(s.get("shards", [])) for o in src.outputs for s in _read_manifest(o)["steps"]
                      if s["split"] == opts.split and any(p["step"] == s["step"] for p in per_step))
                  if src.kind == "converted" else len(per_step)),
        "steps": len(per_step),
        "samples": samples,
        "rows": n,
        "rejected": rejected,
        "rollouts": sum(p["rollouts"] for p in per_step),
        "prompt_groups": sum(p["prompt_groups"] for p in per_step),
        "tokens": {"prompt": total - resp, "response": resp, "total": total,
                   "mask_sum": int(pc.sum(table.column("mask_sum")).as_py() or 0)},
        "samples_per_rollout": _hist(spr),
        "group_sizes": _hist(gsz),
        "status": {s: status_counts[s] for s in STATUSES if status_counts[s]}
        | {s: c for s, c in sorted(status_counts.items()) if s not in STATUSES},
        "truncated": truncated,
        "truncation_rate": _r(truncated / n) if n else None,
        "rewards": {
            "raw_reward": _stats(table.column("raw_reward").to_numpy()),
            "reward": _stats(table.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)),
        },
        "per_step": per_step,
        "anomaly_counts": anomalies.count_dict(),
        "options": options_d,
        "group_by": group_by,
        "groups_total": 0,
        "notes": notes,
    }
    groups: list[dict] = []
    if group_by:
        groups, summary["groups_total"] = _groups(table, group_by, sort, limit)
    return {"summary": summary, "groups": groups, "anomalies": anomalies.items}


# -------------------------------------------------------------------------------------------- --show


def parse_rollout_ref(ref: str) -> tuple[int | None, int]:
    """`STEP:ID` or `ID`."""
    try:
        if ":" in ref:
            a, b = ref.split(":", 1)
            return int(a), int(b)
        return None, int(ref)
    except ValueError:
        raise UsageError(f"--show: expected STEP:ID or ID (integers), got {ref!r}") from None


def _mask_runs(mask: list | np.ndarray) -> list[list[int]]:
    """Run-length encoding [[value, length], ...] of a loss mask."""
    a = np.asarray(mask, dtype=np.int64)
    if not len(a):
        return []
    cut = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    lens = np.diff(np.r_[cut, len(a)])
    return [[int(a[c]), int(n)] for c, n in zip(cut.tolist(), lens.tolist())]


def _sample_view(r: dict, where: dict, text: bool) -> dict:
    d = {
        "where": where,
        "sample_index": r["sample_index"],
        "group_index": r["group_index"],
        "status": r["status"],
        "response_length": r["response_length"],
        "prompt_length": r["total_length"] - r["response_length"],
        "total_length": r["total_length"],
        "mask_sum": r["mask_sum"],
        "mask_runs": r.get("mask_runs"),
        "reward": _r(r["reward"]),
        "raw_reward": _r(r["raw_reward"]),
        "source_name": r["source_name"],
    }
    if text:
        d["prompt"], d["response"], d["label"] = r.get("prompt"), r.get("response"), r.get("label")
    return d


def show_rollout(paths: list[str], rollout: str, options: InspectOptions | None = None) -> dict:
    """One rollout's samples: `{"rollout": {"split", "step", "rollout_id", "samples": [...], ...}}`."""
    opts = options or InspectOptions()
    opts.check()
    want_step, want_id = parse_rollout_ref(rollout)
    src = _resolve(list(paths), opts)
    anomalies = Anomalies(0)
    notes: list[str] = []
    if src.kind == "converted":
        return _show_output(src, opts, want_step, want_id, anomalies, notes)
    units = src.units
    if any(u.input.path == "-" for u in units):
        raise UsageError("--show reads its input twice (ids, then text): save stdin to a file first")
    if want_step is None:
        if len(units) != 1:
            raise UsageError(f"--show {rollout}: {len(units)} {opts.split} inputs; name the step as STEP:ID")
    else:
        units = [u for u in units if u.step is None or u.step == want_step or u.input.format == "pt"]
    seen: set = set()
    for unit in units:
        sd = _dump_step(unit, opts, anomalies, seen, notes)
        if sd is None or (want_step is not None and sd.step != want_step):
            continue
        return _show_dump(sd, opts, want_id)
    raise UsageError(f"--show {rollout}: no {opts.split} step {want_step} in the input" if want_step is not None
                     else f"--show {rollout}: no {opts.split} input")


def _show_dump(sd: StepData, opts: InspectOptions, want_id: int) -> dict:
    from ..pipeline.validate import normalize_chunk

    t = sd.rows
    rid = t.column("rollout_id").to_numpy()
    sel = np.flatnonzero(rid == want_id)
    rej = np.flatnonzero(sd._assigned & sd._rejected & (sd._ids == want_id))
    if not len(sel) and not len(rej):
        raise UsageError(f"--show: step {sd.step} has no rollout {want_id}")
    rows = t.take(pa.array(sel)).to_pylist()
    by_pos = {r["pos"]: r for r in rows}
    # second pass over the file, text and masks of the wanted samples only
    payload: dict = {}
    base = 0
    for raw in _raw_chunks(sd._input, opts.trust_pickle, payload):
        lo, hi = base, base + len(raw)
        base = hi
        if not any(lo <= p < hi for p in by_pos):
            continue
        nc = normalize_chunk(raw, lo, reward_key=opts.reward_key, keep_text=True)
        for b in nc.batches:
            pos = b.column("_pos").to_pylist()
            masks = b.column("loss_mask")
            for k, p in enumerate(pos):
                if p in by_pos:
                    r = by_pos[p]
                    r["mask_runs"] = _mask_runs(masks[k].values.to_numpy(zero_copy_only=False))
                    r["prompt"], r["response"], r["label"] = (b.column(c)[k].as_py() for c in ("prompt", "response", "label"))
    samples = [_sample_view(r, _loc_dict(sd._where(r["pos"])), True) for r in rows]
    rejected = [dict({"where": _loc_dict(sd._where(i))}, **({"field": sd._reasons[i].field, "reason": sd._reasons[i].message}
                                                            if i in sd._reasons else {"field": None, "reason": "sibling of an invalid sample"}))
                for i in rej.tolist()]
    return {"rollout": {
        "split": sd.split, "step": sd.step, "rollout_id": want_id, "input": "dumps",
        "rollout_mask_sum": int(rows[0]["rollout_mask_sum"]) if rows else None,
        "samples": samples, "rejected": rejected, "text": True, "note": None,
    }}


def _show_output(src: _Sources, opts: InspectOptions, want_step: int | None, want_id: int, anomalies: Anomalies,
                 notes: list) -> dict:
    import pyarrow.parquet as pq

    candidates = []
    for out in src.outputs:
        m = _read_manifest(out)
        for s in m.get("steps", []):
            if s["split"] == opts.split and (want_step is None or s["step"] == want_step):
                candidates.append((out, s))
    if want_step is None and len(candidates) != 1:
        raise UsageError(f"--show {want_id}: {len(candidates)} {opts.split} steps in the output; name the step as STEP:ID")
    if not candidates:
        raise UsageError(f"--show: no {opts.split} step {want_step} in the output")
    out, s = candidates[0]
    samples = []
    text = False
    rms = None
    for sh in s.get("shards", []):
        path = os.path.join(out, sh["path"])
        try:
            pf = pq.ParquetFile(path, memory_map=True)
            names = pf.schema_arrow.names
            text = all(c in names for c in ("prompt", "response", "label"))
            cols = [c for c in _OUT_COLUMNS + ["prompt", "response", "label"] if c in names]
            r0 = 0
            for b in pf.iter_batches(batch_size=8192, columns=cols):
                hit = np.flatnonzero(b.column("rollout_id").to_numpy() == want_id)
                for k in hit.tolist():
                    r = {c: b.column(c)[k].as_py() for c in cols if c != "loss_mask"}
                    mask = b.column("loss_mask")[k].values.to_numpy(zero_copy_only=False)
                    r["mask_sum"] = int(mask.astype(np.int64).sum())
                    r["mask_runs"] = _mask_runs(mask)
                    r.setdefault("source_name", "unknown")
                    rms = r["rollout_mask_sum"]
                    samples.append(_sample_view(r, {"file": path, "row": r0 + k}, text))
                r0 += b.num_rows
        except (OSError, pa.ArrowException) as e:
            raise InvalidInputError(f"{path}: cannot read shard: {e}") from None
    if not samples:
        raise UsageError(f"--show: {opts.split} step {s['step']} has no rollout {want_id}")
    return {"rollout": {
        "split": opts.split, "step": int(s["step"]), "rollout_id": want_id, "input": "converted",
        "rollout_mask_sum": rms, "samples": samples, "rejected": [], "text": text,
        "note": None if text else "prompt, response and label are not in this output: convert with --keep-text to keep them",
    }}
