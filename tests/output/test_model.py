"""The torch-free model of an output (output/model.py): open_output parses and checks the
manifest once into typed steps and shards; table() reads a shard from its IPC copy or its
Parquet file, the same rows either way; a broken manifest names its invariant; no torch needed."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_cli.core.errors import IntegrityError, UsageError
from rollout_cli.output.manifest import ManifestError
from rollout_cli.output.model import Output, Shard, Step, open_output
from rollout_cli.run.convert import ConvertOptions, convert

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_JSONL = os.path.join(REPO, "sample_data", "jsonl")


def _convert(out, **kw) -> None:
    convert([SAMPLE_JSONL], str(out), ConvertOptions(overwrite=True, workers=1, **kw))


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "out"
    _convert(out, shards=2)
    return str(out)


def _copy(src: str, dest) -> str:
    shutil.copytree(src, dest)
    return str(dest)


def _rewrite_manifest(out: str, change) -> None:
    path = os.path.join(out, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    change(m)
    with open(path, "w") as f:
        json.dump(m, f)


def test_the_model_is_the_manifest_typed(sample_out):
    with open(os.path.join(sample_out, "manifest.json")) as f:
        m = json.load(f)
    o = open_output(sample_out)
    assert isinstance(o, Output) and o.root == sample_out
    assert o.schema_version == m["schema_version"] and o.options == m["options"] and o.pending == ()
    assert [(s.split, s.step) for s in o.steps] == [(s["split"], s["step"]) for s in m["steps"]]
    assert o.splits == ("train", "eval") and o.step_numbers("train") == [1, 2, 3] and o.step_numbers("eval") == [3]
    assert o.num_shards("train") == 2 and o.num_shards("eval") == 2
    for s, e in zip(o.steps, m["steps"]):
        assert isinstance(s, Step) and s.record == e
        assert (s.rows, s.rollouts, s.tokens, s.samples, s.rejected) == (e["rows"], e["rollouts"], e["tokens"], e["samples"], e["rejected"])
        assert dict(s.denominators) == {k: e[k] for k in ("step_mask_sum", "step_rollouts", "step_samples", "step_groups")}
        assert s.schedule is None
        for sh, d in zip(s.shards, e["shards"]):
            assert isinstance(sh, Shard) and (sh.split, sh.step) == (s.split, s.step)
            assert (sh.path, sh.rows, sh.bytes, sh.digest) == (d["path"], d["rows"], d["bytes"], ("blake3", d["blake3"]))
            assert (sh.mmap.path, sh.mmap.bytes, sh.mmap.digest) == (d["mmap"]["path"], d["mmap"]["bytes"], ("blake3", d["mmap"]["blake3"]))
    # frozen: the model is not changed by accident
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.steps[0].shards[0].rows = 0
    with pytest.raises(UsageError, match=r"no train step 9 \(steps: 1, 2, 3\)"):
        o.step(9)
    with pytest.raises(UsageError, match="shard 2 out of range"):
        o.shard(1, 2)
    with pytest.raises(UsageError, match="split"):
        o.steps_of("test")


def test_table_from_ipc_and_from_parquet_are_equal(sample_out):
    o = open_output(sample_out)
    for s in o.steps:
        for r, sh in enumerate(s.shards):
            ipc = o.table(s.step, r, s.split, source="arrow", verify=True)
            parquet = o.table(s.step, r, s.split, source="parquet", verify=True)
            assert ipc.num_rows == sh.rows and ipc.equals(parquet), (s.split, s.step, r)
            assert ipc.equals(pq.read_table(o.full_path(sh.path)))
            assert o.table(s.step, r, s.split).equals(ipc)  # auto: the IPC copy
            cols = ["rollout_id", "tokens"]
            assert o.table(s.step, r, s.split, columns=cols).equals(parquet.select(cols))
            assert o.table(s.step, r, s.split, columns=cols, source="parquet").equals(parquet.select(cols))


def test_table_maps_the_ipc_copy(sample_out):
    """auto reads the IPC copy in place: the Table's token buffer lies inside a mapping of the
    file, not in memory the read allocated."""
    o = open_output(sample_out)
    _, ipc = o.paths(1, 0)
    t = o.table(1, 0)
    buf = t.column("tokens").chunk(0).values.buffers()[1]
    real = os.path.realpath(ipc)
    with open("/proc/self/maps") as f:
        spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f if line.rstrip().endswith(real)]
    assert any(lo <= buf.address and buf.address + buf.size <= hi for lo, hi in spans), "the IPC copy was not mapped"


def test_table_checks_size_digest_and_falls_back_to_parquet(sample_out, tmp_path):
    out = _copy(sample_out, tmp_path / "out")
    o = open_output(out)
    parquet, ipc = o.paths(1, 1)
    data = bytearray(open(ipc, "rb").read())
    view = pa.py_buffer(bytes(data))
    tokens = pa.ipc.open_file(view).read_all().column("tokens").chunk(0).values.buffers()[1]
    data[tokens.address - view.address] ^= 0xFF  # a token id: well-formed Arrow still
    open(ipc, "wb").write(bytes(data))
    o.table(1, 1)  # same size: only a digest check sees it
    with pytest.raises(IntegrityError, match=r"shard-00001-of-00002\.arrow: blake3 mismatch"):
        o.table(1, 1, verify=True)
    with open(parquet, "ab") as f:
        f.write(b"\0")
    with pytest.raises(IntegrityError, match=r"shard-00001-of-00002\.parquet: \d+ bytes, the manifest says"):
        o.table(1, 1, source="parquet")
    os.remove(ipc)
    with pytest.warns(RuntimeWarning, match="reading Parquet instead"):
        with pytest.raises(IntegrityError, match="bytes, the manifest says"):
            o.table(1, 1)
    with pytest.raises(IntegrityError, match="missing"):
        o.table(1, 1, source="arrow")


def test_without_ipc_copies_table_reads_parquet(tmp_path):
    _convert(tmp_path / "out", shards=3, mmap=False)
    o = open_output(tmp_path / "out")
    assert all(sh.mmap is None for s in o.steps for sh in s.shards)
    assert o.table(2, 1).equals(pq.read_table(o.paths(2, 1)[0]))
    with pytest.raises(UsageError, match="no Arrow IPC copy"):
        o.table(2, 1, source="arrow")


@pytest.mark.parametrize("change, invariant, match", [
    (lambda m: m.pop("format"), "manifest", "not a rollout-cli manifest"),
    (lambda m: m.update(schema_version=99), "schema_version", "schema_version 99"),
    (lambda m: m.update(steps={}), "manifest_structure", "steps: expected a list"),
    (lambda m: m["steps"][1].update(split="test"), "manifest_structure", r"steps\[1\]\.split"),
    (lambda m: m["steps"][1].update(step="2"), "manifest_structure", r"steps\[1\]: malformed step entry"),
    (lambda m: m["steps"][1].update(shards=[]), "manifest_structure", r"steps\[1\]: malformed step entry"),
    (lambda m: m["steps"][0]["shards"][1].update(path="../../etc/passwd"), "manifest_structure",
     "train step 1: shard 1: shard path '../../etc/passwd' is outside data/"),
    (lambda m: m["steps"][0]["shards"][1]["mmap"].update(path="data/x.arrow"), "manifest_structure",
     "shard 1.mmap: shard path 'data/x.arrow' is outside mmap/data/"),
    (lambda m: m["steps"][0]["shards"][0].update(rows=-1), "manifest_structure", r"shard 0\.rows: expected an integer >= 0"),
    (lambda m: m["steps"][2].update(step=1), "duplicate_step", "train step 1 is listed twice"),
    (lambda m: m["steps"][2]["shards"].pop(), "shard_layout", r"train steps have different shard counts \[1, 2\]"),
    (lambda m: m.update(pending=[{"path": "x"}]), "manifest_structure", r"pending\[0\]"),
    (lambda m: m.update(generation="../x"), "manifest_structure", "generation"),
])
def test_a_broken_manifest_names_its_invariant(sample_out, tmp_path, change, invariant, match):
    out = _copy(sample_out, tmp_path / "out")
    _rewrite_manifest(out, change)
    with pytest.raises(ManifestError, match=match) as e:
        open_output(out)
    assert e.value.invariant == invariant and e.value.exit_code == 4
    assert str(e.value).startswith(os.path.join(out, "manifest.json"))


def test_a_torn_or_missing_manifest(sample_out, tmp_path):
    out = _copy(sample_out, tmp_path / "out")
    path = os.path.join(out, "manifest.json")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(ManifestError, match="manifest.json: unreadable") as e:
        open_output(out)
    assert e.value.invariant == "manifest" and not e.value.parsed
    os.remove(path)
    with pytest.raises(ManifestError, match="missing: not a complete rollout-cli output") as e:
        open_output(out)
    assert e.value.invariant == "manifest"


def test_pending_steps_are_listed(sample_out, tmp_path):
    out = _copy(sample_out, tmp_path / "out")
    pending = [{"path": "dumps/4.jsonl", "format": "jsonl", "split": "train", "step": 4, "reason": "still being written"},
               {"path": "dumps/eval.pt", "format": "pt", "split": "eval", "step": None, "reason": "size changed"}]
    _rewrite_manifest(out, lambda m: m.update(pending=pending))
    o = open_output(out)
    assert [p.as_dict() for p in o.pending] == pending
    assert [p.path for p in o.pending_of("train")] == ["dumps/4.jsonl"]
    assert [p.path for p in o.pending_of("eval")] == ["dumps/eval.pt"]
    assert o.pending[0].message.startswith("dumps/4.jsonl: train step 4 is pending, not in this output: still being written")
    assert o.step_numbers() == [1, 2, 3]  # the converted steps are all there


def test_an_output_of_schema_version_2_reads(sample_out, tmp_path):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from old_outputs import as_older_schema, as_schema_version_2

    out = _copy(sample_out, tmp_path / "old")
    as_schema_version_2(out)
    o, new = open_output(out), open_output(sample_out)
    assert o.schema_version == 2
    for s in o.steps:
        for r in range(len(s.shards)):
            t = o.table(s.step, r, s.split, verify=True)
            assert "remove_sample" not in t.schema.names
            assert t.equals(o.table(s.step, r, s.split, source="parquet", verify=True))
            want = new.table(s.step, r, s.split)
            assert t.equals(as_older_schema(want, t.schema))


def test_an_object_store_output_is_the_local_one(s3, sample_out):
    """open_output("s3://...") follows the manifest's generation paths; its tables equal the
    local output's, from the IPC copy and from Parquet."""
    from rollout_cli.core import storage

    _convert("s3://bkt/model-out", shards=2)
    remote, local = open_output("s3://bkt/model-out"), open_output(sample_out)
    assert remote.generation is not None and remote.root == "s3://bkt/model-out"
    assert [(s.split, s.step, len(s.shards)) for s in remote.steps] == [(s.split, s.step, len(s.shards)) for s in local.steps]
    sh = remote.shard(1, 0)
    assert sh.path.startswith(f"gen/{remote.generation}/data/") and sh.mmap.path.startswith(f"gen/{remote.generation}/mmap/")
    for s in local.steps:
        for r in range(len(s.shards)):
            want = local.table(s.step, r, s.split)
            for source in ("arrow", "parquet"):
                got = remote.table(s.step, r, s.split, source=source, verify=True)
                assert got.equals(want), (s.split, s.step, r, source)
    _, ipc = remote.paths(1, 1)
    data = bytearray(storage.read_bytes(ipc))
    data[-100] ^= 0xFF
    storage.write_bytes(ipc, bytes(data))
    with pytest.raises(IntegrityError, match="blake3 mismatch"):
        remote.table(1, 1, verify=True)


