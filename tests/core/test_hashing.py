from __future__ import annotations

import hashlib
import os
import threading

import pytest
from blake3 import blake3

from rollout_cli.core import hashing


@pytest.mark.parametrize("size", [0, 1, hashing._BLOCK - 1, 3 * hashing._BLOCK + 17])
@pytest.mark.parametrize("algorithm", ["blake3", "sha256"])
def test_a_file_digest_is_the_digest_of_its_bytes(tmp_path, size, algorithm):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    want = blake3(data).hexdigest() if algorithm == "blake3" else hashlib.sha256(data).hexdigest()
    assert hashing.file_digest(str(path), algorithm) == want


def test_a_file_that_is_not_regular_is_read_in_blocks(tmp_path):
    data = os.urandom(hashing._BLOCK + 5)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert hashing.file_digest(str(fifo)) == blake3(data).hexdigest()
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
