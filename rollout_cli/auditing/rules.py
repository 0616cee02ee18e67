"""Which known rule the trainer ran, per step and derived field (`reward`, `rollout_id`).

Every named rule of pipeline/rewards.py (REWARD_RULES) and pipeline/ids.py (ID_RULES) is run on
the step's rollout samples; the one whose values match the trainer's on the most paired
samples is the trainer's rule (rewards within diff.reward_diff's float32 tolerance, ids exactly;
ties go to the rule convert runs with the given options, then to the registry's order). The
samples that rule does not explain are the field's divergences; the rule itself, where it is
not the expected one and the two give different values, is a finding (`rules` in --json) with
what it cost: for rewards the samples whose advantage changes sign and the prompt groups
normalised together with other prompts' samples, for ids each affected rollout's share of the
step's loss weight under both id sets (inspection/loss_weight.py's aggregations).

`slime_positional` without --rollout-batch-size is tried in both of its cases: rows of
n_samples_per_prompt, and the whole batch as one row.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import UsageError
from ..inspection.loss_weight import MODES, token_weights
from ..pipeline.fields import group_fields, rollout_mask_sums, step_fields
from ..pipeline.ids import EXPECTED_ID_RULE, ID_RULE_SOURCES, ID_RULES, apply_id_rule
from ..pipeline.rewards import (REWARD_RULE_SOURCES, REWARD_RULES, SiblingRewardConflict, apply_reward_rule,
                                expected_reward_rule, group_keys, group_labels, slime_row_length)
from . import diff

SOURCES = {**REWARD_RULE_SOURCES, **ID_RULE_SOURCES}


@dataclass
class Choice:
    """One field's outcome on one step: the trainer's rule and its values per rollout row."""

    field: str
    trainer_rule: str
    expected_rule: str
    values: list  # per rollout row: the trainer rule's value (float32 reward, or id / None)
    expected: list  # per rollout row: the expected rule's value
    explained: int  # paired samples the trainer's rule explains
    compared: int  # paired samples the trainer holds a value for
    detail: str | None = None  # the case of a rule that has several (slime_positional's rows)
    finding: dict | None = None  # the `rules` entry, where the two rules differ on some sample
    notes: list = field(default_factory=list)

    def summary(self) -> dict:
        """The step's `trainer_rules[field]`: the rule named and how many samples it explains."""
        out = {"trainer_rule": self.trainer_rule, "expected_rule": self.expected_rule, "explained": self.explained,
               "compared": self.compared, "source": SOURCES[self.trainer_rule]}
        if self.detail:
            out["case"] = self.detail
        return out


# ------------------------------------------------------------------------------ comparisons


def _reward_same(e: float, g: Any) -> bool:
    return diff.reward_diff(float(e), g) is None


def _id_value(v: Any) -> Any:
    if v is None:
        return None
    n = diff.number(v)
    return v if n is None else n


def same_id(e: Any, g: Any) -> bool:
    return _id_value(e) == _id_value(g)


def _best(candidates: list[tuple], got: list, same, expected: str) -> tuple[int, list[int]]:
    """Index of the candidate `(rule, case, values, ...)` matching `got` (ABSENT: the trainer
    holds no value) on the most samples (ties: the expected rule, then the order given), and
    each candidate's count."""
    counts = [sum(1 for v, g in zip(c[2], got) if g is not ABSENT and same(v, g)) for c in candidates]
    order = sorted(range(len(candidates)), key=lambda i: (-counts[i], candidates[i][0] != expected, i))
    return order[0], counts


ABSENT = object()  # the trainer holds no value for this row (unpaired, or the key is absent)


# ------------------------------------------------------------------------------ rewards


def prompt_keys(group_index: list, opts) -> list | None:
    """The step's prompt-group keys (group_index, chunks of n where missing), None when unknown."""
    try:
        return group_keys(group_index, opts.n_samples_per_prompt)
    except ValueError:
        return None


