from __future__ import annotations

import hashlib
import os
import threading

import pytest
import xxhash
from blake3 import blake3

from rollout_cli.core import hashing


@pytest.mark.parametrize("size", [0, 1, hashing._BLOCK - 1, 3 * hashing._BLOCK + 17])
@pytest.mark.parametrize("algorithm", ["blake3", "sha256", "xxh3_128"])
def test_a_file_digest_is_the_digest_of_its_bytes(tmp_path, size, algorithm):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert hashing.file_digest(str(path), algorithm) == _digest(data, algorithm)


def _digest(data: bytes, algorithm: str) -> str:
    if algorithm == "blake3":
        return blake3(data).hexdigest()
    if algorithm == "xxh3_128":
        return xxhash.xxh3_128(data).hexdigest()
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("algorithm", ["blake3", "xxh3_128"])
def test_a_file_that_is_not_regular_is_read_in_blocks(tmp_path, algorithm):
    data = os.urandom(hashing._BLOCK + 5)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert hashing.file_digest(str(fifo), algorithm) == _digest(data, algorithm)
    finally:
        writer.join()


def test_a_file_that_cannot_be_mapped_is_read(tmp_path, monkeypatch):
    data = os.urandom(1000)
    path = tmp_path / "f"
    path.write_bytes(data)

    class Unmappable:
        def __init__(self):
            self._h = blake3()

        def update_mmap(self, path):
            raise OSError(19, "No such device")

        def update(self, b):
            self._h.update(b)

        def hexdigest(self):
            return self._h.hexdigest()

    monkeypatch.setattr(hashing, "blake3", Unmappable)
    assert hashing.file_digest(str(path)) == blake3(data).hexdigest()


def test_an_input_that_cannot_be_mapped_is_read_for_its_fingerprint(tmp_path, monkeypatch):
    data = os.urandom(3 * hashing._BLOCK + 1)
    path = tmp_path / "f"
    path.write_bytes(data)

    def refuse(*args, **kwargs):
        raise OSError(19, "No such device")

    monkeypatch.setattr(hashing.mmap, "mmap", refuse)
    assert hashing.file_digest(str(path), hashing.INPUT_ALGORITHM) == xxhash.xxh3_128(data).hexdigest()
