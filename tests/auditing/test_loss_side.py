"""The loss side of an audit: denominators compared under the trainer's ids, advantages under
its rewards (broadcast, whitened), on train dumps built by the stand-in of slime's payload builder."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import train_dumps as T
from rollout_cli.auditing import AuditOptions, audit_paths

N, PROMPTS = 2, 3
compact = T.compact


def _audit(root: Path, samples, *, edit=None, opts: dict | None = None, drop: str | None = None, **train) -> dict:
    paths = T.write_train(root / "train_data", samples, 0, n=N, rbs=PROMPTS, edit=edit, **train)
    if drop is not None:
        next(p for p in paths if p.name == drop).unlink()
    T.write_rollout(root / "rollout_data", samples, 0, "pt")
    return audit_paths([str(root / "rollout_data")], [str(root / "train_data")],
                       AuditOptions(n_samples_per_prompt=N, **(opts or {})))


def _found(r: dict) -> list[tuple]:
    return [(d["rollout_position"], d["field"]) for d in r["divergences"]]


def test_per_sample_denominators_are_divergences(tmp_path):
    """The bug class of slime's #1965: each sample's own mask sum instead of its rollout's."""
    def edit(p):
        for s in p["samples"]:
            s["rollout_mask_sums"] = float(s["loss_masks"].sum())
    r = _audit(tmp_path, compact(), edit=edit)
    # only the compact rollout's two siblings (positions 0 and 1) have a sum over two samples
    assert _found(r) == [(0, "rollout_mask_sum"), (1, "rollout_mask_sum")]
    d = r["divergences"][0]
    assert d["train_field"] == "rollout_mask_sums" and d["expected"] == 6 and d["got"] == 3
    assert r["steps"][0]["trainer_rules"]["loss_side"]["denominators"] == ["rollout_mask_sum"]


def test_mask_sums_follow_the_trainers_own_ids(tmp_path):
    """A trainer that ran #1965's rule summed per its own ids: a rule, not divergences."""
    r = _audit(tmp_path, compact(), id_rule="first_sample")
    assert r["summary"]["divergences"] == 0
    assert [e["field"] for e in r["rules"]] == ["reward", "rollout_id"]


def test_every_denominator_the_dump_holds_is_compared(tmp_path):
    def edit(p):
        for s in p["samples"]:
            s["group_mask_sums"] = 6.0  # right for every group of two unremoved samples of 3 tokens
            s["step_samples"] = 7
        p["samples"][5]["step_samples"] = 6
    r = _audit(tmp_path, compact(), edit=edit)
    # group 2 has three samples: 9 tokens
    assert _found(r) == [(4, "group_mask_sum"), (5, "group_mask_sum"), (6, "group_mask_sum"), (5, "step_samples")]
    assert r["steps"][0]["trainer_rules"]["loss_side"]["denominators"] == [
        "rollout_mask_sum", "group_mask_sum", "step_samples"]


def test_a_negated_advantage_is_a_divergence(tmp_path):
    def edit(p):
        p["samples"][2]["advantages"] = -p["samples"][2]["advantages"]
    r = _audit(tmp_path, compact(), edit=edit)
    assert _found(r) == [(2, "advantages")]
    d = r["divergences"][0]
    assert d["index"] == 1 and d["differing"] == 3 and d["got"] == pytest.approx(-d["expected"])
    assert r["steps"][0]["trainer_rules"]["loss_side"]["advantages"] == "broadcast"


def test_advantages_follow_the_trainers_reward_rule(tmp_path):
    """Advantages broadcast from slime's positional rewards: no divergence though the
    expected rule differs (the rule is reported once)."""
    r = _audit(tmp_path, compact())
    assert r["summary"]["divergences"] == 0 and [e["field"] for e in r["rules"]] == ["reward"]


@pytest.mark.parametrize("per_rank", [False, True])
def test_whitened_advantages_over_every_rank(tmp_path, per_rank):
    r = _audit(tmp_path, compact(), whiten=True, dp=2, per_rank=per_rank)
    assert r["summary"]["divergences"] == 0, r["divergences"]
    assert r["steps"][0]["trainer_rules"]["loss_side"]["advantages"] == "whitened"


def test_whitened_advantage_changed_is_found(tmp_path):
    def edit(p):
        a = p["samples"][3]["advantages"].clone()
        a[2] += 0.5
        p["samples"][3]["advantages"] = a
    r = _audit(tmp_path, compact(), whiten=True, dp=2, edit=edit)
    assert _found(r) == [(3, "advantages")] and r["divergences"][0]["index"] == 2


def test_whitening_without_every_rank_is_a_note(tmp_path):
    r = _audit(tmp_path, compact(), whiten=True, dp=2, per_rank=True, drop="0_1.pt")
    assert {d["field"] for d in r["divergences"]} == {"missing"}
    assert any("every rank's train dump" in n for n in r["summary"]["notes"])
    assert r["steps"][0]["trainer_rules"]["loss_side"]["advantages"] is None


def test_other_estimators_are_noted_not_compared(tmp_path):
    def edit(p):
        for s in p["samples"]:
            s["advantages"] = torch.as_tensor(np.linspace(-1, 1, len(s["loss_masks"])), dtype=torch.float32)
    r = _audit(tmp_path, compact(), edit=edit, opts={"advantage_estimator": "ppo"}, advantage_estimator="ppo")
    assert r["summary"]["divergences"] == 0
    assert any("--advantage-estimator ppo" in n and "not compared" in n for n in r["summary"]["notes"])
