"""Atropos' groups files told by their first line, their step from the writer's `_K` suffix,
and the viewer pages and evaluation samples beside them skipped with a note."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from conftest import SAMPLE_DATA, copts, sample_generator
from rollout_cli.inputs.atropos import detect
from rollout_cli.inputs.discover import discover

DATA = SAMPLE_DATA / "atropos"


def _generator():
    return sample_generator("make_atropos")


gen = _generator()


@pytest.mark.parametrize("name, placed", [
    ("gsm8k.jsonl", (0, "train")), ("gsm8k_1.jsonl", (1, "train")), ("math_v2_12.jsonl.zst", (12, "train")),
    ("groups.jsonl.gz", (0, "train")), ("run_2.jsonl", (2, "train")),
])
def test_the_step_is_the_writers_suffix(name, placed):
    assert detect.step_and_split(f"data/{name}") == placed


def test_claims_a_groups_file_by_its_first_line_whatever_its_name(tmp_path):
    p = tmp_path / "anything.jsonl"
    p.write_bytes(gen.dumps([gen.group(random.Random(1), [[(3, 2)], [(3, 3)]], [1.0, 0.0])]))
    assert detect.claims(str(p))
    assert not detect.claims(str(SAMPLE_DATA / "jsonl" / "rollout_data" / "1.jsonl"))  # slime: flat token lists
    assert not detect.claims(str(next((SAMPLE_DATA / "prime_rl").rglob("traces.jsonl"))))
    assert not detect.claims("-")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert not detect.claims(str(tmp_path / "empty.jsonl"))


def test_a_first_line_longer_than_the_head_is_claimed_by_its_token_lists(tmp_path, monkeypatch):
    monkeypatch.setattr(detect, "_HEAD_BYTES", 64)
    p = tmp_path / "g.jsonl"
    p.write_bytes(gen.dumps([gen.group(random.Random(1), [[(40, 40)], [(40, 40)]], [1.0, 0.0])]))
    assert detect.claims(str(p))


def test_run_folder_reads_the_groups_and_notes_what_is_skipped():
    files, skipped, notes = discover([str(DATA)], options=copts())
    assert [(f.display.split("/")[-1], f.format, f.step, f.split) for f in files] == [
        ("gsm8k.jsonl", "atropos", 0, "train"), ("gsm8k_1.jsonl", "atropos", 1, "train")]
    assert notes == [
        f"{DATA / 'data' / 'gsm8k.html'}: the Atropos viewer page of gsm8k.jsonl, not sample data, skipped",
        f"{DATA / 'data' / 'gsm8k_1.html'}: the Atropos viewer page of gsm8k_1.jsonl, not sample data, skipped",
        f"{DATA / 'evals' / 'samples.jsonl'}: Atropos evaluation samples (text, no tokens), not train data, skipped",
    ]


def test_an_html_file_without_its_groups_file_is_no_viewer(tmp_path):
    (tmp_path / "page.html").write_text("<html></html>")
    assert not detect.claims(str(tmp_path / "page.html"))


def test_recognition_imports_no_numpy():
    code = ("import sys\n"
            "from rollout_cli.inputs.units import plan_units\n"
            "from rollout_cli.core.options import ConvertOptions\n"
            f"units, _, notes = plan_units([{str(DATA)!r}], ConvertOptions())\n"
            "assert [u.input.format for u in units] == ['atropos'] * 2, units\n"
            "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_sample_data_is_reproducible(tmp_path):
    gen.build(tmp_path)
    shipped = {p.relative_to(DATA): p.read_bytes() for p in DATA.rglob("*") if p.is_file()}
    made = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert shipped == made
    assert sum(len(b) for b in shipped.values()) < 100_000
