"""core/tuning.py: the fast paths' switches, each read in one place, and the same shard bytes
with every fast path off as with every one on."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import SAMPLE_DATA, shard_bytes
from rollout_cli.core import storage, tuning


@pytest.mark.parametrize("name", sorted(tuning.SWITCHES))
def test_a_switch_is_its_default_unless_it_says_0_or_1(monkeypatch, name):
    monkeypatch.delenv(name, raising=False)
    assert tuning.enabled(name) is tuning.SWITCHES[name]
    for junk in ("", "yes", "off", "2"):
        monkeypatch.setenv(name, junk)
        assert tuning.enabled(name) is tuning.SWITCHES[name]
    monkeypatch.setenv(name, "0")
    assert tuning.enabled(name) is False
    monkeypatch.setenv(name, " 1 ")
    assert tuning.enabled(name) is True


def _convert(src, out, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "rollout_cli", "convert", str(src), str(out), "-q", "--workers", "2"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_every_fast_path_off_writes_the_same_shards(tmp_path, fmt):
    """A fresh executable each (its fork server and workers take the environment it starts with)."""
    _convert(SAMPLE_DATA / fmt, tmp_path / "on", {name: "1" for name in tuning.SWITCHES})
    _convert(SAMPLE_DATA / fmt, tmp_path / "off", {name: "0" for name in tuning.SWITCHES})
    on, off = shard_bytes(tmp_path / "on"), shard_bytes(tmp_path / "off")
    assert on and on == off


def test_the_shard_writer_asks_the_direct_io_switch(tmp_path, monkeypatch):
    opened = []
    real_open = os.open

    def spy(path, flags, *a):
        opened.append(bool(flags & getattr(os, "O_DIRECT", 0)))
        return real_open(path, flags & ~getattr(os, "O_DIRECT", 0), *a)  # whatever the file system takes

    monkeypatch.setattr(storage.os, "open", spy)
    monkeypatch.setenv(tuning.DIRECT_IO, "0")
    storage.LocalWriter(str(tmp_path / "a")).close()
    monkeypatch.setenv(tuning.DIRECT_IO, "1")
    storage.LocalWriter(str(tmp_path / "b")).close()
    monkeypatch.delenv(tuning.DIRECT_IO)
    storage.LocalWriter(str(tmp_path / "c")).close()
    o_direct = hasattr(os, "O_DIRECT")
    assert opened == [False, o_direct, o_direct]  # on by default
