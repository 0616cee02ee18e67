"""The output directory (output.py): exists check, --overwrite, staging, the manifest as commit marker."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import copts, crashing_s3, make_sample, read_rows, shard_bytes, tree_digest, write_jsonl
from rollout_cli.output import commit as output
from rollout_cli.run.convert import convert
from rollout_cli.core.errors import ExitCode, InvalidInputError, OutputExistsError


def _inputs(tmp_path, name="in", k=4, bad_line=None):
    samples = [make_sample(index=i, group_index=i // 2, reward=float(i % 2)) for i in range(k)]
    if bad_line is not None:
        samples[bad_line]["status"] = "bogus"
    write_jsonl(tmp_path / name / "1.jsonl", samples)
    write_jsonl(tmp_path / name / "2.jsonl", [make_sample(index=10 + i, group_index=5, reward=float(i)) for i in range(3)])
    return str(tmp_path / name)


def _files(out) -> list[str]:
    out = Path(out)
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def test_fresh_output_layout(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    files = _files(out)
    assert "manifest.json" in files
    assert not any(f.startswith(".staging") for f in files)
    assert "data/step-000001/shard-00000-of-00001.parquet" in files
    assert "data/step-000002/shard-00000-of-00001.parquet" in files
    assert not any(f.startswith("data/") and not f.endswith(".parquet") for f in files)
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["input_samples"] == m["counts"]["rows"] + m["counts"]["rejected"] == 7


def test_exists_raises_exit_5_and_leaves_output_untouched(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    before = tree_digest(out)
    with pytest.raises(OutputExistsError) as ei:
        convert([_inputs(tmp_path, "in2", k=6)], str(out), copts())
    assert ei.value.exit_code == ExitCode.OUTPUT_EXISTS == 5
    assert "--overwrite" in str(ei.value)
    assert tree_digest(out) == before
    assert not (out / ".staging").exists()


def test_foreign_directory_refused_and_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("precious")
    before = tree_digest(out)
    with pytest.raises(OutputExistsError) as ei:
        convert([_inputs(tmp_path)], str(out), copts(overwrite=True))
    assert ei.value.exit_code == 5
    assert tree_digest(out) == before


def test_empty_directory_is_fine(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    convert([_inputs(tmp_path)], str(out), copts())
    assert (out / "manifest.json").exists()


def test_overwrite_replaces(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    convert([_inputs(tmp_path, "in2", k=6)], str(out), copts(overwrite=True))
    assert len(read_rows(out, step=1)) == 6
    assert not (out / ".staging").exists()
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["rows"] == 9


def test_overwrite_keeps_old_until_new_complete(tmp_path):
    """The old output stays whole while the new run works; no new file lands in data/ before commit."""
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    old = tree_digest(out)
    snapshots = []

    def progress(what, done, total):
        now = tree_digest(out)
        snapshots.append(now)
        # every old file is still there, unchanged
        for rel, dig in old.items():
            assert now.get(rel) == dig, rel
        # everything new is staged outside data/ (and the run holds its writer lock)
        assert ".lock" in now
        for rel in set(now) - set(old) - {".lock"}:
            assert rel.startswith(".staging" + os.sep), rel
            assert "data" not in Path(rel).parts[:1]

    convert([_inputs(tmp_path, "in2", k=6)], str(out), copts(overwrite=True), progress=progress)
    assert len(snapshots) >= 2
    # something was staged by the time of the last progress call
    assert any(rel.startswith(".staging") for rel in snapshots[-1])
    assert len(read_rows(out, step=1)) == 6


def test_overwrite_with_invalid_input_keeps_old(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    old = {k: v[1] for k, v in tree_digest(out).items()}
    with pytest.raises(InvalidInputError) as ei:
        convert([_inputs(tmp_path, "bad", k=6, bad_line=3)], str(out), copts(overwrite=True))
    assert ei.value.exit_code == 3
    now = {k: v[1] for k, v in tree_digest(out).items() if not k.startswith(".staging")}
    assert now == old
    assert len(read_rows(out, step=1)) == 4


def test_staging_never_inside_data(tmp_path):
    out = tmp_path / "out"
    seen = set()

    def progress(what, done, total):
        for dirpath, dirs, names in os.walk(out):
            for n in dirs + names:
                seen.add(os.path.relpath(os.path.join(dirpath, n), out))

    convert([_inputs(tmp_path)], str(out), copts(), progress=progress)
    assert any(p.startswith(".staging") for p in seen)
    assert not any(p.startswith("data") for p in seen), sorted(seen)
    for dirpath, dirs, names in os.walk(out / "data"):
        assert ".staging" not in dirs and not any(n.endswith((".tmp", ".partial")) for n in names)


def test_invalid_input_writes_no_manifest_and_no_data(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(InvalidInputError) as ei:
        convert([_inputs(tmp_path, bad_line=1)], str(out), copts())
    assert ei.value.exit_code == 3
    assert not (out / "manifest.json").exists()
    assert not (out / "data").exists()


def test_rerun_after_invalid_input_needs_no_overwrite(tmp_path):
    """A run that stopped on invalid input wrote nothing ("nothing written"): fixing the input and
    running again into the same OUT must work without --overwrite or --resume."""
    out = tmp_path / "out"
    with pytest.raises(InvalidInputError):
        convert([_inputs(tmp_path, bad_line=1)], str(out), copts())
    convert([_inputs(tmp_path, "fixed")], str(out), copts())
    assert (out / "manifest.json").exists()


def test_state_values(tmp_path):
    assert output.state(str(tmp_path / "none")) == "absent"
    (tmp_path / "empty").mkdir()
    assert output.state(str(tmp_path / "empty")) == "empty"
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x").write_text("1")
    assert output.state(str(tmp_path / "foreign")) == "foreign"
    (tmp_path / "file").write_text("1")
    assert output.state(str(tmp_path / "file")) == "foreign"
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    assert output.state(str(out)) == "complete"


def test_overwrite_same_input_same_bytes(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    first = shard_bytes(out)
    convert([_inputs(tmp_path)], str(out), copts(overwrite=True))
    assert shard_bytes(out) == first


def test_overwrite_drops_entries_the_new_run_does_not_write(tmp_path):
    out = tmp_path / "out"
    write_jsonl(tmp_path / "a" / "3.jsonl", [make_sample(index=i, group_index=0) for i in range(2)])
    write_jsonl(tmp_path / "a" / "eval_3.jsonl", [make_sample(index=i, group_index=0) for i in range(2)])
    convert([str(tmp_path / "a")], str(out), copts())
    assert (out / "eval").exists()
    convert([str(tmp_path / "a" / "3.jsonl")], str(out), copts(overwrite=True))
    assert not (out / "eval").exists()
    assert read_rows(out, "eval") == []


# --- object stores: the manifest's PUT is the commit ------------------------------------------

def _s3_state(uri: str, stale_card: str | None = None) -> dict:
    """The committed dataset at `uri` (its manifest), after checking it verifies and loads
    (`stale_card`: its dataset card is the previous dataset's (`changed`) or none
    (`missing`), which verify notes)."""
    from rollout_cli import open_dataset
    from rollout_cli.output import manifest
    from rollout_cli.verification.check import verify_output

    result = verify_output(uri)
    assert result["ok"], result["failures"]
    card_notes = [n for n in result["notes"] if n.startswith("README.md: not this manifest's dataset card")]
    assert len(card_notes) == (1 if stale_card else 0), result["notes"]
    assert not stale_card or stale_card in card_notes[0]
    m = manifest.read(uri)
    ds = open_dataset(uri)
    for step in ds.steps:
        for r in range(ds.num_shards):
            assert ds.load(step, r, verify=True).num_samples == ds.shard_info(step, r)["rows"]
    return m


@pytest.mark.parametrize("scenario", ["overwrite", "fresh"])
def test_object_store_commit_survives_a_crash_at_every_write(s3, tmp_path, monkeypatch, scenario):
    """An object-store OUT holds the old dataset (none, into a fresh OUT) or the new one,
    whichever write or delete the converting process dies at: every data object is written
    once, in a generation folder no manifest names, and the manifest's PUT is the commit."""
    from pyarrow import fs as pafs

    from rollout_cli.core.errors import OutputError
    from rollout_cli.output import manifest

    inputs = _inputs(tmp_path)
    base = f"bkt/crash-{scenario}"
    old = None
    if scenario == "overwrite":
        convert([inputs], f"s3://{base}", copts(shards=1, mmap=True))
        old = _s3_state(f"s3://{base}")
        assert old["options"]["shards"] == 1

    def fresh_copy(uri: str) -> None:
        if old is not None:
            pafs.copy_files(base, uri, source_filesystem=s3, destination_filesystem=s3)

    # count the writes of an undisturbed run
    fresh_copy(f"{base}-count")
    counter = crashing_s3(monkeypatch, s3)
    convert([inputs], f"s3://{base}-count", copts(shards=2, mmap=True, overwrite=True))
    monkeypatch.undo()
    writes = counter.writes
    kinds = {name for name, _ in writes}
    assert "open_output_stream" in kinds and (old is None or kinds & {"delete_file", "delete_dir"})
    # each object is written once: no staging copy, no server-side copy
    uploads = [p for name, p in writes if name == "open_output_stream"]
    assert len(uploads) == len(set(uploads)) and "copy_file" not in kinds and "move" not in kinds
    new = _s3_state(f"s3://{base}-count")
    assert new["options"]["shards"] == 2
    put = next(i for i, (name, p) in enumerate(writes) if name == "open_output_stream" and p.endswith("/manifest.json"))
    assert all(name not in ("delete_file", "delete_dir") for name, _ in writes[:put])  # nothing old goes before the commit
    seen = set()
    for k in range(len(writes) + 1):
        uri = f"{base}-{k}"
        fresh_copy(uri)
        handler = crashing_s3(monkeypatch, s3, k)
        try:
            convert([inputs], f"s3://{uri}", copts(shards=2, mmap=True, overwrite=True))
            finished = True
        except OutputError:
            finished = False
        monkeypatch.undo()
        # the dataset card's PUT follows the manifest's: a failure there fails the run (the card in
        # place still names the previous dataset's files, kept); one after it is in the cleanup,
        # which is best effort
        assert writes[put + 1][1].endswith("/README.md")
        assert finished == (k > put + 1) and handler.dead == (k < len(writes))
        if k <= put and old is None:
            with pytest.raises(manifest.ManifestError, match="missing"):
                manifest.read(f"s3://{uri}")
            got, m = "none", None
        else:
            # a crash at the card's PUT leaves the previous card (and the files it names), or none
            m = _s3_state(f"s3://{uri}", stale_card=None if k != put + 1 else "changed" if old else "missing")
            got = "new" if m["options"]["shards"] == 2 else "old"
        assert got == ("new" if k > put else "old" if old else "none"), (k, writes[k - 1] if k else None)
        if m is not None:
            ref = new if got == "new" else old
            assert [sh["blake3"] for s in m["steps"] for sh in s["shards"]] == [sh["blake3"] for s in ref["steps"] for sh in s["shards"]]
        seen.add(got)
    assert seen == {"old" if old else "none", "new"}