def test_works_without_torch(sample_out):
    """open_output and table() with torch unimportable; importing rollout_cli.output.model does
    not import torch, nor does `rollout_cli.open_output`."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import rollout_cli\n"
            f"o = rollout_cli.open_output({sample_out!r})\n"
            "t = o.table(o.steps[0].step, 0, verify=True)\n"
            "assert t.num_rows == o.steps[0].shards[0].rows > 0\n"
            "import rollout_cli.output.views\n"
            "assert sys.modules['torch'] is None\n"
            "print(t.num_rows)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == open_output(sample_out).steps[0].shards[0].rows


def test_a_reader_never_mixes_an_output_with_the_one_that_replaced_it(sample_out, tmp_path):
    """A table read before another conversion replaced OUT keeps the old bytes (its mapped file
    is the old one); a shard opened after it is refused: the manifest it read is gone."""
    from conftest import SAMPLE_JSONL, copts

    sample_out = _copy(sample_out, tmp_path / "out")
    o = open_output(sample_out)
    step = o.step_numbers()[0]
    before = o.table(step, 0, source="arrow")
    expected = before.to_pylist()
    convert([str(SAMPLE_JSONL / "2.jsonl")], str(sample_out), copts(overwrite=True, mmap=True, shards=2,
                                                                     reward_baseline="rollout"))
    assert before.to_pylist() == expected  # the mapped file is the old one, whatever OUT now holds
    for step, source in ((o.step_numbers()[-1], "arrow"), (step, "parquet"), (step, "arrow")):
        with pytest.raises(IntegrityError, match="replaced by another conversion"):
            o.table(step, 1, source=source)
    assert open_output(sample_out).table(2, 0).num_rows > 0  # opened again: the new output


def test_the_loader_refuses_a_shard_of_a_replaced_output(sample_out, tmp_path):
    from conftest import SAMPLE_JSONL, copts

    from rollout_cli import open_dataset

    sample_out = _copy(sample_out, tmp_path / "out")
    ds = open_dataset(sample_out)
    ds.load(ds.steps[0], 0)
    convert([str(SAMPLE_JSONL)], str(sample_out), copts(overwrite=True, mmap=True, shards=2))
    for source in ("arrow", "parquet"):
        with pytest.raises(IntegrityError, match="replaced by another conversion"):
            ds.load(ds.steps[0], 1, source=source)


def test_an_output_of_schema_version_4_written_by_that_version_reads(tmp_path):
    """The committed output of schema version 4 (written before token_exact) opens with that
    version's schema."""
    from old_outputs import schema_4_output
    from rollout_cli.core.schema import train_schema

    o = open_output(schema_4_output(tmp_path / "v4"))
    assert o.schema_version == 4 and [s.step for s in o.steps] == [3]
    t = o.table(3, 0, "train", verify=True)
    assert t.schema.equals(train_schema(False, 4)) and "token_exact" not in t.schema.names
    assert t.column("weight_versions").to_pylist() == [["3"]] * 6
    assert t.equals(o.table(3, 0, "train", source="parquet", verify=True))


def test_an_output_of_schema_version_3_written_by_that_version_reads(tmp_path):
    """The committed output of schema version 3 (written before weight_versions and nullable
    rewards) opens with that version's schema: no weight_versions, rewards not null."""
    from old_outputs import schema_3_output
    from rollout_cli.core.schema import train_schema

    o = open_output(schema_3_output(tmp_path / "v3"))
    assert o.schema_version == 3 and [s.step for s in o.steps] == [3]
    t = o.table(3, 0, "train", verify=True)
    assert t.schema.equals(train_schema(False, 3)) and "weight_versions" not in t.schema.names
    assert not t.schema.field("reward").nullable and t.column("remove_sample").to_pylist()[-1] is True
    assert t.equals(o.table(3, 0, "train", source="parquet", verify=True))
