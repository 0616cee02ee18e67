"""Checksums for inputs and outputs: BLAKE3 (cryptographic, and about 4.5x faster than
SHA-256 here, so fingerprints never dominate a conversion). The manifest names the algorithm by
its key; `sha256` entries are still verified."""
from __future__ import annotations

import hashlib
import os
import stat

from blake3 import blake3

ALGORITHM = "blake3"
DIGEST_KEYS = ("blake3", "sha256")  # manifest keys naming a file's checksum algorithm
_BLOCK = 1 << 20  # stays in the core's cache: 75 MB hashed in 27 ms of CPU, against 32 ms with 8 MiB


def new(algorithm: str = ALGORITHM):
    """A streaming hasher with .update(bytes) and .hexdigest()."""
    if algorithm == "blake3":
        return blake3()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum algorithm {algorithm!r}")


def file_digest(path: str, algorithm: str = ALGORITHM) -> str:
    """The hex digest of a file's bytes. BLAKE3 hashes a regular file through a memory map
    (no copy out of the page cache: a 726 MB log in 0.16 s of CPU against 0.21 s read in
    blocks); anything else is read in blocks into one buffer, reused so that no read faults
    in fresh pages (a fingerprint runs beside the conversion, on the cores it uses)."""
    h = new(algorithm)
    if algorithm == "blake3":
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size:
            try:
                return h.update_mmap(path).hexdigest()
            except OSError:  # a filesystem that cannot map: read it
                h = new(algorithm)
    view = memoryview(bytearray(_BLOCK))
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            h.update(view[:n])
    return h.hexdigest()


def bytes_digest(data: bytes) -> str:
    return blake3(data).hexdigest()


def digest_of(entry: dict) -> tuple[str, str] | None:
    """(algorithm, hex digest) recorded for a file in a manifest entry."""
    for alg in DIGEST_KEYS:
        if alg in entry:
            return alg, entry[alg]
    return None
