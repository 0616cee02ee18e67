"""One step of an audit: the rollout dump read and validated in chunks by convert's own stage
functions (inputs.registry.read_input, pipeline.validate.normalize_chunk, then
pipeline.assemble.StepAssembler for ids, rewards and the denominators), each chunk's samples
compared with the trainer's as they come, then the step-wide fields.

Memory: the train dump of the step is held whole (one step at a time); the rollout dump is
held as its reader holds it (a .pt payload is freed chunk by chunk), plus per-sample sums.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from ..core import slime_keys as K
from ..core import tensors
from ..core.errors import InvalidInputError, Location, StepProblems
from ..inputs.registry import format_of, read_input
from ..inputs.train_pt.reader import TrainDump
from ..inputs.units import Unit, record_step
from ..inspection.loss_weight import loss_weight
from ..pipeline.assemble import StepAssembler
from ..pipeline.validate import normalize_chunk
from ..text.tokenizer import image_rule
from . import diff, loss_side, rules
from .mismatch import Pair, TokenStats
from .options import AuditOptions

CHUNK_RECORDS = 256


@dataclass
class StepAudit:
    """One step's findings, as plain data (`to_dict`) plus, with keep_tokens, each sample's d."""

    step: int
    rollout_file: str | None
    train_file: str | None
    rollout_samples: int = 0
    train_samples: int = 0
    paired: int = 0
    divergences: list[dict] = field(default_factory=list)  # listed (at most max_divergences)
    divergence_count: int = 0
    by_field: dict[str, int] = field(default_factory=dict)
    mismatch: dict | None = None
    ref_mismatch: dict | None = None
    advantages: dict | None = None
    entropy: dict | None = None
    rollouts: list[dict] = field(default_factory=list)
    loss_weight: dict | None = None
    rollout_log_probs_from: str | None = None
    # rollout position -> (rollout id, d per response token (NaN where not counted), trainer mask)
    tokens: dict[int, tuple] = field(default_factory=dict)
    rollout_of: dict[int, int] = field(default_factory=dict)  # rollout position -> rollout id
    cap: int | None = None
    rule_findings: list[dict] = field(default_factory=list)  # the step's `rules` entries (auditing/rules.py)
    trainer_rules: dict = field(default_factory=dict)  # field -> the trainer's rule and what it explains
    notes: list[str] = field(default_factory=list)

    def add(self, rec: dict) -> None:
        self.divergence_count += 1
        self.by_field[rec["field"]] = self.by_field.get(rec["field"], 0) + 1
        if self.cap is None or len(self.divergences) < self.cap:
            self.divergences.append(rec)

    def to_dict(self) -> dict:
        return {
            "step": self.step, "rollout_file": self.rollout_file, "train_file": self.train_file,
            "samples": {"rollout": self.rollout_samples, "train": self.train_samples, "paired": self.paired},
            "divergences": self.divergence_count, "divergences_by_field": dict(sorted(self.by_field.items())),
            "mismatch": self.mismatch, "ref_mismatch": self.ref_mismatch, "advantages": self.advantages,
            "entropy": self.entropy, "rollout_log_probs_from": self.rollout_log_probs_from, "rollouts": self.rollouts,
            "loss_weight": self.loss_weight, "trainer_rules": self.trainer_rules,
        }


def _lists(batch, name: str):
    """(offsets, values, valid) of a list column of a validated batch."""
    col = batch.column(name)
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return col.offsets.to_numpy(), col.values.to_numpy(zero_copy_only=False), valid


class _Compare:
    """The per-sample comparisons and token figures of one step, fed batch by batch."""

    def __init__(self, sa: StepAudit, td: TrainDump, opts: AuditOptions):
        self.sa, self.td, self.opts = sa, td, opts
        self.index = td.index()
        self.seen: set[int] = set()
        self.mismatch = Pair(K.LOG_PROBS, K.ROLLOUT_LOG_PROBS)
        self.ref = Pair(K.REF_LOG_PROBS, K.LOG_PROBS)
        self.adv = TokenStats(K.ADVANTAGES)
        self.ent = TokenStats("entropy")
        self.lp_from: set[str] = set()
        self.masks: dict[int, np.ndarray] = {}  # rollout position -> its loss mask (bool), for the loss side

    def batch(self, batch, where) -> None:
        pos = batch.column("_pos").to_numpy()
        t_off, t_val, _ = _lists(batch, "tokens")
        m_off, m_val, _ = _lists(batch, "loss_mask")
        l_off, l_val, l_ok = _lists(batch, "rollout_log_probs")
        rl = batch.column("response_length").to_numpy()
        removed = batch.column("remove_sample").to_numpy(zero_copy_only=False)
        mm = batch.column("multimodal_train_inputs")
        mm = tensors.decode_column(mm) if mm.null_count < len(mm) else [None] * len(pos)
        for k, p in enumerate(pos.tolist()):
            j = self.index.get(p)
            if j is None:
                continue  # missing: reported once the step's rows are known
            self.seen.add(p)
            self.masks[p] = m_val[m_off[k]:m_off[k + 1]] != 0
            ts = self.td.samples[j]
            loc = str(where(p))
            lp = l_val[l_off[k]:l_off[k + 1]] if l_ok[k] else None
            self._sample(p, loc, ts, t_val[t_off[k]:t_off[k + 1]], int(rl[k]), m_val[m_off[k]:m_off[k + 1]], lp,
                         bool(removed[k]), mm[k])

    def _sample(self, p: int, loc: str, ts: dict, tokens, rl: int, mask, lp, removed: bool, mm=None) -> None:
        """A field the trainer's dump does not hold (None or absent) is not compared."""
        sa, train = self.sa, self.td.display
        for fld, key, expected, how in (("tokens", K.TOKENS, tokens, diff.array_diff),
                                        ("response_length", K.RESPONSE_LENGTHS, rl, diff.exact_diff),
                                        ("loss_mask", K.LOSS_MASKS, mask, diff.array_diff),
                                        ("rollout_log_probs", K.ROLLOUT_LOG_PROBS, lp, diff.array_diff),
                                        ("remove_sample", "remove_sample", removed, diff.flag_diff),
                                        ("multimodal_train_inputs", K.MULTIMODAL_TRAIN_INPUTS, mm, diff.multimodal_diff)):
            got = ts.get(key)
            if got is None or expected is None:
                continue
            d = how(expected, got)
            if d:
                sa.add(diff.record(sa.step, p, fld, loc, train, d))
        self._tokens(p, ts, lp)

    def _tokens(self, p: int, ts: dict, lp) -> None:
        """The token figures of one sample, over the trainer's own mask (its response length)."""
        m = ts.get(K.LOSS_MASKS)
        n = ts.get(K.RESPONSE_LENGTHS)
        if m is None or not isinstance(n, int) or len(m) != n:
            return
        m = np.asarray(m) != 0
        if lp is not None and len(lp) == n:
            self.lp_from.add("rollout dump")
        elif ts.get(K.ROLLOUT_LOG_PROBS) is not None:
            lp = ts[K.ROLLOUT_LOG_PROBS]
            self.lp_from.add("train dump")
        lps = ts.get(K.LOG_PROBS)
        if lps is not None and lp is not None:
            self.mismatch.add(p, lps, lp, m)
        if lps is not None and ts.get(K.REF_LOG_PROBS) is not None:
            self.ref.add(p, ts[K.REF_LOG_PROBS], lps, m)
        for st in (self.adv, self.ent):
            v = ts.get(st.name)
            if v is not None:
                st.add(v, m)
        if self.opts.keep_tokens:
            d = np.full(n, np.nan, dtype=np.float32)
            if lps is not None and lp is not None:
                d[m] = (lps[m].astype(np.float64) - np.asarray(lp)[m].astype(np.float64)).astype(np.float32)
            self.sa.tokens[p] = (None, d, m.astype(np.uint8))


