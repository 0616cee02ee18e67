"""rollout_cli.verification.check: `verify_output` end to end: a clean output passes in full and quick mode, shards
are read a row group at a time, rollouts stay in one shard, and an output on an object store is
checked like a local one.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

import json
from pathlib import Path
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.core.errors import ExitCode, UsageError
from rollout_cli.core.options import ConvertOptions
from rollout_cli.run.convert import convert
from rollout_cli.verification.check import verify_output
from conftest import SAMPLE_JSONL
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import (
    SAMPLE_PARQUET, convert_cli, manifest, save_manifest, step_entry, fails, rewrite_shard,
    read_shard, multi_sample_rollout, input_with_a_bad_sample,
)


def test_clean_output_passes_full_and_quick(out):
    for quick in (False, True):
        res = verify_output(str(out), quick=quick)
        assert res["ok"] and res["failures"] == [], res["failures"]
        m = manifest(out)
        n_shards = sum(len(s["shards"]) for s in m["steps"])
        assert res["checked"]["shards"] == n_shards == 8
        assert res["checked"]["files"] == 2 + 2 * n_shards  # manifest + card + Parquet + IPC copies
        assert res["checked"]["rows"] == m["counts"]["rows"]
        assert res["checked"]["hashed_bytes"] == (0 if quick else res["checked"]["bytes"])
        json.dumps(res)  # plain data


def test_clean_outputs_of_other_shapes_pass(tmp_path):
    """--keep-text (extra schema columns), --no-mmap, and an output with rejects.jsonl."""
    a = tmp_path / "text"
    convert_cli([SAMPLE_PARQUET], a, "--keep-text", "--no-mmap", "--shards", "3", "--keep-groups")
    assert verify_output(str(a))["failures"] == []
    b = tmp_path / "rej"
    convert_cli([input_with_a_bad_sample(tmp_path)], b, "--on-error", "skip")
    assert manifest(b)["rejects"]["count"] == 1
    res = verify_output(str(b))
    assert res["failures"] == [] and "rejects.jsonl" in res["files"]


def test_rollout_split_across_shards_is_caught(out):
    m = manifest(out)
    s = step_entry(m, 2)
    shard, t, rows = multi_sample_rollout(out, m)
    k = s["shards"].index(shard)
    other = s["shards"][1 - k]
    moved = t.take(pa.array([rows[-1]]))
    keep = [i for i in range(t.num_rows) if i != rows[-1]]
    rewrite_shard(out, m, shard, t.take(pa.array(keep)), counts=True)
    rewrite_shard(out, m, other, pa.concat_tables([read_shard(out, other), moved]), counts=True)
    s["tokens_per_shard"] = [sh["tokens"] for sh in s["shards"]]
    save_manifest(out, m)
    res = verify_output(str(out))
    assert (other["path"], "rollout_split") in fails(res) or (shard["path"], "rollout_split") in fails(res), res["failures"]
    split = next(f for f in res["failures"] if f["invariant"] == "rollout_split")
    assert shard["path"] in split["detail"] and other["path"] in split["detail"]


def test_verify_streams_row_groups_and_never_reads_a_whole_file(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    src = tmp_path / "in" / "5.jsonl"
    src.parent.mkdir()
    with open(src, "w") as f:
        for i in range(120):
            rl = int(rng.integers(100, 400))
            f.write(json.dumps({"group_index": i // 4, "index": i, "tokens": rng.integers(0, 50000, 50 + rl).tolist(),
                                "response_length": rl, "reward": float(i % 2), "status": "completed"}) + "\n")
    out = tmp_path / "out"
    convert_cli([src], out, "--shards", "2", "--row-group-bytes", "65536")
    assert all(sh["row_groups"] > 1 for sh in step_entry(manifest(out), 5)["shards"])

    def whole_file(*a, **k):
        raise AssertionError("verify must read shards one row group at a time")

    monkeypatch.setattr(pq.ParquetFile, "read", whole_file)
    monkeypatch.setattr(pq, "read_table", whole_file)
    res = verify_output(str(out))
    assert res["failures"] == [] and res["checked"]["rows"] == 120


def test_not_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        verify_output(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError):
        verify_output(str(tmp_path / "f"))


@pytest.fixture(scope="module")
def s3_out(s3, tmp_path_factory):
    """The sample JSONL plus one invalid sample (skipped into rejects.jsonl), converted to S3
    and to a local folder."""
    from pyarrow import fs as pafs

    from conftest import make_sample, write_jsonl

    src = tmp_path_factory.mktemp("s3-verify-in")
    for f in SAMPLE_JSONL.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    bad = make_sample(index=900, group_index=900)
    bad["loss_mask"] = [1]
    write_jsonl(src / "9.jsonl", [make_sample(index=901, group_index=901), bad])
    pafs.copy_files(str(src), "bkt/verify-in", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    local = tmp_path_factory.mktemp("s3-verify-local") / "out"
    opts = dict(workers=1, on_error="skip", shards=2)
    convert([str(src)], str(local), ConvertOptions(**opts))
    convert(["s3://bkt/verify-in"], "s3://bkt/verify-out", ConvertOptions(**opts))
    return "s3://bkt/verify-out", local


def _copy_out(s3, name: str) -> str:
    from pyarrow import fs as pafs

    pafs.copy_files("bkt/verify-out", f"bkt/{name}", source_filesystem=s3, destination_filesystem=s3)
    return f"s3://bkt/{name}"


def test_verify_reads_an_output_on_an_object_store(s3_out):
    uri, local = s3_out
    r = CliRunner().invoke(app, ["verify", uri, "--json"])
    assert r.exit_code == 0, r.output
    got, want = json.loads(r.output), verify_output(str(local))
    same = ("files", "shards", "steps", "eval_steps", "rows")  # (rejects.jsonl names the inputs: its bytes differ)
    assert got["ok"] and {k: got["checked"][k] for k in same} == {k: want["checked"][k] for k in same}
    assert got["checked"]["hashed_bytes"] == got["checked"]["bytes"] > 0
    m = json.loads((Path(local) / "manifest.json").read_text())
    assert m["rejects"]["count"] == 1  # rejects.jsonl checked too, in the generation
    files = set(got["files"])
    gen = json.loads(__import__("rollout_cli.core.storage", fromlist=["x"]).read_bytes(f"{uri}/manifest.json"))["generation"]
    assert f"gen/{gen}/rejects.jsonl" in files and all(f in ("manifest.json", "README.md") or f.startswith(f"gen/{gen}/") for f in files)
    assert CliRunner().invoke(app, ["verify", uri, "--quick"]).exit_code == 0


@pytest.mark.parametrize("what", ["parquet", "arrow", "rejects"])
def test_verify_fails_with_exit_4_on_a_changed_object(s3, s3_out, what):
    from rollout_cli.core import storage

    uri = _copy_out(s3, f"verify-bad-{what}")
    m = json.loads(storage.read_bytes(f"{uri}/manifest.json"))
    sh = m["steps"][0]["shards"][0]
    rel = {"parquet": sh["path"], "arrow": sh["mmap"]["path"], "rejects": m["rejects"]["path"]}[what]
    data = bytearray(storage.read_bytes(f"{uri}/{rel}"))
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    storage.write_bytes(f"{uri}/{rel}", bytes(data))
    r = CliRunner().invoke(app, ["verify", uri])
    assert r.exit_code == ExitCode.INTEGRITY, r.output
    assert rel in r.output
    result = verify_output(uri)
    assert any(f["file"] == rel and f["invariant"] in ("checksum", "readable", "mmap_content") for f in result["failures"])
    storage.delete_file(f"{uri}/{rel}")
    assert any(f["file"] == rel and f["invariant"] == "file_present" for f in verify_output(uri)["failures"])


def test_verify_on_an_object_store_tells_leftovers_from_stray_files(s3, s3_out):
    from rollout_cli.core import storage

    uri = _copy_out(s3, "verify-stray")
    m = json.loads(storage.read_bytes(f"{uri}/manifest.json"))
    # another generation's files (an interrupted run's, an old dataset's): noted, not failed
    storage.write_bytes(f"{uri}/gen/{'0' * 32}/data/step-000001/shard-00000-of-00002.parquet", b"old")
    result = verify_output(uri)
    assert result["ok"], result["failures"]
    assert any(n.startswith(f"gen/{'0' * 32}:") for n in result["notes"])
    # a file in the manifest's own generation that it does not list: a failure
    stray = f"gen/{m['generation']}/data/step-000001/extra.parquet"
    storage.write_bytes(f"{uri}/{stray}", b"x")
    result = verify_output(uri)
    assert [(f["file"], f["invariant"]) for f in result["failures"]] == [(stray, "unexpected_file")]


def test_verify_of_a_missing_or_unconverted_uri(s3):
    r = CliRunner().invoke(app, ["verify", "s3://bkt/no-such-output"])
    assert r.exit_code == ExitCode.USAGE and "no such directory" in r.output
    r = CliRunner().invoke(app, ["verify", "s3://bkt/dumps/jsonl"])  # objects, but no manifest
    assert r.exit_code == ExitCode.INTEGRITY and "manifest.json" in r.output and "missing" in r.output


@pytest.mark.parametrize("card", ["stale", "missing"])
def test_a_commit_cut_off_before_its_card_still_verifies_on_an_object_store(s3, s3_out, card):
    """The manifest is the commit: a card the commit did not get to write (the previous one,
    or none yet) is a note on an object store; the same in a local output is a failure."""
    from rollout_cli.core import storage

    uri = _copy_out(s3, f"verify-card-{card}")
    if card == "stale":
        storage.write_bytes(f"{uri}/README.md", b"---\nconfigs: []\n---\nthe previous commit's card\n")
    else:
        storage.delete_file(f"{uri}/README.md")
    result = verify_output(uri)
    assert result["ok"], result["failures"]
    assert any(n.startswith("README.md: not this manifest's dataset card") for n in result["notes"])
    readme = Path(s3_out[1]) / "README.md"
    kept = readme.read_bytes()
    readme.write_bytes(b"changed")
    try:
        assert [f["file"] for f in verify_output(str(readme.parent))["failures"]] == ["README.md"]
    finally:
        readme.write_bytes(kept)
