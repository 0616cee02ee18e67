"""`rollout-cli audit`: the table and exit 0 on a clean run, each divergence named and exit 4,
exit 3 on invalid input, and the --json object."""
from __future__ import annotations

import inspect as pyinspect
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import train_dumps as T
from rollout_cli.auditing.mismatch import KEYS
from rollout_cli.auditing.options import DEFAULT_MAX_DIVERGENCES
from rollout_cli.cli.app import app
from rollout_cli.cli.audit import audit_cmd


def _run_dir(root: Path, edit=None) -> Path:
    for step in (0, 1):
        samples = T.rollout_samples(step)
        T.write_rollout(root / "rollout_data", samples, step, "pt")
        T.write_train(root / "train_data", samples, step, n=2, rbs=3, dp=2,
                      edit=None if edit is None else (lambda p, s=step: edit(s, p)))
    return root


def _audit(*args):
    return CliRunner().invoke(app, ["audit", *map(str, args)])


def test_clean_run_exits_0_with_the_mismatch_table(tmp_path):
    root = _run_dir(tmp_path)
    r = _audit(root / "rollout_data", "--train", root / "train_data")
    assert r.exit_code == 0, r.output
    assert "0 divergence(s)" in r.output
    lines = r.output.splitlines()
    assert lines[1].split() == ["step", "samples", "tokens", "mean|d|", "max|d|", "k1", "k3", ">2", "<0.5", "divergences"]
    assert lines[2].split()[:3] == ["0", "6", "18"]


def test_divergences_exit_4_naming_step_position_field(tmp_path):
    def edit(step, p):
        if step == 1:
            p["samples"][4]["rollout_ids"] = 40

    root = _run_dir(tmp_path, edit)
    r = _audit(root / "rollout_data", "--train", root / "train_data")
    assert r.exit_code == 4, r.output
    assert "step 1: 1 divergence(s) (rollout_id 1)" in r.output
    assert f"{root / 'rollout_data' / '1.pt'}:sample 4: rollout_id: expected 4, got 40 (train {root / 'train_data' / '1.pt'})" in r.output


def test_json_object(tmp_path):
    root = _run_dir(tmp_path, lambda s, p: p["samples"][0].update(rewards=3.0) if s == 0 else None)
    r = _audit(root / "rollout_data", "--train", root / "train_data", "--json")
    assert r.exit_code == 4
    out = json.loads(r.stdout)
    assert [s["step"] for s in out["steps"]] == [0, 1]
    for s in out["steps"]:
        assert set(KEYS) <= set(s["mismatch"]) and s["mismatch"]["tokens"] == 18
        assert s["loss_weight"]["modes"].keys() >= {"token_mean", "rollout_mean", "prompt_mean", "constant"}
    (d,) = out["divergences"]
    assert {k: d[k] for k in ("step", "rollout_position", "field", "got")} == \
        {"step": 0, "rollout_position": 0, "field": "reward", "got": 3.0}
    assert d["rollout"].endswith("0.pt:sample 0") and d["train"].endswith("train_data/0.pt")


@pytest.mark.parametrize("case", ["truncated", "no position", "other step", "version"])
def test_invalid_input_exits_3(tmp_path, case):
    root = _run_dir(tmp_path)
    train = root / "train_data"
    if case == "truncated":
        p = train / "1.pt"
        p.write_bytes(p.read_bytes()[:300])
        msg = "1.pt: not a readable torch dump"
    elif case == "no position":
        T.write_train(train, T.rollout_samples(1), 1, n=2, rbs=3, edit=lambda p: p["samples"][3].pop("rollout_position"))
        msg = "1.pt:sample 3: rollout_position: missing"
    elif case == "version":
        T.write_train(train, T.rollout_samples(1), 1, n=2, rbs=3, edit=lambda p: p.update(format_version=1))
        msg = "1.pt: format_version: expected 2, got 1"
    else:
        r = _audit(root / "rollout_data" / "0.pt", "--train", train / "1.pt")
        assert r.exit_code == 3
        assert "no step is in both inputs: rollout steps [0], train steps [1]" in r.output
        return
    r = _audit(root / "rollout_data", "--train", train)
    assert r.exit_code == 3, r.output
    assert msg in r.output and "Traceback" not in r.output


def test_train_is_required(tmp_path):
    r = _audit(tmp_path)
    assert r.exit_code == 2


def test_default_max_divergences_is_the_librarys():
    assert pyinspect.signature(audit_cmd).parameters["max_divergences"].default == DEFAULT_MAX_DIVERGENCES


def test_text_names_the_worst_rollouts_and_tokens(tmp_path):
    root = _run_dir(tmp_path)
    text = _audit(root / "rollout_data", "--train", root / "train_data")
    js = json.loads(_audit(root / "rollout_data", "--train", root / "train_data", "--json").stdout)
    for st in js["steps"]:
        worst = max(st["rollouts"], key=lambda r: r["mismatch"]["max_abs_diff"])
        assert (f"step {st['step']}: largest |d| in rollouts {worst['rollout_id']} "
                f"(max {worst['mismatch']['max_abs_diff']:.3g}" in text.output)
        t = st["mismatch"]["top_tokens"][0]
        assert (f"  position {t['rollout_position']} token {t['token']} (rollout {t['rollout_id']}): |d| "
                f"{t['abs_diff']:.4g}, log_probs {t['log_probs']:.4g}, rollout_log_probs {t['rollout_log_probs']:.4g}"
                in text.output)


def test_a_rule_difference_exits_0_and_4_under_strict(tmp_path):
    samples = T.compact(0)
    T.write_rollout(tmp_path / "rollout_data", samples, 0, "jsonl")
    T.write_train(tmp_path / "train_data", samples, 0, n=2, rbs=3, id_rule="sample_index")
    args = (tmp_path / "rollout_data", "--train", tmp_path / "train_data", "--n-samples-per-prompt", 2)
    r = _audit(*args)
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[:2]
    assert first[0].startswith("step 0: reward: the trainer ran slime_positional")
    assert first[1].startswith("step 0: rollout_id: the trainer ran sample_index (slime 7405851ff (#1933)), not fill")
    assert _audit(*args, "--strict").exit_code == 4
    out = json.loads(_audit(*args, "--json").stdout)
    assert [e["samples"] for e in out["rules"]] == [7, 5] and out["summary"]["rule_differences"] == 2
