"""docs/loader.md's trainer loop, run as the page shows it (its constants set for a small
output): it trains, checkpoints and resumes, and each step's loss is the same whether a step is
one micro-batch or many (token_weights carries the step's denominators)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from conftest import write_jsonl  # noqa: E402
from rollout_cli.run.convert import ConvertOptions, convert  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "loader.md"


def loop_code() -> str:
    """The first python block after the page's "A trainer loop" heading."""
    text = DOC.read_text()
    section = text[text.index("## A trainer loop"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("loop")
    rng = np.random.default_rng(5)
    index = 0
    for step in (1, 2):
        samples = []
        for g in range(6):
            prompt = rng.integers(1, 200, 6).tolist()
            for _ in range(3):
                resp = int(rng.integers(1, 40))
                samples.append({"group_index": g, "index": index, "status": "completed", "metadata": {},
                                "tokens": prompt + rng.integers(1, 200, resp).tolist(), "response_length": resp,
                                "reward": float(rng.integers(0, 2)), "loss_mask": [1] * resp})
                index += 1
        write_jsonl(root / "dumps" / f"{step}.jsonl", samples)
    convert([str(root / "dumps")], str(root / "out"), ConvertOptions(overwrite=True, workers=1, shards=2))
    return str(root / "out")


def run_loop(out: str, max_tokens, cwd: Path, capsys, monkeypatch) -> list[tuple[int, float]]:
    code = loop_code()
    for name, value in {"OUT": repr(out), "MAX_TOKENS": repr(max_tokens), "VOCAB": "256"}.items():
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", code, count=1, flags=re.M)
        assert n == 1, f"docs/loader.md's loop no longer sets {name}"
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    exec(compile(code, str(DOC), "exec"), {"__name__": "loop"})
    printed = capsys.readouterr().out
    return [(int(s), float(v)) for s, v in re.findall(r"^step (\d+): rank 0's share of the loss (\S+)$", printed, re.M)]


def test_the_documented_loop_trains_resumes_and_sums_to_the_step_loss(out, tmp_path, capsys, monkeypatch):
    whole = run_loop(out, None, tmp_path / "whole", capsys, monkeypatch)
    packed = run_loop(out, 64, tmp_path / "packed", capsys, monkeypatch)
    assert [s for s, _ in whole] == [s for s, _ in packed] == [1, 2]
    for (_, a), (_, b) in zip(whole, packed):
        assert a == pytest.approx(b, rel=1e-4) and a != 0
    # run again in the same folder: the checkpoint says every batch was handed out
    assert run_loop(out, 64, tmp_path / "packed", capsys, monkeypatch) == []
