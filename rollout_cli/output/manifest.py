"""The manifest: what a run wrote, with checksums; the commit marker of an output directory."""
from __future__ import annotations

import json
import os

from .. import __version__
from ..core import hashing, storage
from ..core.errors import IntegrityError
from ..core.versions import FORMAT, SCHEMA_VERSION



def file_fingerprint(path: str) -> dict:
    """Size, mtime and BLAKE3 digest of an input file."""
    if storage.is_uri(path):
        info = storage.file_info(path)
        h = hashing.new()
        with storage.open_read(path) as f:
            while True:
                block = f.read(8 << 20)
                if not block:
                    break
                h.update(block)
        return {"size": info.size, "mtime_ns": info.mtime_ns or 0, hashing.ALGORITHM: h.hexdigest()}
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, hashing.ALGORITHM: hashing.file_digest(path)}


def build(*, options: dict, inputs: list[dict], steps: list[dict], counts: dict, rejects: dict | None,
          anomalies: list[dict], volatile: dict) -> dict:
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
    }


def read(out: str) -> dict:
    """Load OUT/manifest.json, checking it is one of ours with a known schema version."""
    path = os.path.join(out, "manifest.json")
    try:
        with open(path) as f:
            m = json.load(f)
    except FileNotFoundError:
        raise IntegrityError(f"{out}: no manifest.json: not a complete rollout-cli output (an interrupted run, or not converted)") from None
    except (OSError, ValueError) as e:
        raise IntegrityError(f"{path}: unreadable manifest: {e}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise IntegrityError(f"{path}: not a rollout-cli manifest")
    if m.get("schema_version") != SCHEMA_VERSION:
        raise IntegrityError(f"{path}: schema_version {m.get('schema_version')} is not supported (this tool reads {SCHEMA_VERSION})")
    return m