# --- a refused command changes nothing --------------------------------------------------------

def _interrupted(tmp_path, out, inputs: list[str]) -> None:
    """A run stopped (Ctrl-C) as its second step finishes: OUT holds its staging area, the first step done."""
    def stop(what, done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert(inputs, str(out), copts(), progress=stop)
    assert output.state(str(out)) == "interrupted" and (out / ".staging" / "run" / "done").is_dir()


def _new_steps(tmp_path) -> str:
    """A good step 3 (converted first) and a step 4 with an invalid sample."""
    write_jsonl(tmp_path / "more" / "3.jsonl", [make_sample(index=20 + i, group_index=20) for i in range(2)])
    bad = [make_sample(index=30 + i, group_index=30) for i in range(2)]
    bad[1]["status"] = "bogus"
    write_jsonl(tmp_path / "more" / "4.jsonl", bad)
    return str(tmp_path / "more")


def _refusals(tmp_path, inputs: str):
    """(name, convert's inputs, its options, the error it gets, exit code, held by another writer)."""
    from rollout_cli.core.errors import OutputBusyError, UsageError

    return [
        ("resume with other options", [inputs], copts(resume=True, shards=2), UsageError, 2, False),
        ("no --overwrite or --resume", [inputs], copts(), OutputExistsError, 5, False),
        ("busy, --overwrite", [inputs], copts(overwrite=True), OutputBusyError, 8, True),
        ("busy, --resume", [inputs], copts(resume=True), OutputBusyError, 8, True),
        ("busy, fresh", [inputs], copts(), OutputBusyError, 8, True),
        ("resume onto invalid input", [inputs, _new_steps(tmp_path)], copts(resume=True), InvalidInputError, 3, False),
    ]


@pytest.mark.parametrize("kind", ["complete", "interrupted"])
def test_every_refusal_leaves_the_output_and_its_staging_byte_identical(tmp_path, kind):
    """Whatever refuses a convert (exit 2, 5, 8, or 3 on resume), OUT and OUT/.staging are, file
    for file, the bytes and modification times they were; the right --resume still works after."""
    from conftest import tree_state
    from rollout_cli.output import lock as writer_lock

    out = tmp_path / "out"
    inputs = _inputs(tmp_path)
    if kind == "complete":
        convert([inputs], str(out), copts())
    else:
        _interrupted(tmp_path, out, [inputs])
    for name, args, opts, error, code, busy in _refusals(tmp_path, inputs):
        before = tree_state(out)
        held = writer_lock.acquire(str(out)) if busy else None
        try:
            with pytest.raises(error) as ei:
                convert(args, str(out), opts)
        finally:
            if held:
                held.release()
        assert ei.value.exit_code == code, name
        assert tree_state(out) == before, name
    res = convert([inputs], str(out), copts(resume=True))
    assert res["counts"]["rows"] == 7 and not (out / ".staging").exists()


def test_a_refused_resume_on_an_object_store_writes_nothing(s3, tmp_path):
    """On s3://: a --resume with other options (exit 2), onto invalid input (exit 3) or while
    another writer holds the lease (exit 8) leaves every object as it was."""
    from rollout_cli.core import storage
    from rollout_cli.core.errors import OutputBusyError, UsageError
    from rollout_cli.output import lock as writer_lock

    uri = "s3://bkt/refused-resume"
    inputs = _inputs(tmp_path)
    convert([inputs], uri, copts())

    def objects() -> dict:
        return {rel: (storage.file_info(f"{uri}/{rel}").mtime_ns, storage.read_bytes(f"{uri}/{rel}"))
                for rel in storage.files_under(uri)}

    before = objects()
    with pytest.raises(UsageError):
        convert([inputs], uri, copts(resume=True, shards=2))
    assert objects() == before
    with pytest.raises(InvalidInputError):
        convert([inputs, _new_steps(tmp_path)], uri, copts(resume=True))
    assert objects() == before
    held = writer_lock.acquire(uri)
    with_lease = objects()
    with pytest.raises(OutputBusyError):
        convert([inputs], uri, copts(resume=True))
    assert objects() == with_lease
    held.release()
    assert objects() == before
    convert([inputs], uri, copts(resume=True))
    assert objects() == before  # up to date: nothing rewritten
