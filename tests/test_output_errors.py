"""Every command that writes (convert's OUT, export's DEST, report's page) maps the system's
refusals the same way: no space (ENOSPC) and no permission (EACCES, EPERM) are exit 6, naming the
output, with nothing partial left. The faults are injected at the OS boundary (os.write, os.open,
os.mkdir for paths under one folder), and met for real on a 1 MiB tmpfs where one can be mounted."""
from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, make_sample, tree_digest, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.core.errors import output_error

EXIT_OUTPUT = 6


def cli(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def _under(path, root: str) -> bool:
    try:
        p = os.path.abspath(os.fsdecode(path))
    except TypeError:
        return False
    return p == root or p.startswith(root + os.sep)


def refuse(monkeypatch, root: Path, code: int) -> None:
    """The system refuses writes below `root` with `code`: ENOSPC at os.write (the bytes of a
    file), EACCES and EPERM at os.open (a new file) and os.mkdir (a new folder)."""
    root = str(Path(root).resolve())
    err = OSError(code, os.strerror(code))
    if code == errno.ENOSPC:
        real_write = os.write

        def write(fd, data):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if _under(target, root):
                raise OSError(code, os.strerror(code))
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
        return
    real_open, real_mkdir = os.open, os.mkdir

    def open_(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _under(path, root):
            raise OSError(code, os.strerror(code), os.fsdecode(path))
        return real_open(path, flags, *a, **k)

    def mkdir(path, *a, **k):
        if _under(path, root):
            raise OSError(code, os.strerror(code), os.fsdecode(path))
        return real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    del err


def _big_run(root: Path) -> Path:
    """One step whose shards and .pt export take more than 1 MiB (random tokens compress badly)."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(300):
        s = make_sample(index=i, group_index=i // 4, reward=float(i % 2), response_length=1000, prompt_len=8)
        s["tokens"] = rng.integers(0, 150_000, size=1008).tolist()
        samples.append(s)
    return write_jsonl(root / "run" / "1.jsonl", samples)


def _check(res, path: Path, reason: str) -> None:
    assert res.exit_code == EXIT_OUTPUT, res.output
    assert f"{path}: cannot write the output: {reason}" in res.stderr, res.stderr
    assert "Traceback" not in res.output and "internal error" not in res.output


REASONS = {errno.ENOSPC: "No space left on device", errno.EACCES: "Permission denied", errno.EPERM: "Operation not permitted"}
CODES = sorted(REASONS)


def test_output_error_names_the_output_and_the_refused_file():
    e = output_error("OUT", OSError(errno.EACCES, "Permission denied", "OUT/.staging/x"))
    assert str(e) == "OUT: cannot write the output: Permission denied (OUT/.staging/x)" and e.exit_code == 6
    assert str(output_error("OUT", OSError(errno.ENOSPC, "No space left on device", "OUT"))) == \
        "OUT: cannot write the output: No space left on device"


# -------------------------------------------------------------------------- injected at the OS


@pytest.mark.parametrize("code", CODES)
def test_convert(tmp_path, monkeypatch, code):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    box = tmp_path / "box"
    box.mkdir()
    with monkeypatch.context() as m:
        refuse(m, box, code)
        res = cli("convert", src, box / "out", "--workers", "1")
    _check(res, box / "out", REASONS[code])
    assert os.listdir(box) == []  # the fresh OUT is gone again
    # an existing output, replaced: left as it was
    old = tmp_path / "old"
    assert cli("convert", src, old, "--workers", "1", "-q").exit_code == 0
    before = tree_digest(old)
    with monkeypatch.context() as m:
        refuse(m, old, code)
        res = cli("convert", src, old, "--workers", "1", "--overwrite", "--shards", "2")
    _check(res, old, REASONS[code])
    assert tree_digest(old) == before
    assert not (old / ".staging").exists()


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("conv") / "out"
    assert cli("convert", SAMPLE_DATA / "jsonl" / "rollout_data", out, "--workers", "1", "-q").exit_code == 0
    return out


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("where", ["a new folder", "DEST"])
def test_export(tmp_path, monkeypatch, converted, code, where):
    """Today's main: ENOSPC was exit 1 ("internal error: RuntimeError: ... unexpected pos 64 vs 0")."""
    box = tmp_path / "box"
    box.mkdir()
    dest = box / "dest"
    if where == "DEST":  # DEST exists (with --overwrite), its files are refused
        assert cli("export", converted, dest, "--format", "slime-pt", "-q").exit_code == 0
    before = tree_digest(box)
    with monkeypatch.context() as m:
        refuse(m, box, code)
        res = cli("export", converted, dest, "--format", "slime-pt", "--overwrite")
    _check(res, dest, REASONS[code])
    assert tree_digest(box) == before  # no staging folder, no partial file, DEST as it was


@pytest.mark.parametrize("code", CODES)
def test_report(tmp_path, monkeypatch, code):
    box = tmp_path / "box"
    box.mkdir()
    page = box / "r.html"
    with monkeypatch.context() as m:
        refuse(m, box, code)
        res = cli("report", SAMPLE_DATA / "jsonl", "-o", page, "-q")
    _check(res, page, REASONS[code])
    assert os.listdir(box) == []


def test_json_carries_the_exit_code(tmp_path, monkeypatch, converted):
    box = tmp_path / "box"
    box.mkdir()
    with monkeypatch.context() as m:
        refuse(m, box, errno.ENOSPC)
        res = cli("export", converted, box / "dest", "--format", "slime-pt", "--json")
    assert res.exit_code == EXIT_OUTPUT
    err = json.loads(res.stdout)
    assert err["error"] == "OutputError" and err["exit_code"] == EXIT_OUTPUT and str(box / "dest") in err["message"]


# -------------------------------------------------------------------------- a real full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (mounting needs root and a kernel that allows it here)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({(r.stderr or r.stdout).strip() or r.returncode}); "
                    "the injected ENOSPC tests above cover the same paths")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_real_full_disk(tmp_path, small_disk):
    src = _big_run(tmp_path)
    conv = tmp_path / "conv"
    assert cli("convert", src.parent, conv, "--workers", "1", "-q").exit_code == 0
    res = cli("convert", src.parent, small_disk / "out", "--workers", "1")
    _check(res, small_disk / "out", "No space left on device")
    assert os.listdir(small_disk) == []
    res = cli("export", conv, small_disk / "dest", "--format", "slime-pt")
    _check(res, small_disk / "dest", "No space left on device")
    assert os.listdir(small_disk) == []
    res = cli("report", SAMPLE_DATA / "jsonl", "-o", small_disk / "r.html", "-q")  # plotly.js alone is > 1 MiB
    _check(res, small_disk / "r.html", "No space left on device")
    assert os.listdir(small_disk) == []