MAX_PROBLEMS = 20  # as convert lists under --on-error fail


def _fail(display: str, problems: list) -> InvalidInputError:
    """Invalid rollout samples: convert fails on them, so no expected values exist (exit 3)."""
    shown = problems[:MAX_PROBLEMS]
    more = f" (first {MAX_PROBLEMS} shown)" if len(problems) > MAX_PROBLEMS else ""
    return InvalidInputError(f"{len(problems)} invalid sample(s) in {display}{more}: {shown[0]}", shown)


def audit_step(unit: Unit, first, reading, step: int, td: TrainDump, opts: AuditOptions) -> StepAudit:
    """Compare one rollout step (its reading begun: `first` chunk taken) with its train dump."""
    inp = unit.input
    sa = StepAudit(step, inp.display, td.display, train_samples=len(td.samples), cap=opts.max_divergences)
    cmp = _Compare(sa, td, opts)
    asm = StepAssembler.of_input(inp, opts, columns=["raw_reward", "sample_index"])
    images = image_rule(opts)
    for raw_chunk in chain([first] if first is not None else [], reading):
        nc = normalize_chunk(raw_chunk, asm.records, reward_key=opts.reward_key, keep_text=False, step=record_step(inp),
                             rewards_recorded=format_of(inp.format).rewards_recorded, images=images)
        base = asm.records

        def where(p: int, nc=nc, base=base) -> Location:
            return Location(nc.source, nc.kind, nc.numbers[p - base])

        for b in nc.batches:
            cmp.batch(b, where)
        asm.add(nc)
        del nc
    records = sa.rollout_samples = asm.records
    if asm.problems:
        raise _fail(inp.display, [p for _, p in asm.problems])
    try:
        st = asm.finish(step, fail=True)
    except StepProblems as e:
        raise _fail(inp.display, e.args[0] if e.args else []) from None
    sf, where, rows = st.fields, st.where, st.rows
    pos = rows.column("_pos").to_numpy()
    masks = rows.column("_mask_total").to_numpy()
    values = rows.column("_reward_value").to_numpy()
    index_of = [None] * records
    for p, v in zip(pos.tolist(), rows.column("sample_index").to_pylist()):
        index_of[p] = v
    rch, ich = _choose(sa, td, pos, sf, values, masks, st.id_state, st.explicit, st.group_index, index_of, opts)
    _step_fields(sa, td, pos, sf, rows.column("raw_reward").to_numpy(), where, rch, ich)
    _loss_side(sa, td, pos, sf, masks, rch, ich, where, opts, cmp.masks)
    _figures(sa, cmp, pos, sf, td, where, records)
    sa.loss_weight = loss_weight(sf.ids[pos], masks, sf.mask_sums, sf.group_mask_sums, sf.group_rollouts, sf.step_totals)
    return sa


