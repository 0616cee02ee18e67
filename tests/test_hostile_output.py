"""Hostile outputs, folders and lock files: every reader of an output takes it as data (a shard
whose Arrow copy lies about its offsets, a shard that is a FIFO or a link out of OUT: exit 4
naming the file, never a signal or a hang); `--overwrite` replaces only what the tool wrote
(exit 5 otherwise); the writer lock cannot be spoofed or steered (exit 8). Each test also checks
that nothing outside OUT (or DEST) was touched."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from conftest import ROOT, SAMPLE_JSONL, make_sample, tree_state, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.core import hashing
from rollout_cli.core.errors import IntegrityError
from rollout_cli.output.model import open_output

ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
SHARD = "data/step-000001/shard-00000-of-00002.parquet"
IPC = "mmap/data/step-000001/shard-00000-of-00002.arrow"


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def run(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """The executable in a process of its own: a hang is a timeout, a signal a negative code."""
    return subprocess.run([sys.executable, "-m", "rollout_cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def _entry(m: dict, rel: str) -> dict:
    for s in m["steps"]:
        for sh in s["shards"]:
            if sh["path"] == rel:
                return sh
            if (sh.get("mmap") or {}).get("path") == rel:
                return sh["mmap"]
    raise KeyError(rel)


def _relist(out: Path, rel: str) -> None:
    """The manifest's size and digest of `rel` made those of its bytes now (a forger's edit)."""
    m = json.loads((out / "manifest.json").read_bytes())
    e = _entry(m, rel)
    data = (out / rel).read_bytes()
    alg, _ = hashing.digest_of(e)
    h = hashing.new(alg)
    h.update(data)
    e["bytes"], e[alg] = len(data), h.hexdigest()
    (out / "manifest.json").write_text(json.dumps(m, indent=1))


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside OUT that nothing may touch."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("mine")
    return d


# --- #5: an Arrow copy whose list offsets point past its buffers ----------------------------

def _offsets_past_the_end(out: Path) -> None:
    """The IPC copy of step 1 shard 0 rewritten with tokens' second offset far past the values,
    its size and digest updated in the manifest: well-formed to every check but Arrow's own."""
    path = out / IPC
    t = pa.ipc.open_file(str(path)).read_all().combine_chunks()
    col = t.column("tokens").chunk(0)
    offsets = np.frombuffer(col.buffers()[1], np.int32).copy()
    offsets[1] = 2**30
    bad = pa.Array.from_buffers(col.type, len(col), [col.buffers()[0], pa.py_buffer(offsets.tobytes())],
                                children=[col.values])
    i = t.schema.get_field_index("tokens")
    t = t.set_column(i, t.schema.field(i), pa.chunked_array([bad])).replace_schema_metadata(t.schema.metadata)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
        w.write_table(t)
    _relist(out, IPC)


def test_list_offsets_past_the_end_are_refused_by_every_reader(sample_out):
    _offsets_past_the_end(sample_out)
    o = open_output(sample_out)
    for read in (lambda: o.table(1, 0), lambda: o.table(1, 0, verify=True), lambda: o.table(1, 0, columns=["tokens"]),
                 lambda: next(iter(o.iter_batches(0)))):
        with pytest.raises(IntegrityError, match=r"shard-00000-of-00002\.arrow: column tokens: malformed Arrow data: .*offset") as ei:
            read()
        assert ei.value.exit_code == 4
    from rollout_cli import open_dataset

    with pytest.raises(IntegrityError, match=r"shard-00000-of-00002\.arrow: column tokens: malformed Arrow data"):
        open_dataset(str(sample_out)).load(1, 0)
    res = cli("verify", sample_out, "--quick")  # no data pages read in quick mode: the Arrow copy's still are
    assert res.exit_code == 4 and f"{IPC}: structure: column tokens: malformed Arrow data" in res.output, res.output


