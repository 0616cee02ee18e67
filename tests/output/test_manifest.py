"""output/manifest.py: the manifest's reader and its structure check (`structure_problems`,
what verify relies on), which lists exactly the `manifest_structure` failures verify reports."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from rollout_cli.output import manifest
from rollout_cli.output.model import open_output
from rollout_cli.run.convert import ConvertOptions, convert
from rollout_cli.verification.check import verify_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("manifest") / "out"
    convert([os.path.join(REPO, "sample_data", "jsonl")], str(out), ConvertOptions(overwrite=True, workers=1, shards=2))
    return str(out)


def _drop_digests(m):
    for s in m["steps"]:
        for sh in s["shards"]:
            sh.pop("blake3")


BROKEN = {
    "no digests": _drop_digests,
    "counts": lambda m: m.update(counts=[]),
    "options.shards": lambda m: m["options"].update(shards=0),
    "step fields": lambda m: m["steps"][0].update(rows="16", step_groups=None),
    "tokens_per_shard": lambda m: m["steps"][1].update(tokens_per_shard=None),
    "shard path": lambda m: m["steps"][1]["shards"][0].update(path="data/x.txt"),
    "mmap": lambda m: m["steps"][2]["shards"][1]["mmap"].update(path="mmap/eval/x.parquet", bytes=-3),
    "rejects": lambda m: m.update(rejects={"path": "elsewhere.jsonl", "count": 1}),
}


def test_a_converted_manifest_has_no_structure_problem(sample_out):
    assert manifest.structure_problems(manifest.read(sample_out)) == []
    assert open_output(sample_out).structure_problems() == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_structure_problems_are_verifys(sample_out, tmp_path, name):
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    path = out / "manifest.json"
    m = json.loads(path.read_text())
    BROKEN[name](m)
    path.write_text(json.dumps(m))
    got = manifest.structure_problems(manifest.read(str(out)))
    assert got, name
    want = [f["detail"] for f in verify_output(str(out), quick=True)["failures"] if f["invariant"] == "manifest_structure"]
    assert got[:20] == want, name
