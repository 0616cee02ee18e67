"""Crash safety and determinism of `convert`, with real processes and real SIGKILLs.

* A converter killed at any moment leaves OUT absent, or without manifest.json (never looking
  complete), or complete and verifying. During `--overwrite` of a complete output, the old
  manifest and data stay whole until the new ones are in place, and an interrupted commit is
  finished by `--resume`.
* `convert --resume` after a kill gives shards byte-identical to an uninterrupted run.
* Same inputs and options give byte-identical shards (no timestamps, no absolute paths), from
  other directories, at other times, with any number of workers.
* A killed converter leaves no worker processes behind.

Kills come two ways: at random moments of a ~1-2 s conversion (SIGKILL from outside), and at
every file-system commit point of a conversion (the child SIGKILLs itself just before its k-th
os.replace / shutil.rmtree), which reaches the short windows a timer rarely hits.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.verification.check import verify_output
from conftest import ROOT, SAMPLE_JSONL, card_without_generations

ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
ENV.pop("ROLLOUT_TEST_INTERRUPT", None)

# Runs the CLI, SIGKILLing itself just before the k-th os.replace or shutil.rmtree (k = argv[1];
# 0: never). At exit it prints how many such events the run had.
KILL_AT_EVENT = r"""
import os, shutil, signal, sys
k = int(sys.argv[1]); n = [0]
def hook(real):
    def wrapped(*a, **kw):
        n[0] += 1
        if n[0] == k:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **kw)
    return wrapped
if os.environ.get("ROLLOUT_TEST_INTERRUPT"):  # Ctrl-C at that point instead: KeyboardInterrupt
    def hook(real):
        def wrapped(*a, **kw):
            n[0] += 1
            if n[0] == k:
                raise KeyboardInterrupt
            return real(*a, **kw)
        return wrapped
os.replace = hook(os.replace)
shutil.rmtree = hook(shutil.rmtree)
import atexit
atexit.register(lambda: print(f"EVENTS={n[0]}", file=sys.stderr))
from rollout_cli.cli.app import main
sys.argv = ["rollout-cli"] + sys.argv[2:]
main()
"""


def make_input(root: Path, steps: int = 4, groups: int = 24, n: int = 8, seed: int = 0) -> Path:
    """A few MB of JSONL over several steps: a conversion of about 1-2 s."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for s in range(1, steps + 1):
        lines = []
        for g in range(groups):
            prompt = rng.integers(0, 50000, int(rng.integers(50, 200))).tolist()
            for k in range(n):
                rl = int(rng.integers(200, 800))
                lines.append(orjson.dumps({
                    "group_index": g, "index": g * n + k, "rollout_id": None,
                    "tokens": prompt + rng.integers(0, 50000, rl).tolist(), "response_length": rl,
                    "reward": float(rng.integers(0, 2)), "loss_mask": [1] * rl,
                    "rollout_log_probs": (-rng.random(rl)).round(4).tolist(),
                    "status": "completed" if k % 5 else "truncated", "metadata": {"round_number": k},
                }))
        (root / f"{s}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return root


def cli_args(src: Path, out: Path, *extra: str) -> list[str]:
    return ["convert", str(src), str(out), "--shards", "3", "-q", *extra]


def run_cli(*args: str):
    res = CliRunner().invoke(app, list(args))
    return res


def snapshot(out: Path) -> dict[str, bytes]:
    """Every file an output consists of (not the staging area, nor the lock file a killed run
    leaves), with its bytes; the manifest without its volatile part."""
    res = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if p.is_file() and rel.parts[0] not in (".staging", ".lock"):
            data = p.read_bytes()
            if str(rel) == "manifest.json":
                m = json.loads(data)
                m.pop("volatile", None)
                data = json.dumps(m, sort_keys=True).encode()
            res[str(rel)] = data
    return res


def same_output(a: dict[str, bytes], b: dict[str, bytes]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] for k in a)


def assert_never_looks_complete_unless_it_is(out: Path) -> bool:
    """After a kill: absent, or no manifest, or a manifest that verifies. True when complete."""
    if not out.exists() or not (out / "manifest.json").exists():
        return False
    res = verify_output(str(out))
    f = res["failures"]
    assert f == [], f"a manifest exists but the output does not verify: {len(f)} failures, e.g. {f[:3]}"
    return True


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return make_input(tmp_path_factory.mktemp("crash") / "in")