def _got(td: TrainDump, pos: np.ndarray, key: str) -> list:
    """The trainer's value of `key` per rollout row (rules.ABSENT where it holds none)."""
    index = td.index()
    out = []
    for p in pos.tolist():
        j = index.get(p)
        v = rules.ABSENT if j is None or key not in td.samples[j] else td.samples[j][key]
        out.append(rules.ABSENT if v is None and key == K.REWARDS else v)
    return out


def _choose(sa: StepAudit, td: TrainDump, pos, sf, values, masks, id_state, explicit, group_index, index_of, opts):
    """The trainer's reward and id rules (auditing/rules.py): findings, and what each explains."""
    keys = rules.prompt_keys([group_index[p] for p in pos.tolist()], opts)
    rch = rules.choose_reward(values, keys, sf.ids[pos], _got(td, pos, K.REWARDS), pos, opts)
    ich = rules.choose_ids(id_state, explicit, group_index, index_of, opts.rollout_id_scope, _got(td, pos, K.ROLLOUT_IDS),
                           pos, masks, sf.group_labels)
    for ch in (rch, ich):
        sa.notes.extend(ch.notes)
        sa.trainer_rules[ch.field] = ch.summary()
        e = rules.entry(sa.step, ch)
        if e is not None:
            sa.rule_findings.append(e)
    return rch, ich


def _loss_side(sa: StepAudit, td: TrainDump, pos, sf, masks, rch, ich, where, opts, loss_masks: dict) -> None:
    """Denominators under the trainer's ids, advantages under its rewards (auditing/loss_side.py)."""
    rewards = dict(zip(pos.tolist(), rch.values if rch.values else sf.rewards.tolist()))
    recs, compared = loss_side.denominator_divergences(sa.step, rules.labels_of(ich.values), masks, sf.group_labels,
                                                       pos, td, where)
    all_present = set(td.positions.tolist()) >= set(pos.tolist())
    adv_rule, adv, notes = loss_side.advantage_check(sa.step, td, opts, all_present, lambda p: str(where(p)),
                                                        loss_masks, rewards)
    for r in recs + adv:
        sa.add(r)
    sa.notes.extend(notes)
    sa.trainer_rules["loss_side"] = {"denominators": compared, "advantages": adv_rule}