def test_a_process_reading_a_forged_arrow_copy_exits_cleanly(sample_out):
    """No signal: in a process of its own, the read is an IntegrityError, exit 4 from the CLI."""
    _offsets_past_the_end(sample_out)
    code = ("import sys\nfrom rollout_cli.output.model import open_output\nfrom rollout_cli.core.errors import IntegrityError\n"
            f"o = open_output({str(sample_out)!r})\n"
            "try:\n    t = o.table(1, 0)\n    print(sum(len(x) for x in t.column('tokens').to_pylist()))\n"
            "except IntegrityError as e:\n    print('refused', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("refused"), (p.returncode, p.stdout, p.stderr)
    p = run("verify", sample_out)
    assert p.returncode == 4 and IPC in p.stderr + p.stdout, (p.returncode, p.stderr)


def test_a_garbled_arrow_schema_is_exit_4_in_quick_verify_and_for_readers(sample_out):
    """A byte of a column name in the IPC copy's footer no longer UTF-8 (digest forged)."""
    data = bytearray((sample_out / IPC).read_bytes())
    name = data.rfind(b"rollout_mask_sum")
    data[name + 2] = 0x8B
    (sample_out / IPC).write_bytes(bytes(data))
    _relist(sample_out, IPC)
    res = cli("verify", sample_out, "--quick")
    assert res.exit_code == 4 and f"{IPC}: readable: malformed Arrow schema" in res.output, res.output
    with pytest.raises(IntegrityError, match="malformed Arrow schema"):
        open_output(sample_out).table(1, 0)


# --- #6: a shard that is a FIFO -------------------------------------------------------------

@pytest.mark.parametrize("rel", [SHARD, IPC])
def test_a_shard_that_is_a_fifo_is_exit_4_and_nothing_blocks(sample_out, rel):
    os.remove(sample_out / rel)
    os.mkfifo(sample_out / rel)
    commands = [("verify", sample_out), ("inspect", sample_out, "-q"), ("report", sample_out, "-o", sample_out.parent / "r.html", "-q"),
                ("export", sample_out, sample_out.parent / "dumps", "--format", "slime-pt", "-q")]
    for args in commands:
        if rel == IPC and args[0] in ("inspect", "report", "export"):
            continue  # these read the Parquet shards only
        p = run(*args, timeout=120)
        assert p.returncode == 4, (args[0], p.returncode, p.stderr)
        assert rel.split("/")[-1] in p.stderr + p.stdout and ("FIFO" in p.stderr + p.stdout), (args[0], p.stderr)
    o = open_output(sample_out)
    with pytest.raises(IntegrityError, match=r"a FIFO, not a regular file"):
        o.table(1, 0, source="arrow" if rel == IPC else "parquet")
    assert not (sample_out.parent / "r.html").exists() and not (sample_out.parent / "dumps").exists()


def test_a_manifest_that_is_a_fifo_blocks_nothing(sample_out):
    os.remove(sample_out / "manifest.json")
    os.mkfifo(sample_out / "manifest.json")
    p = run("verify", sample_out, timeout=120)
    assert p.returncode == 4 and "manifest.json: manifest: not a regular file" in p.stderr + p.stdout, p.stderr
    p = run("inspect", sample_out, "-q", timeout=120)  # no output's manifest: its files read as dumps
    assert p.returncode == 3, p.stderr


# --- #7: a shard that is a link to a file outside OUT ---------------------------------------

@pytest.mark.parametrize("rel", [SHARD, IPC])
def test_a_shard_linked_outside_out_is_refused(sample_out, outside, rel):
    target = outside / Path(rel).name
    shutil.move(sample_out / rel, target)  # the very bytes the manifest records
    os.symlink(target, sample_out / rel)
    before = tree_state(outside)
    res = cli("verify", sample_out)
    assert res.exit_code == 4 and f"{rel}: file_present: listed in the manifest but a symbolic link to {target}" in res.output, res.output
    o = open_output(sample_out)
    with pytest.raises(IntegrityError, match="outside the output"):
        o.table(1, 0, source="arrow" if rel == IPC else "parquet")
    if rel == SHARD:
        res = cli("inspect", sample_out, "-q")
        assert res.exit_code == 4 and "outside the output" in res.output, res.output
    assert tree_state(outside) == before


def test_a_data_folder_linked_outside_out_is_refused(sample_out, outside):
    shutil.move(sample_out / "data" / "step-000001", outside / "step-000001")
    os.symlink(outside / "step-000001", sample_out / "data" / "step-000001")
    with pytest.raises(IntegrityError, match="outside the output"):
        open_output(sample_out).table(1, 0, source="parquet")
    assert cli("verify", sample_out).exit_code == 4


def test_a_link_inside_out_is_read(sample_out):
    """A link that stays inside OUT (a hard-linked or copied-in tree may use one) is followed."""
    real = sample_out / "data" / "step-000001" / "real.parquet"
    os.replace(sample_out / SHARD, real)
    os.symlink("real.parquet", sample_out / SHARD)
    assert open_output(sample_out).table(1, 0, source="parquet").num_rows > 0


# --- #8: --overwrite on a folder that is no output ------------------------------------------

@pytest.mark.parametrize("what", ["data", "manifest", "both"])
def test_overwrite_never_replaces_a_folder_that_is_no_output(tmp_path, outside, what):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    if what in ("data", "both"):
        (project / "data" / "weights.bin").write_bytes(b"\x00" * 100)
    if what in ("manifest", "both"):
        (project / "manifest.json").write_text(json.dumps({"name": "my-project", "version": 3}))
    if what == "manifest":
        shutil.rmtree(project / "data")
    before = tree_state(project)
    for flags in ([], ["--overwrite"], ["--resume"]):
        res = cli("convert", SAMPLE_JSONL, project, "--workers", "1", "-q", *flags)
        assert res.exit_code == 5, (flags, res.output)
        assert "not a rollout-cli output" in res.output and "--overwrite" not in res.output, res.output
        assert str(project) in res.output
    assert tree_state(project) == before


def test_overwrite_keeps_other_files_of_an_output(tmp_path):
    """In an output, --overwrite replaces the manifest and layout.ENTRIES, and nothing else."""
    out = tmp_path / "out"
    assert cli("convert", SAMPLE_JSONL, out, "--workers", "1", "-q").exit_code == 0
    (out / "NOTES.md").write_text("kept")
    (out / "extra").mkdir()
    (out / "extra" / "x.bin").write_bytes(b"1")
    assert cli("convert", SAMPLE_JSONL, out, "--workers", "1", "-q", "--overwrite", "--shards", "3").exit_code == 0
    assert (out / "NOTES.md").read_text() == "kept" and (out / "extra" / "x.bin").read_bytes() == b"1"
    assert open_output(out).num_shards() == 3


# --- #9: export --overwrite into a folder export did not write ------------------------------

def test_export_overwrite_never_replaces_a_foreign_folder(sample_out, tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "thesis.tex").write_text("precious")
    (dest / "1.pt").write_bytes(b"not an export")
    before = tree_state(tmp_path)
    for flags in ([], ["--overwrite"]):
        res = cli("export", sample_out, dest, "--format", "slime-pt", "-q", *flags)
        assert res.exit_code == 5 and f"{dest}: not a folder export wrote" in res.output, res.output
        assert "--overwrite" not in res.output
    state = tree_state(tmp_path)
    assert {k: v for k, v in state.items() if not k.startswith("out")} == {k: v for k, v in before.items() if not k.startswith("out")}


# --- #10: a lock file that is a link --------------------------------------------------------

def test_a_lock_file_linked_outside_is_refused_and_nothing_written_through_it(tmp_path, outside):
    out = tmp_path / "out"
    assert cli("convert", SAMPLE_JSONL, out, "--workers", "1", "-q").exit_code == 0
    os.symlink(outside / "precious.txt", out / ".lock")
    before, out_before = tree_state(outside), tree_state(out)
    res = cli("convert", SAMPLE_JSONL, out, "--workers", "1", "-q", "--overwrite")
    assert res.exit_code == 8 and f"{out / '.lock'}: a symbolic link" in res.output, res.output
    assert tree_state(outside) == before and (outside / "precious.txt").read_text() == "mine"
    assert tree_state(out) == out_before and os.path.islink(out / ".lock")


def test_an_export_lock_linked_outside_is_refused(sample_out, tmp_path, outside):
    os.symlink(outside / "precious.txt", tmp_path / ".dumps.lock")
    before = tree_state(outside)
    res = cli("export", sample_out, tmp_path / "dumps", "--format", "slime-pt", "-q")
    assert res.exit_code == 8 and ".dumps.lock: a symbolic link" in res.output, res.output
    assert tree_state(outside) == before and not (tmp_path / "dumps").exists()


# --- #11: the lock file deleted under a running convert -------------------------------------

def _holder(out: Path) -> subprocess.Popen:
    """A converter of JSONL on its stdin into OUT, holding OUT's lock until its stdin closes."""
    p = subprocess.Popen([sys.executable, "-m", "rollout_cli", "convert", "-", str(out), "--step", "1", "--workers", "1",
                          "--no-mmap", "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if json.loads((out / ".lock").read_bytes()).get("pid") == p.pid and (out / ".staging" / "run" / "options.json").is_file():
                time.sleep(0.5)  # its staging opened: it now waits for its stdin
                return p
        except (OSError, ValueError):
            pass
        assert p.poll() is None, p.stderr.read().decode()
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    raise AssertionError("the converter never took the lock")


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_lock_file_deleted_under_a_running_convert_lets_no_second_writer_in(tmp_path, how):
    out = tmp_path / "out"
    first = _holder(out)
    try:
        os.remove(out / ".lock")
        if how == "replaced":
            (out / ".lock").write_text("{}")
        staged = tree_state(out / ".staging")
        write_jsonl(tmp_path / "other" / "5.jsonl", [make_sample(index=i, group_index=i // 2) for i in range(6)])
        for flags in ([], ["--overwrite"], ["--resume"]):
            res = cli("convert", tmp_path / "other", out, "--workers", "1", "-q", *flags)
            assert res.exit_code == 8 and "being written by another process" in res.output, (flags, res.output)
        kept = {k for k in staged if not k.endswith(".tmp")}  # a file being renamed into place may be caught
        assert kept <= set(tree_state(out / ".staging"))  # the first's staging area: nothing of it removed
        data = b"".join(orjson.dumps(make_sample(index=i, group_index=i // 2)) + b"\n" for i in range(4))
        _, err = first.communicate(data, timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 8, err.decode()
    assert f"{out / '.lock'}: the lock file was {how}" in err.decode() and "nothing committed" in err.decode()
    assert not (out / "manifest.json").exists()
    res = cli("convert", tmp_path / "other", out, "--workers", "1", "-q", "--overwrite")
    assert res.exit_code == 0, res.output


# --- held before: a Parquet footer claiming 3 billion rows ----------------------------------

def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def _claim_rows(path: Path, claim: int) -> None:
    """The file's footer made to claim `claim` rows: FileMetaData.num_rows (Thrift compact: field
    3, i64, right before the row_groups list) rewritten, the footer's length fixed."""
    import pyarrow.parquet as pq

    data = path.read_bytes()
    n = pq.ParquetFile(path).metadata.num_rows
    flen = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - flen:-8]
    zigzag = lambda v: (v << 1) ^ (v >> 63)  # noqa: E731
    old, new = b"\x16" + _varint(zigzag(n)) + b"\x19", b"\x16" + _varint(zigzag(claim)) + b"\x19"
    assert old in footer
    footer = footer.replace(old, new, 1)
    path.write_bytes(data[:-8 - flen] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    assert pq.ParquetFile(path).metadata.num_rows == claim


def test_a_shard_footer_claiming_3_billion_rows_is_refused(sample_out):
    _claim_rows(sample_out / SHARD, 3_000_000_000)
    _relist(sample_out, SHARD)
    for flags in ([], ["--quick"]):
        res = cli("verify", sample_out, *flags)
        assert res.exit_code == 4 and f"{SHARD}: rows: 3000000000 rows in the footer" in res.output, res.output
    t = open_output(sample_out).table(1, 0, source="parquet")  # the rows there are, never 3e9 allocated
    assert t.num_rows == open_output(sample_out).shard(1, 0).rows


# --- any damage to a shard whose digest was forged: a table or exit 4, nothing else ---------

@pytest.fixture(scope="module")
def clean_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz") / "out"
    assert cli("convert", SAMPLE_JSONL, out, "--shards", "2", "--workers", "1", "-q").exit_code == 0
    return out


@settings(max_examples=25, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(rel=st.sampled_from([SHARD, IPC]), tail=st.booleans(),
       flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 7)), min_size=1, max_size=4))
def test_bit_flips_of_a_shard_with_its_digest_forged_give_a_table_or_exit_4(clean_out, tmp_path_factory, rel, tail, flips):
    """Every reader of the output either reads it or raises one of the tool's own errors (the
    CLI's exit codes): never another exception, never a signal (which would end this process)."""
    from rollout_cli.core.errors import RolloutCliError
    from rollout_cli.inspection.api import inspect_paths
    from rollout_cli.verification.check import verify_output

    out = tmp_path_factory.mktemp("flip") / "out"
    shutil.copytree(clean_out, out)
    data = bytearray((out / rel).read_bytes())
    for at, bit in flips:  # the footer (schema, offsets of the batches) when tail, else anywhere
        i = len(data) - 1 - at % min(2000, len(data)) if tail else at % len(data)
        data[i] ^= 1 << bit
    (out / rel).write_bytes(bytes(data))
    _relist(out, rel)
    for read in (lambda: open_output(out).table(1, 0), lambda: open_output(out).table(1, 0, source="parquet"),
                 lambda: list(open_output(out).iter_batches(0)), lambda: verify_output(str(out)),
                 lambda: verify_output(str(out), quick=True), lambda: inspect_paths([str(out)])):
        try:
            read()
        except RolloutCliError:
            pass


def test_overwrite_never_replaces_an_object_store_prefix_that_is_no_output(s3):
    """The same rule on an object store: a prefix holding data/ and a foreign manifest.json."""
    with s3.open_output_stream("bkt/project/data/weights.bin") as f:
        f.write(b"\x00" * 100)
    with s3.open_output_stream("bkt/project/manifest.json") as f:
        f.write(b'{"name": "my-project"}')
    for flags in ([], ["--overwrite"]):
        res = cli("convert", SAMPLE_JSONL, "s3://bkt/project", "--workers", "1", "-q", *flags)
        assert res.exit_code == 5 and "not a rollout-cli output" in res.output and "--overwrite" not in res.output, res.output
    with s3.open_input_stream("bkt/project/data/weights.bin") as f:
        assert f.read() == b"\x00" * 100
    with s3.open_input_stream("bkt/project/manifest.json") as f:
        assert f.read() == b'{"name": "my-project"}'
    from pyarrow import fs as pafs

    listed = sorted(i.path for i in s3.get_file_info(pafs.FileSelector("bkt/project", recursive=True)))
    assert listed == ["bkt/project/data", "bkt/project/data/weights.bin", "bkt/project/manifest.json"]  # no lease written
