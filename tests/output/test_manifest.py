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


_CUT_WHILE_HASHED = r"""
import os, sys
from rollout_cli.core import hashing
from rollout_cli.output import manifest

path = sys.argv[1]
with open(path, "wb") as f:
    f.write(os.urandom(4 << 20))
real = hashing.new


class Cutting:
    # the trainer rewrites the input while it is being hashed: cut after the first bytes seen
    def __init__(self, h):
        self.h, self.cut = h, False

    def update(self, data):
        if not self.cut:
            self.cut = True
            os.truncate(path, 4096)
        self.h.update(data)

    def hexdigest(self):
        return self.h.hexdigest()


hashing.new = lambda algorithm=hashing.ALGORITHM: Cutting(real(algorithm))
print(manifest.file_fingerprint(path)["size"])
"""


def test_an_input_cut_short_while_it_is_fingerprinted_does_not_kill_the_process(tmp_path):
    """A mapped page cut off the file would end the process with SIGBUS; an input is read."""
    import subprocess
    import sys

    script = tmp_path / "cut.py"
    script.write_text(_CUT_WHILE_HASHED)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "input.jsonl")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.split() == [str(4 << 20)]  # the size seen at the start: the run sees the change
