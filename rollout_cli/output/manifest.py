"""The manifest: what a run wrote, with checksums; the commit marker of an output directory."""
from __future__ import annotations

import json
import os

from ..core import hashing, storage
from ..core.errors import IntegrityError
from ..core.versions import FORMAT, SCHEMA_VERSION, __version__
from ..core import layout


SIZE_MTIME = "size+mtime"  # the `fingerprint` of an input on an object store: what its listing reports


@storage.reads_input  # unreachable, refused: InputUnavailableError naming the input
def file_fingerprint(path: str, algorithm: str = hashing.INPUT_ALGORITHM) -> dict:
    """Size, mtime and digest (XXH3-128 unless `algorithm` says otherwise: one of
    hashing.INPUT_KEYS) of a local input file. An input on an object store is not read a
    second time to be hashed: its fingerprint is the size and modification time the store
    reports (`"fingerprint": "size+mtime"`; an object rewritten gets a new mtime)."""
    if storage.is_uri(path):
        info = storage.file_info(path)
        return {"size": info.size, "mtime_ns": info.mtime_ns or 0, "fingerprint": SIZE_MTIME}
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, algorithm: hashing.file_digest(path, algorithm)}


def fingerprint_algorithm(recorded: dict | None) -> str:
    """The algorithm to fingerprint an input with so that it compares with `recorded` (a
    previous fingerprint of it): the one recorded, else XXH3-128."""
    return next((k for k in hashing.INPUT_KEYS if k in (recorded or {})), hashing.INPUT_ALGORITHM)


def same_content(a: dict | None, b: dict | None) -> bool:
    """Whether two fingerprints name the same bytes: size and a digest of one algorithm, or
    (object stores) size and mtime."""
    if not (a and b) or a.get("size") != b.get("size"):
        return False
    if a.get("fingerprint") == SIZE_MTIME or b.get("fingerprint") == SIZE_MTIME:
        return a.get("fingerprint") == b.get("fingerprint") and a.get("mtime_ns") is not None and a.get("mtime_ns") == b.get("mtime_ns")
    alg = next((k for k in hashing.INPUT_KEYS if a.get(k) is not None and b.get(k) is not None), None)
    return alg is not None and a[alg] == b[alg]


def build(*, options: dict, inputs: list[dict], steps: list[dict], counts: dict, rejects: dict | None,
          anomalies: list[dict], volatile: dict, generation: str | None = None) -> dict:
    """The manifest. `generation` (object stores only) names the folder OUT/gen/<id>/ this
    run wrote its files in; local manifests have no such key."""
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "options": options,
        "counts": counts,
        "inputs": inputs,
        "steps": steps,
        "rejects": rejects,
        "anomalies": anomalies,
        "volatile": volatile,
        **({"generation": generation} if generation else {}),
    }


class ManifestError(IntegrityError):
    """OUT/manifest.json is missing, unreadable, not ours, or of a schema version this tool does
    not read. `invariant` names what broke (`manifest` or `schema_version`), as verify reports it."""

    def __init__(self, path: str, invariant: str, detail: str, parsed: bool = True):
        super().__init__(f"{path}: {detail}")
        self.path, self.invariant, self.detail, self.parsed = path, invariant, detail, parsed


def read(out: str) -> dict:
    """Load OUT/manifest.json, checking it is one of ours with a known schema version (the one
    manifest reader: convert's --resume, the loader, inspect and verify all use it)."""
    path = layout.manifest_path(out)
    try:
        m = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise ManifestError(path, "manifest", "missing: not a complete rollout-cli output (an interrupted run, or not converted)",
                           parsed=False) from None
    except (OSError, ValueError) as e:
        raise ManifestError(path, "manifest", f"unreadable: {e}", parsed=False) from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        got = m.get("format") if isinstance(m, dict) else None
        raise ManifestError(path, "manifest", f"not a rollout-cli manifest (format {got!r}, expected {FORMAT!r})")
    if m.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(path, "schema_version", f"schema_version {m.get('schema_version')!r}; this tool reads {SCHEMA_VERSION}")
    return m
