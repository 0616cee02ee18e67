"""rollout_cli.run.scheduler: which task goes to the engine when, and the labels it gives them."""
from __future__ import annotations

import pytest

from conftest import SAMPLE_DATA, copts
from rollout_cli.inputs.discover import InputFile
from rollout_cli.inputs.units import Unit
from rollout_cli.run.scheduler import Scheduler, finish_label, part_label
from rollout_cli.run.tasks import PartTask


def test_task_labels_name_the_stage_the_step_and_the_bytes():
    inp = InputFile("/d/rollout_data/3.jsonl", "rollout_data/3.jsonl", "jsonl", 3, "train", "name")
    whole = PartTask(0, 0, inp, 0, None, "/s/p0.arrow")
    piece = PartTask(0, 1, inp, 1024, 4096, "/s/p1.arrow")
    assert part_label(whole) == "parse of train step 3 (rollout_data/3.jsonl)"
    assert part_label(piece) == "parse of train step 3 (rollout_data/3.jsonl, bytes 1024-4096)"
    assert finish_label(Unit(inp, 3)) == "finish of train step 3 (rollout_data/3.jsonl)"
    dump = InputFile("/d/x.pt", "x.pt", "pt", None, "eval", "none")
    assert finish_label(Unit(dump, None)) == "finish of eval input (x.pt)"


@pytest.mark.parametrize("steps, parts", [(1, 2), (1, 1), (2, 1), (3, 1)])
def test_a_step_of_one_part_is_one_task_and_a_step_cut_in_parts_is_staged(steps, parts):
    """With cores to spare a large step is cut into parts, staged and finished apart; a step
    of one part is read, finished and written by one task. With a step per slot or more,
    tasks go largest first."""

    class TwoSlots:
        def slots(self):
            return 2

    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    files = [src / f"{k}.jsonl" for k in (1, 2, 3)][:steps]
    units = [Unit(InputFile(str(f), str(f), "jsonl", k + 1, "train", "name"), k + 1) for k, f in enumerate(files)]
    tasks = [PartTask(u, k, unit.input, 0, None, f"/nowhere/{u}-{k}.arrow") for u, unit in enumerate(units)
             for k in range(parts)]
    sched = Scheduler(TwoSlots(), units, tasks, copts(), None, "/nowhere", [], None, None)
    assert [sched._whole(t) for t in tasks] == [parts == 1] * len(tasks)
    assert sched.step_tasks == (steps >= 2)
    assert [sched._size(t) for t in tasks] == [f.stat().st_size for f in files for _ in range(parts)]


@pytest.mark.parametrize("reader_gives", [True, False])
def test_a_step_read_whole_is_fingerprinted_by_its_reader(tmp_path, monkeypatch, reader_gives):
    """Plain JSONL steps read whole are fingerprinted as they are read: this process does not
    read them again, unless the reader could not (then it hashes the file itself); the
    manifest records the same fingerprints either way."""
    import json
    import shutil

    from rollout_cli.inputs.jsonl import reader as jsonl_reader
    from rollout_cli.output import manifest as manifest_mod
    from rollout_cli.run.convert import convert

    run = tmp_path / "run"
    shutil.copytree(SAMPLE_DATA / "jsonl" / "rollout_data", run)
    hashed_here = []
    real = manifest_mod.file_fingerprint

    def here(path, *a, **kw):
        hashed_here.append(path)
        return real(path, *a, **kw)

    monkeypatch.setattr(manifest_mod, "file_fingerprint", here)
    if not reader_gives:
        monkeypatch.setattr(jsonl_reader._Fingerprinting, "fingerprint", lambda self: None)
    convert([str(run)], str(tmp_path / "out"), copts())
    monkeypatch.undo()
    inputs = json.loads((tmp_path / "out" / "manifest.json").read_text())["inputs"]
    paths = sorted(str(p) for p in run.iterdir())
    assert sorted(hashed_here) == ([] if reader_gives else paths)
    assert len(inputs) == len(paths)
    for rec in inputs:
        want = real(rec["path"])
        assert (rec["size"], rec["xxh3_128"]) == (want["size"], want["xxh3_128"])