def _step_fields(sa: StepAudit, td: TrainDump, pos: np.ndarray, sf, raw: np.ndarray, where, rch, ich) -> None:
    """Rollout id, reward (each against the trainer's rule's values) and raw reward per paired
    sample; then missing and extra samples."""
    rewards = rch.values if rch.values else sf.rewards.tolist()
    index = td.index()
    train = td.display
    rr = td.raw_reward
    if rr is not None and len(rr) != sa.rollout_samples:
        sa.add(diff.record(sa.step, None, "raw_reward", None, train,
                           {"expected": {"length": sa.rollout_samples}, "got": {"length": len(rr)}}))
    for k, p in enumerate(pos.tolist()):
        j = index.get(p)
        if j is None:
            sa.add(diff.record(sa.step, p, "missing", str(where(p)), train, {"expected": "a training sample", "got": None}))
            continue
        sa.paired += 1
        ts = td.samples[j]
        loc = str(where(p))
        if K.ROLLOUT_IDS in ts and not rules.same_id(ich.values[k], ts[K.ROLLOUT_IDS]):
            d = {"expected": diff.plain(ich.values[k]), "got": diff.plain(ts[K.ROLLOUT_IDS])}
            sa.add(diff.record(sa.step, p, "rollout_id", loc, train, d))
        if ts.get(K.REWARDS) is not None:
            d = diff.reward_diff(float(rewards[k]), ts[K.REWARDS])
            if d:
                sa.add(diff.record(sa.step, p, "reward", loc, train, d))
        if rr is not None and p < len(rr):
            d = diff.reward_diff(float(raw[k]), rr[p])
            if d:
                sa.add(diff.record(sa.step, p, "raw_reward", loc, train, d))
    rows = set(pos.tolist())
    for p in td.positions.tolist():
        if p not in rows:
            sa.add(diff.record(sa.step, p, "extra", None, train, {"expected": None, "got": "a training sample"}))


def _figures(sa: StepAudit, cmp: _Compare, pos: np.ndarray, sf, td: TrainDump, where, records: int) -> None:
    """The step's mismatch, reference and token statistics, and the per-rollout mismatch; each
    top token with its rollout id and rollout-dump location."""
    rollout_of = {int(p): int(sf.ids[p]) for p in pos.tolist()}
    for p, j in td.index().items():  # extra samples: the trainer's own ids
        if p not in rollout_of and isinstance(td.samples[j].get(K.ROLLOUT_IDS), int):
            rollout_of[p] = td.samples[j][K.ROLLOUT_IDS]
    sa.mismatch = cmp.mismatch.step()
    sa.ref_mismatch = cmp.ref.step()
    for m in (sa.mismatch, sa.ref_mismatch):
        for t in (m or {}).get("top_tokens", []):
            p = t["rollout_position"]
            t["rollout_id"] = rollout_of.get(p)
            t["rollout"] = str(where(p)) if p < records else None
    sa.advantages = cmp.adv.result()
    sa.entropy = cmp.ent.result()
    sa.rollout_log_probs_from = " and ".join(sorted(cmp.lp_from)) or None
    per = cmp.mismatch.by_rollout(rollout_of)
    counts: dict[int, int] = {}
    for p in rollout_of:
        counts[rollout_of[p]] = counts.get(rollout_of[p], 0) + 1
    sa.rollouts = [{"rollout_id": rid, "samples": counts.get(rid, 0), "mismatch": per.get(rid)} for rid in sorted(counts)]
    if sa.tokens:
        sa.tokens = {p: (rollout_of.get(p), d, m) for p, (_, d, m) in sa.tokens.items()}
    sa.rollout_of = rollout_of
    for r in sa.divergences:
        r["rollout_id"] = rollout_of.get(r["rollout_position"]) if r["rollout_position"] is not None else None