@pytest.fixture(scope="module")
def reference(big, tmp_path_factory) -> tuple[dict[str, bytes], float]:
    """An uninterrupted run (a real process): its files, and how long it took."""
    out = tmp_path_factory.mktemp("ref") / "out"
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "rollout_cli", *cli_args(big, out, "--workers", "1")], env=ENV,
                       capture_output=True, text=True)
    took = time.monotonic() - t
    assert p.returncode == 0, p.stderr
    assert verify_output(str(out))["failures"] == []
    return snapshot(out), took


@pytest.fixture(scope="module")
def old_output(big, tmp_path_factory) -> Path:
    """A complete output of the same input with other options (2 shards, no mmap copies)."""
    out = tmp_path_factory.mktemp("old") / "out"
    res = run_cli("convert", str(big), str(out), "--shards", "2", "--no-mmap", "-q", "--workers", "1")
    assert res.exit_code == 0, res.output
    return out


def _spawn(args: list[str], *, code: str | None = None, extra_argv: list[str] = ()) -> subprocess.Popen:
    cmd = [sys.executable, "-c", code, *extra_argv, *args] if code else [sys.executable, "-m", "rollout_cli", *args]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_killed_at(moments: list[float], args_for, tmp_path: Path) -> list[tuple[Path, float]]:
    """Start one converter per moment (two at a time), SIGKILL each at its moment.
    `args_for(dir)` prepares a case and returns (input, out, *extra options)."""
    outs = []
    for batch in range(0, len(moments), 2):
        procs = []
        for k, at in enumerate(moments[batch: batch + 2]):
            case = args_for(tmp_path / f"kill{batch + k}")
            procs.append((_spawn(cli_args(*case, "--workers", "1")), at, case[1]))
        t0 = time.monotonic()
        for p, at, out in sorted(procs, key=lambda x: x[1]):
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            p.send_signal(signal.SIGKILL)
        for p, at, out in procs:
            p.wait()
            _kill_group(p)
            p.stdout.close()
            p.stderr.close()
            outs.append((out, at))
    return outs


def _resume(src: Path, out: Path) -> None:
    res = run_cli(*cli_args(src, out, "--resume", "--workers", "1"))
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------------------- random kills


def test_kill_at_random_moments_into_a_fresh_out(big, reference, tmp_path):
    ref, took = reference
    rng = random.Random(20260821)
    moments = [took * (k + rng.random()) / 3 for k in range(3)]  # spread over the whole run

    def args_for(d: Path):
        d.mkdir()
        return big, d / "out"

    for out, at in _run_killed_at(moments, args_for, tmp_path):
        complete = assert_never_looks_complete_unless_it_is(out)
        if complete:
            assert same_output(snapshot(out), ref)
        # --resume finishes the job, byte-identical to a run that was never interrupted
        _resume(big, out)
        assert same_output(snapshot(out), ref), f"resume after a kill at {at:.2f}s differs from an uninterrupted run"


def test_kill_at_random_moments_during_overwrite(big, reference, old_output, tmp_path):
    ref, took = reference
    old = snapshot(old_output)
    rng = random.Random(7)
    moments = [took * (k + rng.random()) / 3 for k in range(3)]

    def args_for(d: Path):
        shutil.copytree(old_output, d / "out")
        return big, d / "out", "--overwrite"

    outs = _run_killed_at(moments, args_for, tmp_path)
    for out, at in outs:
        if assert_never_looks_complete_unless_it_is(out):
            now = snapshot(out)
            assert same_output(now, old) or same_output(now, ref), f"kill at {at:.2f}s: a complete output that is neither old nor new"
        else:
            # the old manifest is gone only once the commit has begun: --resume finishes it
            _resume(big, out)
            assert same_output(snapshot(out), ref)


# ------------------------------------------------------------------------------- every commit point


