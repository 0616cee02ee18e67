"""rollout_cli.verification.strays: a file under the data trees that no manifest lists is a failure; a foreign
file at the top of OUT is only a note.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

import pytest

from rollout_cli.verification.check import verify_output
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import manifest, step_entry, fails


@pytest.mark.parametrize(
    "rel",
    ["data/step-000001/notes.txt", "data/step-000009/shard-00000-of-00002.parquet", "mmap/data/step-000002/extra.arrow",
     "eval/stray.parquet", "data/.hidden"],
)
def test_extra_file_in_the_data_trees_is_caught(out, rel):
    p = out / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes((out / step_entry(manifest(out), 1)["shards"][0]["path"]).read_bytes())
    for quick in (False, True):
        assert fails(verify_output(str(out), quick=quick)) == {(rel, "unexpected_file")}


def test_unrelated_top_level_file_is_only_a_note(out):
    (out / "README.txt").write_text("hello")
    res = verify_output(str(out))
    assert res["ok"] and any("README.txt" in n for n in res["notes"])
