"""Live runs (run/live.py): an input still being written is never committed in part. A step file
that ends inside a line, or that changes between the start of the run and the commit, is
refused (exit 3) or, with --skip-incomplete, left out and listed as pending; a later --resume
converts it once complete. verify, inspect and the loader say so."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import xxhash
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, copts, make_sample, shard_bytes, tree_digest, write_jsonl, write_pt
from rollout_cli.cli.app import app
from rollout_cli.core.errors import IncompleteInputError, InvalidInputError
from rollout_cli.inputs.jsonl import reader as jsonl_mod
from rollout_cli.inspection import inspect_paths
from rollout_cli.loader.load import open_dataset
from rollout_cli.output import manifest as manifest_mod
from rollout_cli.run import live
from rollout_cli.run.convert import convert
from rollout_cli.verification.check import verify_output

FAST = ["--workers", "1", "--no-mmap"]


@pytest.fixture
def run(tmp_path) -> Path:
    """A copy of the JSONL sample run (train steps 1-3, eval step 3)."""
    dst = tmp_path / "run"
    shutil.copytree(SAMPLE_DATA / "jsonl" / "rollout_data", dst)
    return dst


def _cut(path: Path, keep: int = 200) -> bytes:
    """Cut the file inside its last line, as a trainer mid-write leaves it; returns the whole bytes."""
    whole = path.read_bytes()
    path.write_bytes(whole[:-keep])
    assert not path.read_bytes().endswith(b"\n")
    return whole


def _lines(data: bytes) -> int:
    return data.count(b"\n")


# ------------------------------------------------------------------------------ cut inside a line


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_a_step_cut_inside_a_line_is_refused_and_nothing_is_committed(run, tmp_path, on_error):
    whole = _cut(run / "3.jsonl")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["convert", str(run), str(out), *FAST, "--on-error", on_error])
    assert r.exit_code == 3, r.output
    assert f"3.jsonl: still being written? it ends inside line {_lines(whole)}" in r.output
    assert "--skip-incomplete" in r.output
    assert not out.exists()


def test_a_refused_resume_leaves_the_output_as_it_was(run, tmp_path):
    out = tmp_path / "out"
    convert([str(run)], str(out), copts())
    before = tree_digest(out)
    _cut(run / "2.jsonl")  # rewritten by a restarted trainer
    for on_error in ("fail", "skip"):
        r = CliRunner().invoke(app, ["convert", str(run), str(out), *FAST, "--resume", "--on-error", on_error])
        assert r.exit_code == 3, r.output
        assert "2.jsonl: still being written?" in r.output
        assert tree_digest(out) == before


def test_a_last_line_without_its_newline_that_parses_is_complete(run, tmp_path):
    p = run / "3.jsonl"
    p.write_bytes(p.read_bytes().rstrip(b"\n"))
    res = convert([str(run)], str(tmp_path / "out"), copts())
    assert res["pending"] == []
    assert [(s["split"], s["step"], s["samples"]) for s in res["steps"]][2] == ("train", 3, 15)


def test_an_invalid_last_line_with_its_newline_is_an_invalid_sample_not_a_live_one(run, tmp_path):
    p = run / "3.jsonl"
    p.write_bytes(p.read_bytes() + b'{"tokens": [1, 2\n')
    with pytest.raises(InvalidInputError) as e:
        convert([str(run)], str(tmp_path / "out"), copts(skip_incomplete=True))
    assert not isinstance(e.value, IncompleteInputError)
    assert "3.jsonl:line 16" in str(e.value)


def test_skip_incomplete_leaves_the_step_pending_and_resume_converts_it_once_complete(run, tmp_path):
    whole = _cut(run / "3.jsonl")
    out = tmp_path / "out"
    res = convert([str(run)], str(out), copts(skip_incomplete=True))
    reason = f"still being written? it ends inside line {_lines(whole)}"
    want = [{"path": str(run / "3.jsonl"), "format": "jsonl", "split": "train", "step": 3, "reason": reason}]
    assert res["pending"] == want
    assert any("3.jsonl: train step 3 is pending" in w for w in res["warnings"])
    assert [(s["split"], s["step"]) for s in res["steps"]] == [("train", 1), ("train", 2), ("eval", 3)]
    m = json.loads((out / "manifest.json").read_text())
    assert m["pending"] == want
    assert str(run / "3.jsonl") not in [i["path"] for i in m["inputs"]]

    v = verify_output(str(out))
    assert v["ok"] and v["pending"] == want
    assert any("train step 3 is pending" in n for n in v["notes"])
    r = CliRunner().invoke(app, ["verify", str(out)])
    assert r.exit_code == 0 and "train step 3 is pending" in r.output

    ins = inspect_paths([str(out)])
    assert ins["summary"]["pending"] == [dict(want[0], out=str(out))]
    assert any("train step 3 is pending" in n for n in ins["summary"]["notes"])
    r = CliRunner().invoke(app, ["inspect", str(out)])
    assert r.exit_code == 0 and "pending: 1 step(s) not in the output" in r.output

    with pytest.warns(UserWarning, match="train step 3 is pending"):
        ds = open_dataset(str(out))
    assert ds.pending == want and ds.steps == [1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_dataset(str(out), split="eval").pending == []

    (run / "3.jsonl").write_bytes(whole)  # the trainer finished the step
    r = CliRunner().invoke(app, ["convert", str(run), str(out), *FAST, "--resume", "--skip-incomplete"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert "pending" not in m
    assert [(s["split"], s["step"]) for s in m["steps"]] == [("train", 1), ("train", 2), ("train", 3), ("eval", 3)]
    assert verify_output(str(out))["ok"]
    fresh = tmp_path / "fresh"
    convert([str(run)], str(fresh), copts())
    assert shard_bytes(out) == shard_bytes(fresh)


def test_every_input_still_being_written_commits_an_output_of_pending_steps(tmp_path):
    run = tmp_path / "run"
    write_jsonl(run / "1.jsonl", [make_sample(index=i) for i in range(2)])
    _cut(run / "1.jsonl", 5)
    out = tmp_path / "out"
    res = convert([str(run)], str(out), copts(skip_incomplete=True))
    assert res["steps"] == [] and [p["step"] for p in res["pending"]] == [1]
    assert verify_output(str(out))["ok"]


# ------------------------------------------------------------------------------ changed while read


def _grow_after_fingerprint(monkeypatch, target: Path, data: bytes):
    """The trainer appends to `target` while the run reads it: right after its fingerprint is
    taken (by its reader, as it reads a step whole, or by the converting process)."""
    def grow(path):
        if Path(path) == target:
            with open(target, "ab") as f:
                f.write(data)

    real = manifest_mod.file_fingerprint

    def fingerprint(path, *a, **kw):
        fp = real(path, *a, **kw)
        grow(path)
        return fp

    real_read = jsonl_mod._Fingerprinting.fingerprint

    def read_fingerprint(self):
        fp = real_read(self)
        grow(self.raw.name)
        return fp

    monkeypatch.setattr(manifest_mod, "file_fingerprint", fingerprint)
    monkeypatch.setattr(jsonl_mod._Fingerprinting, "fingerprint", read_fingerprint)


def test_an_input_that_grows_while_read_is_refused(run, tmp_path, monkeypatch):
    line = (run / "2.jsonl").read_bytes().splitlines(keepends=True)[0]
    _grow_after_fingerprint(monkeypatch, run / "2.jsonl", line)
    out = tmp_path / "out"
    with pytest.raises(IncompleteInputError, match="2.jsonl: still being written. it changed while it was read"):
        convert([str(run)], str(out), copts())
    assert not out.exists()


def test_an_input_that_grows_while_read_is_left_pending_and_converted_later(run, tmp_path, monkeypatch):
    line = (run / "2.jsonl").read_bytes().splitlines(keepends=True)[0]
    _grow_after_fingerprint(monkeypatch, run / "2.jsonl", line)
    out = tmp_path / "out"
    res = convert([str(run)], str(out), copts(skip_incomplete=True, mmap=True))
    assert [(p["step"], p["reason"]) for p in res["pending"]] == [(2, live.CHANGED)]
    assert [(s["split"], s["step"]) for s in res["steps"]] == [("train", 1), ("train", 3), ("eval", 3)]
    assert not (out / "data" / "step-000002").exists() and not (out / "mmap" / "data" / "step-000002").exists()
    assert verify_output(str(out))["ok"]  # nothing staged for the step was committed
    monkeypatch.undo()
    res = convert([str(run)], str(out), copts(skip_incomplete=True, resume=True, mmap=True))
    assert res["pending"] == [] and [s["step"] for s in res["steps"]] == [1, 2, 3, 3]
    assert [s["samples"] for s in res["steps"]][1] == 16  # the line appended is in
    assert verify_output(str(out))["ok"]


def test_a_read_that_fails_because_the_input_grew_says_so(run, tmp_path, monkeypatch):
    """The trainer appends half a line between the start of the run and the read: the invalid
    line the reader finds is the write in progress, not a bad sample."""
    real = jsonl_mod.read_jsonl

    def read_jsonl(path, *a, **kw):
        if Path(path).name == "2.jsonl":
            with open(path, "ab") as f:
                f.write(b'{"tokens": [1, 2')
        return real(path, *a, **kw)

    monkeypatch.setattr(jsonl_mod, "read_jsonl", read_jsonl)
    with pytest.raises(IncompleteInputError, match="2.jsonl: still being written. it changed while it was read") as e:
        convert([str(run)], str(tmp_path / "out"), copts())
    assert "line 16" in str(e.value.__cause__)  # what the reader found
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ .pt and Parquet


def _pt_run(tmp_path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    for step in (1, 2):
        write_pt(run / f"{step}.pt", [make_sample(index=i, group_index=i // 2) for i in range(4)], step)
    return run, run / "2.pt"


def _growing_while_watched(monkeypatch, target: Path):
    """The writer adds bytes while a file that does not open is watched."""
    monkeypatch.setattr(live, "SETTLE_SECONDS", 0.0)

    def sleep(_):
        with open(target, "ab") as f:
            f.write(b"\0" * 64)

    monkeypatch.setattr(live.time, "sleep", sleep)


def test_a_truncated_pt_that_is_growing_is_refused_or_pending(tmp_path, monkeypatch):
    run, pt = _pt_run(tmp_path)
    whole = pt.read_bytes()
    pt.write_bytes(whole[: len(whole) // 2])
    _growing_while_watched(monkeypatch, pt)
    with pytest.raises(IncompleteInputError, match="2.pt: still being written. not a complete zip archive"):
        convert([str(run)], str(tmp_path / "out"), copts())
    assert not (tmp_path / "out").exists()
    res = convert([str(run)], str(tmp_path / "out"), copts(skip_incomplete=True))
    assert [(p["path"], p["step"]) for p in res["pending"]] == [(str(pt), None)]  # a dump's step is its payload's
    assert [s["step"] for s in res["steps"]] == [1]
    pt.write_bytes(whole)
    res = convert([str(run)], str(tmp_path / "out"), copts(skip_incomplete=True, resume=True))
    assert res["pending"] == [] and [s["step"] for s in res["steps"]] == [1, 2]


def test_a_truncated_pt_that_stays_as_it_is_is_a_broken_file(tmp_path, monkeypatch):
    run, pt = _pt_run(tmp_path)
    pt.write_bytes(pt.read_bytes()[:100])
    monkeypatch.setattr(live, "SETTLE_SECONDS", 0.0)
    with pytest.raises(InvalidInputError, match="2.pt: not a readable torch dump") as e:
        convert([str(run)], str(tmp_path / "out"), copts(skip_incomplete=True))
    assert not isinstance(e.value, IncompleteInputError)


def test_a_parquet_file_without_its_footer_that_is_growing_is_pending(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("1.parquet", "2.parquet"):
        shutil.copy(SAMPLE_DATA / "parquet" / "rollout_data" / name, run / name)
    p = run / "2.parquet"
    p.write_bytes(p.read_bytes()[:-20])
    _growing_while_watched(monkeypatch, p)
    res = convert([str(run)], str(tmp_path / "out"), copts(skip_incomplete=True))
    assert [(p_["step"], p_["reason"]) for p_ in res["pending"]] == [(2, "still being written? no Parquet footer, and its size is changing")]
    assert [s["step"] for s in res["steps"]] == [1]


def test_an_input_on_an_object_store_cut_inside_a_line_is_pending(s3, tmp_path):
    """The same checks through the store: the tail by ranged reads, the size and mtime the store reports."""
    whole = (SAMPLE_DATA / "jsonl" / "rollout_data" / "2.jsonl").read_bytes()
    for name, data in (("1.jsonl", (SAMPLE_DATA / "jsonl" / "rollout_data" / "1.jsonl").read_bytes()), ("2.jsonl", whole[:-50])):
        with s3.open_output_stream(f"bkt/live-in/{name}") as f:
            f.write(data)
    with pytest.raises(IncompleteInputError, match=f"s3://bkt/live-in/2.jsonl: still being written. it ends inside line {_lines(whole)}"):
        convert(["s3://bkt/live-in"], str(tmp_path / "out"), copts())
    res = convert(["s3://bkt/live-in"], str(tmp_path / "out"), copts(skip_incomplete=True))
    assert [(p["path"], p["step"]) for p in res["pending"]] == [("s3://bkt/live-in/2.jsonl", 2)]
    assert [s["step"] for s in res["steps"]] == [1]


def test_a_step_read_before_its_input_grew_is_not_reused_after_a_crash(tmp_path, monkeypatch):
    """The input grows after the step was read and before its fingerprint is taken, then the
    run dies before the commit: --resume must not take the staged step (the old bytes) for the
    grown input (whose fingerprint the staging would otherwise record)."""
    import threading

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SAMPLE_DATA / "jsonl" / "rollout_data" / "2.jsonl", run / "2.jsonl")
    target = run / "2.jsonl"
    line = target.read_bytes().splitlines(keepends=True)[0]
    read = threading.Event()
    real_read, real_fp = jsonl_mod.read_jsonl, manifest_mod.file_fingerprint

    def read_jsonl(*a, **kw):
        yield from real_read(*a, **kw)
        read.set()

    def fingerprint(path, *a, **kw):
        assert read.wait(30)
        with open(target, "ab") as f:
            f.write(line)
        return real_fp(path, *a, **kw)

    def die(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(jsonl_mod, "read_jsonl", read_jsonl)
    monkeypatch.setattr(jsonl_mod, "hashes_whole", lambda inp: False)  # fingerprinted by this process
    monkeypatch.setattr(manifest_mod, "file_fingerprint", fingerprint)
    monkeypatch.setattr(live.LiveWatch, "settle", die)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):  # a Ctrl-C keeps the staging for --resume
        convert([str(run)], str(out), copts())
    done = json.loads(next((out / ".staging" / "run" / "done").iterdir()).read_bytes())
    assert done["result"]["samples"] == 15 and done["fingerprint"] is None
    monkeypatch.undo()
    res = convert([str(run)], str(out), copts(resume=True))
    assert [s["samples"] for s in res["steps"]] == [16]


def test_a_step_whose_reader_fingerprinted_it_is_not_reused_once_its_input_grew(tmp_path, monkeypatch):
    """The reader of a step read whole fingerprints the bytes it read; the input grows after,
    and the run dies before the commit: --resume sees the staged step's fingerprint is not the
    grown input's and reads it again."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SAMPLE_DATA / "jsonl" / "rollout_data" / "2.jsonl", run / "2.jsonl")
    target = run / "2.jsonl"
    before = target.read_bytes()
    line = before.splitlines(keepends=True)[0]
    real_read = jsonl_mod.read_jsonl

    def read_jsonl(*a, **kw):
        yield from real_read(*a, **kw)
        with open(target, "ab") as f:
            f.write(line)

    def die(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(jsonl_mod, "read_jsonl", read_jsonl)
    monkeypatch.setattr(live.LiveWatch, "settle", die)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        convert([str(run)], str(out), copts())
    done = json.loads(next((out / ".staging" / "run" / "done").iterdir()).read_bytes())
    assert done["result"]["samples"] == 15
    assert done["fingerprint"]["size"] == len(before)  # the bytes the step was read from
    assert done["fingerprint"]["xxh3_128"] == xxhash.xxh3_128(before).hexdigest()
    monkeypatch.undo()
    res = convert([str(run)], str(out), copts(resume=True))
    assert [s["samples"] for s in res["steps"]] == [16]