def _events_of_a_full_run(args: list[str]) -> int:
    p = subprocess.run([sys.executable, "-c", KILL_AT_EVENT, "0", *args], env=ENV, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return int(p.stderr.rsplit("EVENTS=", 1)[1].split()[0])


def _input_reference_and_old_output(tmp_path: Path) -> tuple[Path, dict, Path, dict]:
    """The sample input copied to tmp_path/in; the snapshot of an uninterrupted run's output;
    and an older output (2 shards per step) with its snapshot, for --overwrite to replace."""
    src = tmp_path / "in"
    shutil.copytree(SAMPLE_JSONL, src)
    ref_out = tmp_path / "ref"
    assert run_cli(*cli_args(src, ref_out, "--workers", "1")).exit_code == 0
    old_out = tmp_path / "old"
    assert run_cli("convert", str(src), str(old_out), "--shards", "2", "-q", "--workers", "1").exit_code == 0
    return src, snapshot(ref_out), old_out, snapshot(old_out)


@pytest.mark.parametrize("scenario", ["fresh", "overwrite"])
def test_kill_at_every_commit_point(tmp_path, scenario):
    """Small input, so each kill point costs one process start. The child kills itself just
    before its k-th os.replace / shutil.rmtree: after each finished step's record, in the middle
    of the commit (old entries moved aside, new ones moved in), before the manifest, after it."""
    src, ref, old_out, old = _input_reference_and_old_output(tmp_path)

    def prepare(k: int) -> tuple[Path, list[str]]:
        out = tmp_path / f"k{k}" / "out"
        if scenario == "overwrite":
            shutil.copytree(old_out, out)
            return out, cli_args(src, out, "--workers", "1", "--overwrite")
        out.parent.mkdir()
        return out, cli_args(src, out, "--workers", "1")

    probe_out, probe_args = prepare(0)
    n_events = _events_of_a_full_run(probe_args)
    assert n_events >= 8  # options, one record per step, manifest, the moves, the cleanup
    # every point of the commit (the staged manifest, each move, the manifest, the cleanup: the
    # last 6 events, 3 more when old entries are moved aside), and two while steps finish
    points = sorted({1, 3} | set(range(n_events - (8 if scenario == "overwrite" else 5), n_events + 1)))
    trials = []
    for batch in range(0, len(points), 4):
        procs = []
        for k in points[batch: batch + 4]:
            out, args = prepare(k)
            procs.append((k, out, _spawn(args, code=KILL_AT_EVENT, extra_argv=[str(k)])))
        for k, out, p in procs:
            p.wait()
            _kill_group(p)
            p.stdout.close()
            p.stderr.close()
            assert p.returncode == -signal.SIGKILL, f"kill point {k} was not reached"
            trials.append((k, out))
    for k, out in trials:
        if assert_never_looks_complete_unless_it_is(out):
            now = snapshot(out)
            assert same_output(now, ref) or (scenario == "overwrite" and same_output(now, old)), f"kill point {k}"
            if scenario == "overwrite" and same_output(now, old):
                continue  # old output intact: the user reruns --overwrite
        _resume(src, out)
        assert same_output(snapshot(out), ref), f"kill point {k}: --resume differs from an uninterrupted run"


def test_a_kill_during_resume_never_leaves_a_manifest_without_its_data(tmp_path):
    """Kill a run just before its manifest moves into place (every new entry is already in OUT),
    then kill the `--resume` that finishes it at each of its own commit points."""
    src = tmp_path / "in"
    shutil.copytree(SAMPLE_JSONL, src)
    ref_out = tmp_path / "ref"
    assert run_cli(*cli_args(src, ref_out, "--workers", "1")).exit_code == 0
    ref = snapshot(ref_out)
    first = tmp_path / "first" / "out"
    first.parent.mkdir()
    args = cli_args(src, first, "--workers", "1")
    n_events = _events_of_a_full_run(cli_args(src, tmp_path / "probe", "--workers", "1"))
    p = subprocess.run([sys.executable, "-c", KILL_AT_EVENT, str(n_events - 1), *args], env=ENV, capture_output=True)
    assert p.returncode == -signal.SIGKILL
    assert not (first / "manifest.json").exists()
    procs = []
    for k in range(1, 9):
        out = tmp_path / f"r{k}" / "out"
        shutil.copytree(first, out)
        procs.append((k, out, _spawn(cli_args(src, out, "--workers", "1", "--resume"), code=KILL_AT_EVENT, extra_argv=[str(k)])))
    for k, out, p in procs:
        p.wait()
        _kill_group(p)
        p.stdout.close()
        p.stderr.close()
    for k, out, p in procs:
        if assert_never_looks_complete_unless_it_is(out):
            assert same_output(snapshot(out), ref), f"resume killed at its event {k}"


def test_ctrl_c_during_the_commit_never_throws_away_old_or_new_data(tmp_path):
    """Ctrl-C (KeyboardInterrupt) at each point of an --overwrite commit. Once the commit has
    begun, the old output is partly moved aside: the run must not then discard its staging area
    (the journal, the new entries, the old ones) the way it does for a failure before the commit.
    Afterwards: a complete output that verifies (old or new), or the commit's journal kept so that
    --resume finishes it; and --resume gives the uninterrupted run's bytes."""
    src, ref, old_out, old = _input_reference_and_old_output(tmp_path)
    probe = tmp_path / "probe" / "out"
    shutil.copytree(old_out, probe)
    n_events = _events_of_a_full_run(cli_args(src, probe, "--workers", "1", "--overwrite"))
    env = dict(ENV, ROLLOUT_TEST_INTERRUPT="1")
    procs = []
    for k in range(n_events - 8, n_events + 1):  # the staged manifest, the moves, the manifest, the cleanup
        out = tmp_path / f"i{k}" / "out"
        shutil.copytree(old_out, out)
        args = cli_args(src, out, "--workers", "1", "--overwrite")
        procs.append((k, out, subprocess.Popen([sys.executable, "-c", KILL_AT_EVENT, str(k), *args], env=env,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    for k, out, p in procs:
        _, err = p.communicate()
        assert p.returncode == 130, f"interrupt at {k}: exit {p.returncode}: {err[-500:]!r}"
        if assert_never_looks_complete_unless_it_is(out):
            now = snapshot(out)
            assert same_output(now, old) or same_output(now, ref), f"interrupt at {k}"
            continue
        assert (out / ".staging" / "run" / "COMMITTING").exists(), (
            f"interrupt at commit point {k}: no manifest, and the staging area with the commit journal "
            f"(and the old entries moved aside) was deleted; OUT holds {sorted(os.listdir(out))}")
        _resume(src, out)
        assert same_output(snapshot(out), ref), f"interrupt at {k}: --resume differs from an uninterrupted run"


# ------------------------------------------------------------------------------- no orphans


def _group_members(pgid: int) -> list[int]:
    """Pids of the live processes in a process group (Linux /proc)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(name))
    return pids


def test_a_killed_converter_leaves_no_worker_processes(big, reference, tmp_path):
    """With the process pool (--workers 2), SIGKILL of the converter (what the OOM killer or a
    job scheduler's timeout does) must not leave its workers running: orphaned workers keep
    writing into OUT/.staging while the user already runs --resume."""
    _, took = reference
    out = tmp_path / "out"
    p = _spawn(cli_args(big, out, "--workers", "2"))
    try:
        deadline = time.monotonic() + 4 * took + 10
        while len(_group_members(p.pid)) < 3:  # the converter, the fork server, a worker
            assert p.poll() is None and time.monotonic() < deadline, "the converter never started its worker pool"
            time.sleep(0.02)
        time.sleep(0.3)  # let the workers take tasks
        p.send_signal(signal.SIGKILL)
        p.wait()
        deadline = time.monotonic() + 5
        while _group_members(p.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _group_members(p.pid)
        assert not left, f"{len(left)} processes of the killed converter (its pool) are still running 5 s later"
    finally:
        _kill_group(p)
        p.stdout.close()
        p.stderr.close()


# ------------------------------------------------------------------------------- determinism


def test_same_inputs_and_options_give_byte_identical_shards(tmp_path, monkeypatch):
    """Other OUT, other input location, other working directory, time zone and moment, other
    worker count: the same shard bytes. Shards hold no timestamps and no paths."""
    src_a = tmp_path / "a" / "rollout_data"
    shutil.copytree(SAMPLE_JSONL, src_a)
    src_b = tmp_path / "elsewhere" / "deeper" / "rollout_data"
    shutil.copytree(SAMPLE_JSONL, src_b)
    out_a, out_b, out_c = tmp_path / "out_a", tmp_path / "x" / "out_b", tmp_path / "out_c"
    opts = ["--shards", "3", "--keep-text"]
    assert run_cli("convert", str(src_a), str(out_a), "-q", "--workers", "1", *opts).exit_code == 0
    time.sleep(1.1)
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert run_cli("convert", "deeper/rollout_data", str(out_b), "-q", "--workers", "1", *opts).exit_code == 0
    assert run_cli("convert", str(src_a), str(out_c), "-q", "--workers", "2", *opts).exit_code == 0

    def shards(out: Path) -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
                if p.is_file() and p.suffix in (".parquet", ".arrow") and ".staging" not in p.parts}

    a, b, c = shards(out_a), shards(out_b), shards(out_c)
    assert len(a) == 24 and a == b == c
    for rel, data in a.items():
        for needle in (str(tmp_path), "rollout_data", "/tmp", str(ROOT)):
            assert needle.encode() not in data, f"{rel} holds the path {needle}"
        if rel.endswith(".parquet"):
            kv = pq.ParquetFile(out_a / rel).metadata.metadata or {}
            assert set(kv) <= {b"ARROW:schema", b"rollout_cli.schema_version", b"huggingface"}, kv.keys()
    # the manifests differ only in "volatile" and in where the inputs were
    ma, mc = (json.loads((o / "manifest.json").read_text()) for o in (out_a, out_c))
    assert "created_unix" in ma["volatile"]
    for m in (ma, mc):
        m.pop("volatile")
    assert ma == mc


# ------------------------------------------------------------------------------- object stores


def _s3_snapshot(fs, prefix: str) -> dict[str, bytes]:
    """snapshot() of an output on the S3 test server, as its manifest lists it: the files by
    their layout paths (generation folders left out), the manifest without its volatile part,
    generation and generation paths; {} without a manifest. Files the manifest does not list
    (an interrupted run's, the old dataset's after a cut cleanup) are left out."""
    from rollout_cli.core import layout
    from rollout_cli.output.commit import listed_files

    def read(rel: str) -> bytes:
        with fs.open_input_stream(f"{prefix}/{rel}") as f:
            return f.read()

    if not fs.get_file_info(f"{prefix}/manifest.json").is_file:
        return {}
    m = json.loads(read("manifest.json"))
    res = {layout.split_generation(rel)[1]: card_without_generations(read(rel)) for rel in sorted(listed_files(m))}
    m.pop("volatile", None)
    m.pop("generation", None)
    m.pop("card", None)  # its digest covers the generation ids; its bytes are compared above
    res["manifest.json"] = json.dumps(_no_generation(m), sort_keys=True).encode()
    return res


def _s3_files(fs, prefix: str) -> set[str]:
    from pyarrow import fs as pafs

    return {i.path[len(prefix) + 1:] for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)) if i.is_file}


def _no_generation(obj):
    from rollout_cli.core import layout

    if isinstance(obj, dict):
        return {k: (layout.split_generation(v)[1] if k == "path" and isinstance(v, str) else _no_generation(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_no_generation(v) for v in obj]
    return obj


def test_sigkill_at_random_moments_on_an_object_store(big, s3, tmp_path):
    """A converter writing to s3:// SIGKILLed at random moments leaves no manifest or a complete
    output that verifies (into a fresh OUT), or the old dataset or the new one (--overwrite);
    --resume, or the same --overwrite again, gives the uninterrupted run's bytes."""
    from pyarrow import fs as pafs

    from rollout_cli.output.commit import listed_files

    pafs.copy_files(str(big), "bkt/sigkill-in", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    env = dict(os.environ, PYTHONPATH=ENV["PYTHONPATH"])

    def spawn(out: str, *extra: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "rollout_cli", "convert", "s3://bkt/sigkill-in", out, "--shards", "3",
                                 "-q", "--workers", "1", *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)

    t = time.monotonic()
    p = spawn("s3://bkt/sigkill-ref")
    assert p.wait() == 0, p.stderr.read()[-2000:]
    took = time.monotonic() - t
    p.stdout.close(), p.stderr.close()
    ref = _s3_snapshot(s3, "bkt/sigkill-ref")
    assert verify_output("s3://bkt/sigkill-ref")["ok"]
    assert run_cli("convert", "s3://bkt/sigkill-in", "s3://bkt/sigkill-old", "--shards", "2", "--no-mmap", "-q",
                   "--workers", "1").exit_code == 0
    old = _s3_snapshot(s3, "bkt/sigkill-old")
    rng = random.Random(20261203)
    for k in range(4):
        at = took * (k + rng.random()) / 4
        overwrite = k % 2 == 1
        out = f"bkt/sigkill-{k}"
        if overwrite:
            pafs.copy_files("bkt/sigkill-old", out, source_filesystem=s3, destination_filesystem=s3)
        p = spawn(f"s3://{out}", *(["--overwrite"] if overwrite else []))
        time.sleep(at)
        _kill_group(p)
        p.wait()
        p.stdout.close(), p.stderr.close()
        got = _s3_snapshot(s3, out)
        if "manifest.json" in got:
            checked = verify_output(f"s3://{out}")
            assert checked["ok"], f"killed at {at:.2f}s: {checked}"
            assert got == ref or (overwrite and got == old), f"killed at {at:.2f}s: neither the old nor the new dataset"
        else:
            assert not overwrite, f"killed at {at:.2f}s: the old dataset is gone"
        again = ("--resume",) if not overwrite or got == ref else ("--overwrite",)
        res = run_cli("convert", "s3://bkt/sigkill-in", f"s3://{out}", "--shards", "3", "-q", "--workers", "1", *again,
                      "--wait", "30")  # the killed run's writer lease is left to expire
        assert res.exit_code == 0, res.output
        assert _s3_snapshot(s3, out) == ref, f"killed at {at:.2f}s, then {again[0]}: not the uninterrupted run's bytes"
        m = json.loads(s3.open_input_stream(f"{out}/manifest.json").read())
        assert _s3_files(s3, out) == listed_files(m) | {"manifest.json"}  # the commit removed every leftover
