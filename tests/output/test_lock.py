"""The writer lock (output/lock.py): one writer per output, refused with exit 8 or waited for;
a killed holder leaves no stale lock; on object stores a lease, confirmed and renewed."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from conftest import ROOT, copts, make_sample, tree_state, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.core.errors import ExitCode, OutputBusyError
from rollout_cli.output import lock as writer_lock
from rollout_cli.run.convert import convert
from rollout_cli.verification.check import verify_output

ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
HOST = socket.gethostname()


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _samples(k: int, base: int = 0) -> bytes:
    return b"".join(orjson.dumps(make_sample(index=base + i, group_index=(base + i) // 2)) + b"\n" for i in range(k))


def _other(tmp_path) -> str:
    write_jsonl(tmp_path / "other" / "5.jsonl", [make_sample(index=i, group_index=i // 2) for i in range(6)])
    return str(tmp_path / "other")


def _holder(out: Path, *extra: str) -> subprocess.Popen:
    """A converter of JSONL on its stdin into OUT: it holds OUT's lock until its stdin is closed."""
    p = subprocess.Popen([sys.executable, "-m", "rollout_cli", "convert", "-", str(out), "--step", "1", "--workers", "1",
                          "--no-mmap", "-q", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if json.loads((out / ".lock").read_bytes()).get("pid") == p.pid:
                return p
        except (OSError, ValueError):
            pass
        assert p.poll() is None, p.stderr.read().decode()
        time.sleep(0.05)
    raise AssertionError("the converter never took the lock")


def _finish(p: subprocess.Popen, data: bytes) -> int:
    out, err = p.communicate(data, timeout=300)
    assert p.returncode == 0, err.decode()
    return p.returncode


def test_a_second_writer_is_refused_with_exit_8_naming_the_holder(tmp_path):
    """`convert RUN OUT &` then `convert OTHER OUT --overwrite`: the second exits 8 naming the
    first (pid, host, how long), with or without --overwrite or --resume, and changes nothing;
    the first completes and verifies."""
    out = tmp_path / "out"
    first = _holder(out)
    try:
        other = _other(tmp_path)
        for flags in (["--overwrite"], [], ["--resume"]):
            res = _cli("convert", other, str(out), "--workers", "1", "-q", *flags)
            assert res.exit_code == ExitCode.OUTPUT_BUSY == 8, (flags, res.output)
            assert f"pid {first.pid} on host {HOST}, for " in res.output
            assert "being written by another process" in res.output and "interrupted" not in res.output
    finally:
        _finish(first, _samples(4))
    assert verify_output(str(out))["ok"]
    m = json.loads((out / "manifest.json").read_bytes())
    assert [i["path"] for i in m["inputs"]] == ["<stdin>"] and m["counts"]["rows"] == 4
    assert not (out / ".lock").exists() and not (out / ".staging").exists()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    """SIGKILL the holder: the kernel drops its lock. OUT is then an interrupted run (exit 5,
    said so now that its writer is gone), and --overwrite converts at once."""
    out = tmp_path / "out"
    first = _holder(out)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    first.stdin.close(), first.stdout.close(), first.stderr.close()
    assert (out / ".lock").exists()  # the file stays; no lock is held on it
    other = _other(tmp_path)
    res = _cli("convert", other, str(out), "--workers", "1", "-q")
    assert res.exit_code == 5 and "holds an interrupted run" in res.output, res.output
    res = _cli("convert", other, str(out), "--workers", "1", "-q", "--overwrite")
    assert res.exit_code == 0, res.output
    assert verify_output(str(out))["ok"]
    assert not (out / ".lock").exists()


def test_wait_waits_for_the_holder(tmp_path):
    """--wait SECONDS: the second writer waits for the first to finish, then does its work; a
    wait that runs out is exit 8."""
    out = tmp_path / "out"
    first = _holder(out)
    try:
        t0 = time.monotonic()
        res = _cli("convert", _other(tmp_path), str(out), "--workers", "1", "-q", "--overwrite", "--wait", "0.5")
        assert res.exit_code == 8 and "still held after waiting" in res.output, res.output
        assert time.monotonic() - t0 >= 0.5
        second = subprocess.Popen([sys.executable, "-m", "rollout_cli", "convert", _other(tmp_path), str(out),
                                   "--workers", "1", "--no-mmap", "-q", "--overwrite", "--wait", "300"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        time.sleep(3)
        assert second.poll() is None, second.communicate()  # waiting, not refused
    finally:
        _finish(first, _samples(4))
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err.decode()
    m = json.loads((out / "manifest.json").read_bytes())
    assert [s["step"] for s in m["steps"]] == [5] and m["counts"]["rows"] == 6  # the second's, committed last
    assert verify_output(str(out))["ok"]


def test_the_lock_file_records_its_holder_and_goes_with_the_release(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock = writer_lock.acquire(str(out))
    rec = json.loads((out / ".lock").read_bytes())
    assert rec["pid"] == os.getpid() and rec["host"] == HOST and abs(rec["started_unix"] - time.time()) < 60
    with pytest.raises(OutputBusyError) as ei:  # another open file description: flock refuses it
        writer_lock.acquire(str(out))
    assert ei.value.exit_code == 8 and f"pid {os.getpid()} on host {HOST}" in str(ei.value)
    lock.release()
    assert not (out / ".lock").exists()
    writer_lock.acquire(str(out)).release()


def test_a_lock_on_a_file_deleted_meanwhile_is_not_held(tmp_path, monkeypatch):
    """A sibling lock (export's `.DEST.lock`): a waiter that locks the file its holder deleted on
    release (it opened it before) holds nothing: it sees the path no longer names that file and
    locks the one that does."""
    dest = str(tmp_path / "dest")
    path = writer_lock.sibling_lock_path(dest)
    first = writer_lock.acquire(dest, path=path)
    stale = os.open(path, os.O_RDWR)  # opened while the first held it
    first.release()
    third = writer_lock.acquire(dest, path=path)  # a new file at the path, locked
    real_open = os.open
    calls = []

    def open_stale_first(p, *a, **kw):
        calls.append(p)
        return stale if len(calls) == 1 else real_open(p, *a, **kw)

    monkeypatch.setattr(writer_lock.os, "open", open_stale_first)
    with pytest.raises(OutputBusyError):  # it locked the stale file, saw it was gone, and met the third
        writer_lock.acquire(dest, path=path)
    monkeypatch.undo()
    assert len(calls) == 2
    third.release()


def test_readers_never_take_the_lock(sample_out):
    """verify, inspect and the loader read an output whose lock another writer holds."""
    from rollout_cli import open_dataset

    held = writer_lock.acquire(str(sample_out))
    try:
        assert _cli("verify", str(sample_out)).exit_code == 0
        assert _cli("inspect", str(sample_out), "-q").exit_code == 0
        ds = open_dataset(str(sample_out))
        assert ds.load(ds.steps[0], 0, verify=True).num_samples > 0
        with pytest.raises(OutputBusyError):  # still held: nothing took it over
            writer_lock.acquire(str(sample_out))
    finally:
        held.release()


def test_a_file_system_without_locks_converts_with_a_note(tmp_path, monkeypatch):
    """Where flock is refused (ENOLCK: some FUSE and NFS mounts) the run goes on and says so."""
    import errno
    import fcntl

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    res = convert([_other(tmp_path)], str(tmp_path / "out"), copts())
    assert any("no file locks" in n and "without the writer lock" in n for n in res["notes"])
    assert verify_output(str(tmp_path / "out"))["ok"]


def test_export_takes_a_lock_beside_dest(sample_out, tmp_path):
    """export holds `.DEST.lock` next to DEST: a second export is refused with exit 8 and DEST's
    folder is left as it was; --wait waits for it."""
    dest = tmp_path / "dumps"
    held = writer_lock.acquire(str(dest), command="export", path=writer_lock.sibling_lock_path(str(dest)))
    assert (tmp_path / ".dumps.lock").exists()
    before = tree_state(tmp_path)
    res = _cli("export", str(sample_out), str(dest), "--format", "slime-pt", "-q")
    assert res.exit_code == 8 and f"pid {os.getpid()}" in res.output, res.output
    assert tree_state(tmp_path) == before
    timer = threading.Timer(1.0, held.release)
    timer.start()
    res = _cli("export", str(sample_out), str(dest), "--format", "slime-pt", "-q", "--wait", "60")
    timer.join()
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in dest.iterdir()) == [".rollout-cli-export.json", "1.pt", "2.pt", "3.pt", "eval_3.pt"]
    assert not (tmp_path / ".dumps.lock").exists()


# --- object stores: a lease ----------------------------------------------------------------

def _lease(uri: str) -> dict:
    from rollout_cli.core import storage

    return json.loads(storage.read_bytes(f"{uri}/.lock"))


def test_a_lease_refuses_a_second_writer_and_nothing_is_written(s3, tmp_path):
    from rollout_cli.core import storage

    uri = "s3://bkt/lease-busy"
    convert([_other(tmp_path)], uri, copts())
    assert not storage.exists(f"{uri}/.lock")  # released after the run
    before = storage.files_under(uri)
    held = writer_lock.acquire(uri)
    rec = _lease(uri)
    assert rec["pid"] == os.getpid() and rec["host"] == HOST and rec["expires_unix"] > time.time()
    with pytest.raises(OutputBusyError) as ei:
        convert([_other(tmp_path)], uri, copts(overwrite=True))
    assert ei.value.exit_code == 8 and f"pid {os.getpid()} on host {HOST}" in str(ei.value)
    assert storage.files_under(uri) == dict(before, **{".lock": storage.size(f"{uri}/.lock")})
    held.release()
    assert not storage.exists(f"{uri}/.lock")


def test_an_expired_lease_is_taken_over(s3):
    from rollout_cli.core import storage

    uri = "s3://bkt/lease-expired"
    dead = {"token": "0" * 32, "pid": 1, "host": "gone", "started_unix": time.time() - 100, "expires_unix": time.time() - 1}
    storage.write_bytes(f"{uri}/.lock", json.dumps(dead).encode())
    lock = writer_lock.acquire(uri)
    assert _lease(uri)["token"] == lock.token
    lock.release()


def test_of_two_writers_racing_for_a_lease_one_holds_it(s3, monkeypatch):
    """No conditional write: both may PUT; the read-back after the confirm delay leaves one."""
    monkeypatch.setenv("ROLLOUT_CLI_LEASE_CONFIRM_SECONDS", "0.5")
    uri = "s3://bkt/lease-race"
    got, go = [], threading.Barrier(2)

    def writer():
        go.wait()
        try:
            got.append(writer_lock.acquire(uri))
        except OutputBusyError as e:
            got.append(e)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [g for g in got if not isinstance(g, Exception)]
    assert len(held) == 1 and _lease(uri)["token"] == held[0].token
    held[0].release()


def test_a_lease_is_renewed_while_held_and_a_takeover_stops_the_commit(s3, monkeypatch):
    monkeypatch.setenv("ROLLOUT_CLI_LEASE_SECONDS", "2")
    from rollout_cli.core import storage

    uri = "s3://bkt/lease-renew"
    lock = writer_lock.acquire(uri)
    first = _lease(uri)["expires_unix"]
    while time.time() < first + 0.5:  # past its first expiry
        time.sleep(0.1)
    assert _lease(uri)["expires_unix"] > first and _lease(uri)["token"] == lock.token
    with pytest.raises(OutputBusyError):
        writer_lock.acquire(uri)
    lock.check()
    # a writer stalled past its lease's life finds it taken over: it must not commit
    rival = {"token": "f" * 32, "pid": 7, "host": "elsewhere", "started_unix": time.time(), "expires_unix": time.time() + 60}
    storage.write_bytes(f"{uri}/.lock", json.dumps(rival).encode())
    deadline = time.monotonic() + 30
    while lock.lost is None and time.monotonic() < deadline:  # the next renewal sees it
        time.sleep(0.05)
    with pytest.raises(OutputBusyError, match="taken over by another process .pid 7 on host elsewhere"):
        lock.check()
    lock.release()
    assert _lease(uri)["token"] == "f" * 32  # not ours: left in place
