"""inspection/sources.py: what the paths given to `inspect` are. Converted outputs (a folder with
manifest.json, or the manifest itself) or dumps, never both; dumps planned as convert plans them,
the other split counted; a shard of an output, an unfinished conversion and an empty folder
refused with a usage error that says what to give instead."""
from __future__ import annotations

import shutil

import pytest

from conftest import SAMPLE_JSONL
from rollout_cli.core.errors import UsageError
from rollout_cli.core.layout import MANIFEST, STAGING
from rollout_cli.inspection.options import InspectOptions
from rollout_cli.inspection.sources import resolve


def test_dumps_are_planned_by_split():
    src = resolve([str(SAMPLE_JSONL)], InspectOptions())
    assert src.kind == "dumps" and not src.outputs
    assert sorted(u.input.step for u in src.units) == [1, 2, 3]
    assert src.other_split == 1  # eval_3.jsonl
    ev = resolve([str(SAMPLE_JSONL)], InspectOptions(split="eval"))
    assert [u.input.step for u in ev.units] == [3] and ev.other_split == 3


def test_an_output_folder_or_its_manifest(sample_out_clean):
    for given in (str(sample_out_clean), str(sample_out_clean / MANIFEST)):
        src = resolve([given], InspectOptions())
        assert src.kind == "converted" and not src.units
        assert [o.root for o in src.outputs] == [str(sample_out_clean)]
        assert src.outputs[0].steps_of("train") and src.other_split == 1  # its one eval step


def test_outputs_and_dumps_together_are_refused(sample_out_clean):
    with pytest.raises(UsageError, match="either converted outputs .* or dumps, not both"):
        resolve([str(sample_out_clean), str(SAMPLE_JSONL)], InspectOptions())


def test_refusals_say_what_to_give(sample_out_clean, tmp_path):
    with pytest.raises(UsageError, match="no input given"):
        resolve([], InspectOptions())
    shard = next((sample_out_clean / "data").rglob("*.parquet"))
    with pytest.raises(UsageError, match="a shard of converted output; inspect its output folder"):
        resolve([str(shard)], InspectOptions())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="no input files found"):
        resolve([str(empty)], InspectOptions())
    unfinished = tmp_path / "unfinished"
    (unfinished / STAGING).mkdir(parents=True)
    with pytest.raises(UsageError, match=r"an unfinished conversion .* --resume"):
        resolve([str(unfinished)], InspectOptions())
    # a finished output that also holds a staging folder is an output, not an unfinished one
    done = tmp_path / "done"
    shutil.copytree(sample_out_clean, done)
    (done / STAGING).mkdir()
    assert resolve([str(done)], InspectOptions()).kind == "converted"
