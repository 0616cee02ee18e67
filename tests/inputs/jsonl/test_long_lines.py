"""Lines longer than --max-line-bytes: refused with exit 3 naming the file and the line, once that
many bytes of the line are read (never the whole line first), in plain and compressed files; a
line spanning many read blocks is joined in one growing buffer."""
from __future__ import annotations

import gzip
import io
import subprocess
import sys

import pytest

from rollout_cli.core.errors import InvalidInputError
from rollout_cli.core.options import RuleOptions
from rollout_cli.inputs import limits
from rollout_cli.inputs.jsonl import reader

GOOD = b'{"tokens": [1, 2, 3], "response_length": 1, "reward": 1.0, "prompt": "p", "response": "r"}\n'


def lines_of(data: bytes, display: str = "f.jsonl") -> list[bytes]:
    return [bytes(buf[a:b]) for buf, a, b in reader._lines(io.BytesIO(data), None, display)]


def test_default_is_256_mib():
    assert RuleOptions.max_line_bytes == 256 << 20 and limits.max_line_bytes() == 256 << 20


def test_line_spanning_many_blocks_is_joined_whole(monkeypatch):
    monkeypatch.setattr(reader, "BLOCK_BYTES", 7)
    data = b"a" * 100 + b"\n" + b"bc\n" + b"d" * 29
    assert lines_of(data) == [b"a" * 100, b"bc", b"d" * 29]


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
@pytest.mark.parametrize("where", [1, 3])
def test_a_long_line_is_refused_naming_file_and_line(monkeypatch, block, where):
    monkeypatch.setattr(reader, "BLOCK_BYTES", block)
    monkeypatch.setitem(limits._limits, "max_line_bytes", 50)
    rows = [b"x" * 50] * 4
    rows[where - 1] = b"y" * 51
    with pytest.raises(InvalidInputError, match=rf"^f\.jsonl:line {where}: longer than --max-line-bytes \(50 bytes\)"):
        lines_of(b"\n".join(rows) + b"\n")
    assert lines_of(b"\n".join([b"x" * 50] * 4)) == [b"x" * 50] * 4  # 50 is allowed


def test_refused_before_the_line_is_read_whole(monkeypatch):
    monkeypatch.setattr(reader, "BLOCK_BYTES", 10)
    monkeypatch.setitem(limits._limits, "max_line_bytes", 100)

    class Endless(io.RawIOBase):  # one endless line: reading it whole would never end
        read_bytes = 0

        def readable(self):
            return True

        def readinto(self, b):
            b[:] = b"z" * len(b)
            self.read_bytes += len(b)
            return len(b)

    stream = Endless()
    with pytest.raises(InvalidInputError, match="line 1"):
        list(reader._lines(stream, None, "endless.jsonl"))
    assert stream.read_bytes <= 120


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], capture_output=True, text=True, timeout=600)


def assert_refused(res, path, line: int) -> None:
    assert res.returncode == 3, f"exit {res.returncode}: {res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert f"{path}:line {line}: longer than --max-line-bytes" in last, last


def test_max_line_bytes_option(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(GOOD * 3 + b'{"prompt": "' + b"p" * 2000 + b'"}\n' + GOOD)
    assert_refused(run_cli("inspect", str(path), "--step", "1", "--max-line-bytes", "1000"), path, 4)
    assert_refused(run_cli("convert", str(path), str(tmp_path / "out"), "--workers", "1", "-q", "--step", "1",
                           "--max-line-bytes", "1000"),
                   path, 4)


def test_gzip_jsonl_with_a_257_mib_line_is_exit_3_by_default(tmp_path):
    path = tmp_path / "long.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(GOOD)
        f.write(b'{"prompt": "')
        chunk = b"a" * (1 << 20)
        for _ in range(257):
            f.write(chunk)
        f.write(b'"}\n')
    assert path.stat().st_size < 2 << 20
    assert_refused(run_cli("inspect", str(path), "--step", "1"), path, 2)
    assert_refused(run_cli("convert", str(path), str(tmp_path / "out"), "--workers", "1", "-q", "--step", "1"), path, 2)
    assert not (tmp_path / "out" / "manifest.json").exists()
