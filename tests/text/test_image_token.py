"""--tokenizer gives the image placeholder rule its token when --image-token-id is not given:
the token tokenizer_config.json names (`image_token`), else a known placeholder the tokenizer
adds (`<|image_pad|>` for Qwen2-VL); none for a tokenizer without one."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from conftest import SAMPLE_DATA
from rollout_cli.cli.app import app
from rollout_cli.text.tokenizer import load

tokenizers = pytest.importorskip("tokenizers")


def _tokenizer(folder, added: list[str], config: dict | None = None) -> dict[str, int]:
    folder.mkdir(parents=True)
    tok = tokenizers.Tokenizer.from_file(str(SAMPLE_DATA / "tokenizer" / "tokenizer.json"))
    tok.add_special_tokens(added)
    tok.save(str(folder / "tokenizer.json"))
    cfg = json.loads((SAMPLE_DATA / "tokenizer" / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, **(config or {})}))
    return {t: tok.token_to_id(t) for t in added}


def test_the_placeholder_token_of_the_tokenizer(tmp_path):
    ids = _tokenizer(tmp_path / "qwen", ["<|vision_start|>", "<|image_pad|>"])
    assert load(str(tmp_path / "qwen")).image_token_id() == ids["<|image_pad|>"]
    ids = _tokenizer(tmp_path / "named", ["<image>", "<pic>"], {"extra_special_tokens": {"image_token": "<pic>"}})
    assert load(str(tmp_path / "named")).image_token_id() == ids["<pic>"]
    assert load(str(SAMPLE_DATA / "tokenizer")).image_token_id() is None


def test_convert_and_inspect_check_placeholders_with_the_tokenizer_s_token(tmp_path):
    img = _tokenizer(tmp_path / "tok", ["<|image_pad|>"])["<|image_pad|>"]
    (tmp_path / "in" / "rollout_data").mkdir(parents=True)
    samples = []
    for i in range(3):
        toks = [1, 2] + [img] * (4 if i != 1 else 3) + [3, 4, 5, 6]  # sample 1: 3 placeholders, the grid gives 4
        samples.append({"tokens": toks, "response_length": 4, "reward": float(i), "status": "completed", "index": i,
                        "group_index": i, "multimodal_train_inputs": {
                            "pixel_values": torch.zeros(16, 12, dtype=torch.bfloat16), "image_grid_thw": torch.tensor([[1, 4, 4]])}})
    torch.save({"rollout_id": 1, "samples": samples}, str(tmp_path / "in" / "rollout_data" / "1.pt"))
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "in"), str(tmp_path / "out"), "--tokenizer", str(tmp_path / "tok")])
    assert r.exit_code == 3
    assert "1.pt:sample 1: multimodal_train_inputs: the prompt holds 3 image placeholder token(s)" in r.output
    assert f"--image-token-id {img}" in r.output
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "in"), "--tokenizer", str(tmp_path / "tok"), "--json"])
    kinds = [a.get("rule") for a in json.loads(r.output)["anomalies"]]
    assert "multimodal_train_inputs.placeholders" in kinds
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "in"), str(tmp_path / "out"), "--tokenizer", str(SAMPLE_DATA / "tokenizer")])
    assert r.exit_code == 0, r.output  # a tokenizer without a placeholder token: the rule does not apply


def test_no_note_that_the_rule_is_off_when_the_tokenizer_gives_it(tmp_path):
    """A step whose samples carry multimodal inputs only in part: the note that
    --image-token-id would check them is for a run without the rule, not one whose
    --tokenizer gives it."""
    img = _tokenizer(tmp_path / "tok", ["<|image_pad|>"])["<|image_pad|>"]
    (tmp_path / "in" / "rollout_data").mkdir(parents=True)
    samples = [{"tokens": [1, 2] + [img] * 4 + [3, 4, 5, 6], "response_length": 4, "reward": 1.0, "status": "completed",
                "index": 0, "group_index": 0, "multimodal_train_inputs": {
                    "pixel_values": torch.zeros(16, 12, dtype=torch.bfloat16), "image_grid_thw": torch.tensor([[1, 4, 4]])}},
               {"tokens": [1, 2, 3, 4, 5, 6], "response_length": 4, "reward": 0.0, "status": "completed",
                "index": 1, "group_index": 1}]
    torch.save({"rollout_id": 1, "samples": samples}, str(tmp_path / "in" / "rollout_data" / "1.pt"))
    notes = {}
    for name, extra in (("plain", []), ("tok", ["--tokenizer", str(tmp_path / "tok")])):
        r = CliRunner().invoke(app, ["convert", str(tmp_path / "in"), str(tmp_path / f"out-{name}"), "--json", *extra])
        assert r.exit_code == 0, r.output
        notes[name] = [n for n in json.loads(r.output)["notes"] if "--image-token-id checks" in n]
    assert len(notes["plain"]) == 1 and notes["tok"] == []
