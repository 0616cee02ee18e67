"""The image placeholder rule (--image-token-id, --spatial-merge-size): planted faults named in
convert (exit 3, --on-error skip rejects them), inspect (error anomalies with sample_index and
rollout_position) and the note on a mixed run without the flag."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.pipeline.validate.images import expected_placeholders, row_problem

IMG = 151655


def _run(root) -> str:
    (root / "rollout_data").mkdir(parents=True)
    samples = []
    for i in range(5):
        toks = [1, 2] + [IMG] * 4 + [3, 4, 5, 6]  # grid [1, 4, 4] / 2**2 = 4 placeholders
        mm = {"pixel_values": torch.randn(16, 12).to(torch.bfloat16), "image_grid_thw": torch.tensor([[1, 4, 4]])}
        if i == 1:
            mm = None  # placeholders, no pixel values
        if i == 2:
            toks = toks[:3] + toks[4:]  # 3 placeholders, the grid gives 4
        if i == 4:
            toks, mm = [1, 2, 3, 4, 5, 6], None  # a text-only sample
        samples.append({"tokens": toks, "response_length": 4, "reward": float(i), "status": "completed",
                        "index": 10 + i, "group_index": i, "multimodal_train_inputs": mm})
    torch.save({"rollout_id": 1, "samples": samples}, str(root / "rollout_data" / "1.pt"))
    return str(root)


def _invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_the_rule_on_one_row():
    grid = np.array([[1, 4, 4], [2, 4, 6]])
    assert expected_placeholders(grid, 2) == 4 + 12
    toks = np.array([IMG] * 16 + [1])
    assert row_problem(toks, {"pixel_values": np.zeros((64, 3)), "image_grid_thw": grid}, IMG, 2) is None
    assert row_problem(toks, None, IMG, 2)[0] == "multimodal_train_inputs.missing"
    assert row_problem(toks[1:], {"pixel_values": np.zeros((64, 3)), "image_grid_thw": grid}, IMG, 2)[0] == \
        "multimodal_train_inputs.placeholders"
    assert row_problem(np.array([1, 2]), None, IMG, 2) is None


def test_convert_names_each_planted_fault_and_skip_rejects_them(tmp_path):
    inp = _run(tmp_path / "in")
    r = _invoke("convert", inp, str(tmp_path / "out"), "--image-token-id", str(IMG))
    assert r.exit_code == 3
    assert "1.pt:sample 1: multimodal_train_inputs: the prompt holds 4 image placeholder token(s)" in r.output
    assert "1.pt:sample 2: multimodal_train_inputs: the prompt holds 3 image placeholder token(s)" in r.output
    assert "image_grid_thw gives 4" in r.output
    r = _invoke("convert", inp, str(tmp_path / "out"), "--image-token-id", str(IMG), "--on-error", "skip")
    assert r.exit_code == 0, r.output
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(j["sample"], j["rule"]) for j in rejects] == [(1, "multimodal_train_inputs.missing"),
                                                           (2, "multimodal_train_inputs.placeholders")]
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["options"]["image_token_id"] == IMG and m["options"]["spatial_merge_size"] == 2


def test_a_merge_size_that_disagrees_is_named(tmp_path):
    inp = _run(tmp_path / "in")
    r = _invoke("convert", inp, str(tmp_path / "out"), "--image-token-id", str(IMG), "--spatial-merge-size", "1",
                "--on-error", "skip", "--json")
    assert r.exit_code == 0, r.output
    rejects = (tmp_path / "out" / "rejects.jsonl").read_text()
    assert rejects.count("multimodal_train_inputs.placeholders") == 3  # 16 per image at merge size 1


def test_inspect_lists_them_as_error_anomalies_with_their_place(tmp_path):
    inp = _run(tmp_path / "in")
    r = _invoke("inspect", inp, "--image-token-id", str(IMG), "--json")
    d = json.loads(r.stdout)
    items = d["anomalies"]["items"] if isinstance(d["anomalies"], dict) else d["anomalies"]
    found = [a for a in items if a.get("rule", "").startswith("multimodal_train_inputs")]
    assert [(a["level"], a["sample_index"], a["rollout_position"], a["rule"]) for a in found] == [
        ("error", 11, 1, "multimodal_train_inputs.missing"), ("error", 12, 2, "multimodal_train_inputs.placeholders")]


@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_a_mixed_run_without_the_flag_gets_a_note(tmp_path, command):
    inp = _run(tmp_path / "in")
    args = [command, inp] + ([str(tmp_path / "out")] if command == "convert" else []) + ["--json"]
    d = json.loads(_invoke(*args).stdout)
    notes = d["notes"] if command == "convert" else d["summary"]["notes"]
    assert any("3 of 5 samples carry multimodal_train_inputs" in n for n in notes)
    if command == "inspect":  # three samples of 16 patches each, no raw images
        assert [(p.get("images"), p.get("patches")) for p in d["summary"]["per_step"]] == [(0, 48)]
    assert not any("multimodal" in a["message"] for a in
                   ((d.get("anomalies") or {}).get("items", []) if isinstance(d.get("anomalies"), dict) else []))