def _positional_cases(size: int, opts) -> list[tuple[Any, str, int]]:
    """(options, case, row length) of slime_positional: the given --rollout-batch-size, or both cases."""
    n = opts.n_samples_per_prompt
    if opts.rollout_batch_size:
        rbs = opts.rollout_batch_size
        cases = [rbs]
    else:
        cases = ([size // n] if n and size and size % n == 0 and size // n > 1 else []) + [None]
    out = []
    for rbs in cases:
        rows = slime_row_length(size, n, rbs)
        case = "the whole batch as one row" if rows == size else f"rows of {rows} consecutive samples"
        out.append((dataclasses.replace(opts, rollout_batch_size=rbs), case, rows))
    return out


def reward_candidates(values: np.ndarray, keys: list | None, ids: np.ndarray, opts) -> tuple[list, list[str]]:
    """[(rule, case, float32 rewards per row, row length)] of every reward rule that can run
    here (the row length: slime_positional's, else None), and notes."""
    out, notes = [], []
    for name in REWARD_RULES:
        if name in ("group", "group_rollout") and keys is None:
            continue  # prompt groups unknown
        cases = _positional_cases(len(values), opts) if name == "slime_positional" else [(opts, None, None)]
        for o, case, rows in cases:
            try:
                with warnings.catch_warnings():  # torch's one-sample-row std warning: the NaN is the rule's value
                    warnings.simplefilter("ignore", UserWarning)
                    out.append((name, case, apply_reward_rule(name, values, keys, ids, o).tolist(), rows))
            except SiblingRewardConflict:
                pass  # the rule is undefined on this batch
            except UsageError as e:
                notes.append(f"reward rule {name} not tried: {e}")
    return out, notes


def _normalised_together(rows: int | None, labels: np.ndarray, keys: list) -> list:
    """The prompt groups whose rewards share a row with other prompts' samples (slime's rows of
    `rows` consecutive samples); [] when rewards are not normalised by rows."""
    if rows is None or not len(labels):
        return []
    mixed: dict[int, Any] = {}
    for s in range(0, len(labels), max(rows, 1)):
        chunk = labels[s:s + rows]
        if len(np.unique(chunk)) > 1:
            for k in np.unique(chunk).tolist():
                mixed.setdefault(k, None)
    first = {}
    for i, lab in enumerate(labels.tolist()):
        first.setdefault(lab, i)
    return [diff.plain(keys[first[k]]) if not isinstance(keys[first[k]], tuple) else f"chunk {keys[first[k]][1]}"
            for k in sorted(mixed)]


def choose_reward(values: np.ndarray, keys: list | None, ids: np.ndarray, got: list, row_pos: np.ndarray,
                  opts) -> Choice:
    """The trainer's reward rule for one step (`got`: its reward per rollout row, or ABSENT)."""
    expected = expected_reward_rule(opts)
    cands, notes = reward_candidates(values, keys, ids, opts)
    exp_vals = next((c[2] for c in cands if c[0] == expected), None)
    if exp_vals is None:  # not computable (no prompt groups, no torch): nothing to name against
        return Choice("reward", expected, expected, [], [], 0, 0, notes=notes)
    k, counts = _best(cands, got, _reward_same, expected)
    name, case, vals, rows = cands[k]
    ch = Choice("reward", name, expected, vals, exp_vals, counts[k], sum(g is not ABSENT for g in got), case,
                notes=notes)
    if name != expected:
        e, t = np.asarray(exp_vals, dtype=np.float64), np.asarray(vals, dtype=np.float64)
        differ = [i for i in range(len(e)) if not _reward_same(e[i], t[i])]
        if differ:
            delta = np.abs(e[differ] - t[differ])
            delta = delta[np.isfinite(delta)]
            tol = diff.REWARD_ATOL
            sign = [i for i in differ if np.sign(e[i]) * (abs(e[i]) > tol) != np.sign(t[i]) * (abs(t[i]) > tol)]
            together = _normalised_together(rows, group_labels(keys), keys) if keys is not None else []
            ch.finding = {
                "samples": len(differ), "max_abs_delta": float(delta.max()) if len(delta) else None,
                "positions": row_pos[differ].tolist(),
                "cost": {"advantage_sign_changes": row_pos[sign].tolist(),
                         "groups_normalised_with_others": together},
            }
    return ch


# ------------------------------------------------------------------------------ rollout ids


def id_candidates(id_state: np.ndarray, explicit: np.ndarray, group_index: list, sample_index: list,
                  scope: str) -> list:
    """[(rule, None, id per record)] of every id rule."""
    return [(name, None, apply_id_rule(name, id_state, explicit, group_index, sample_index, scope)) for name in ID_RULES]


def labels_of(ids: list) -> np.ndarray:
    """int64 labels for ids of any hashable kind (None is one rollout, as slime groups it)."""
    index: dict = {}
    return np.fromiter((index.setdefault(_id_value(v), len(index)) for v in ids), dtype=np.int64, count=len(ids))


def sample_shares(ids: list, masks: np.ndarray, groups: np.ndarray) -> dict[str, np.ndarray]:
    """Per row and aggregation (inspect.loss_weight.MODES), the share of the step's loss weight
    its tokens carry when the rollouts are `ids`."""
    lab = labels_of(ids)
    m = np.asarray(masks, dtype=np.float64)
    g_sums, g_rollouts = group_fields(groups, lab, masks)
    w = token_weights(m, rollout_mask_sums(lab, masks), g_sums, g_rollouts, step_fields(lab, masks, groups))
    out = {}
    for mode, x in w.items():
        per = x * m
        total = per.sum()
        out[mode] = per / total if total > 0 else np.zeros(len(m))
    return out


def id_cost(expected: list, trainer: list, masks: np.ndarray, groups: np.ndarray, row_pos: np.ndarray) -> list[dict]:
    """Each expected rollout whose samples the trainer's ids group otherwise: its share of the
    step's loss weight under the expected ids and under the trainer's, per aggregation; the
    largest move first."""
    if not len(expected):
        return []
    e_lab, t_lab = labels_of(expected), labels_of(trainer)
    e_share, t_share = sample_shares(expected, masks, groups), sample_shares(trainer, masks, groups)
    members: dict[int, list[int]] = {}
    for i, lab in enumerate(e_lab.tolist()):
        members.setdefault(lab, []).append(i)
    t_members: dict[int, set] = {}
    for i, lab in enumerate(t_lab.tolist()):
        t_members.setdefault(lab, set()).add(i)
    out = []
    for rows in members.values():
        if all(t_members[t_lab[i]] == set(rows) for i in rows):
            continue  # the same samples form one rollout on both sides
        share = {mode: float(e_share[mode][rows].sum()) for mode in MODES}
        t = {mode: float(t_share[mode][rows].sum()) for mode in MODES}
        out.append({"rollout_id": diff.plain(expected[rows[0]]), "positions": row_pos[rows].tolist(),
                    "trainer_rollout_ids": list(dict.fromkeys(diff.plain(trainer[i]) for i in rows)),
                    "share": share, "trainer_share": t,
                    "max_shift": max(abs(t[m] - share[m]) for m in MODES)})
    out.sort(key=lambda r: (-r["max_shift"], r["positions"][0]))
    return out


def choose_ids(id_state: np.ndarray, explicit: np.ndarray, group_index: list, sample_index: list, scope: str,
               got: list, row_pos: np.ndarray, masks: np.ndarray, groups: np.ndarray) -> Choice:
    """The trainer's rollout-id rule for one step (`got`: its id per rollout row, or ABSENT).
    Ids are per record; rows are records here (audit fails on invalid samples)."""
    cands = id_candidates(id_state, explicit, group_index, sample_index, scope)
    cands = [(n, c, [v[p] for p in row_pos.tolist()]) for n, c, v in cands]
    k, counts = _best(cands, got, same_id, EXPECTED_ID_RULE)
    name, _, vals = cands[k]
    exp_vals = next(c[2] for c in cands if c[0] == EXPECTED_ID_RULE)
    ch = Choice("rollout_id", name, EXPECTED_ID_RULE, vals, exp_vals, counts[k], sum(g is not ABSENT for g in got))
    if name != EXPECTED_ID_RULE:
        differ = [i for i in range(len(vals)) if not same_id(exp_vals[i], vals[i])]
        if differ:
            ch.finding = {"samples": len(differ), "positions": row_pos[differ].tolist(),
                          "cost": {"loss_weight": id_cost(exp_vals, vals, masks, groups, row_pos)}}
    return ch


def entry(step: int, ch: Choice) -> dict | None:
    """The `rules` entry of a choice (None where the rules agree on every sample)."""
    if ch.finding is None:
        return None
    out = {"step": step, "field": ch.field, "trainer_rule": ch.trainer_rule, "expected_rule": ch.expected_rule,
           "samples": ch.finding["samples"]}
    if "max_abs_delta" in ch.finding:
        out["max_abs_delta"] = ch.finding["max_abs_delta"]
    out["positions"] = ch.finding["positions"]
    if ch.detail:
        out["case"] = ch.detail
    out["source"] = SOURCES[ch.trainer_rule]
    out["cost"] = ch.finding["cost"]
    return out
