"""loader/dataset.py on the output model: open_dataset takes an Output already opened (one read
of the manifest for both faces), and a broken manifest is the model's ManifestError."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from rollout_cli.output.manifest import ManifestError
from rollout_cli.output.model import open_output
from rollout_cli.loader import Dataset, PackedBatch, open_dataset
from rollout_cli.run.convert import ConvertOptions, convert

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("dataset") / "out"
    convert([os.path.join(REPO, "sample_data", "jsonl")], str(out), ConvertOptions(overwrite=True, workers=1, shards=2))
    return str(out)


def test_open_dataset_takes_an_output(sample_out):
    o = open_output(sample_out)
    ds = open_dataset(o, "eval")
    assert isinstance(ds, Dataset) and ds.output is o and ds.manifest is o.manifest
    assert ds.steps == o.step_numbers("eval") and ds.num_shards == o.num_shards("eval")
    by_path = open_dataset(sample_out, "eval")
    for step in ds.steps:
        for r in range(ds.num_shards):
            a, b = ds.load(step, r), by_path.load(step, r)
            assert isinstance(a, PackedBatch) and a.tensors().keys() == b.tensors().keys()
            assert all(torch.equal(t, b.tensors()[k]) for k, t in a.tensors().items())
            # the batch holds the rows table() reads
            t = o.table(step, r, "eval", columns=["rollout_id", "reward"])
            assert a.rollout_ids.tolist() == t.column("rollout_id").to_pylist()
            assert a.rewards.tolist() == pytest.approx(t.column("reward").to_pylist())


def test_a_broken_manifest_is_the_models_error(sample_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    m = json.loads((out / "manifest.json").read_text())
    m["steps"].append(m["steps"][0])
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="train step 1 is listed twice") as e:
        open_dataset(out)
    assert e.value.invariant == "duplicate_step"
