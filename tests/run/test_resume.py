"""--resume on an up-to-date output (run/resume.py): nothing to do, nothing rewritten."""
from __future__ import annotations

import json
import os

from conftest import copts, make_sample, tree_state, write_jsonl
from rollout_cli.run.convert import convert


def _run(tmp_path) -> str:
    write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=i, group_index=i // 2, reward=float(i % 2)) for i in range(4)])
    write_jsonl(tmp_path / "in" / "2.jsonl", [make_sample(index=10 + i, group_index=5, reward=float(i)) for i in range(3)])
    return str(tmp_path / "in")


def test_resuming_an_up_to_date_output_rewrites_nothing(tmp_path):
    """Its own options, its inputs unchanged (even touched): exit 0 with a note, the manifest
    and shards the same bytes and modification times, no staging area opened."""
    src, out = _run(tmp_path), tmp_path / "out"
    convert([src], str(out), copts(shards=2, mmap=True))
    before = tree_state(out)
    os.utime(tmp_path / "in" / "1.jsonl", ns=(1, 1))  # a copy's new time stamp: the same bytes
    staged = []
    res = convert([src], str(out), copts(shards=2, mmap=True, resume=True),
                  progress=lambda *a: staged.append((out / ".staging").exists()))
    assert tree_state(out) == before
    assert staged == [] and not (out / ".staging").exists()
    assert res["counts"]["rows"] == 7 and [s["step"] for s in res["steps"]] == [1, 2]
    assert any("up to date" in n for n in res["notes"])


def test_resume_converts_what_is_new_or_changed(tmp_path):
    src, out = _run(tmp_path), tmp_path / "out"
    convert([src], str(out), copts())
    step1 = out / "data" / "step-000001" / "shard-00000-of-00001.parquet"
    ino = step1.stat().st_ino
    write_jsonl(tmp_path / "in" / "2.jsonl", [make_sample(index=10 + i, group_index=5, reward=float(i)) for i in range(5)])
    write_jsonl(tmp_path / "in" / "3.jsonl", [make_sample(index=20 + i, group_index=7) for i in range(2)])
    res = convert([src], str(out), copts(resume=True))
    assert [s["step"] for s in res["steps"]] == [1, 2, 3] and res["counts"]["rows"] == 4 + 5 + 2
    assert step1.stat().st_ino == ino  # the unchanged step is reused, not rewritten
    assert not any("up to date" in n for n in res["notes"])
    m = json.loads((out / "manifest.json").read_bytes())
    assert [i["samples"] for i in m["inputs"]] == [4, 5, 2]


def test_an_input_left_out_is_not_up_to_date(tmp_path):
    """An input no longer given is kept from the previous run with a warning, as before: the
    manifest records it, so that is a commit."""
    src, out = _run(tmp_path), tmp_path / "out"
    convert([src], str(out), copts())
    res = convert([str(tmp_path / "in" / "1.jsonl")], str(out), copts(resume=True))
    assert res["warnings"] and "no longer given" in res["warnings"][0]
    m = json.loads((out / "manifest.json").read_bytes())
    assert [s.get("input_missing", False) for s in m["steps"]] == [False, True]
    before = tree_state(out)
    res = convert([str(tmp_path / "in" / "1.jsonl")], str(out), copts(resume=True))  # now up to date
    assert tree_state(out) == before and any("up to date" in n for n in res["notes"])
