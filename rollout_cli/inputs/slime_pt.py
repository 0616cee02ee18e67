"""slime `.pt` debug dumps: `{"rollout_id": step, "samples": [Sample.to_dict(), ...]}`.

Loaded without torch by a restricted unpickler (`pt_pickle`); only `--trust-pickle` unpickles
arbitrary objects, through torch itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import InvalidInputError, Location, Problem
from .base import RawChunk


@dataclass
class PtDump:
    step: int | None  # the payload's "rollout_id" key (slime's step number)
    train_dump: bool  # slime's train-side dump (format_version key): not rollout samples
    chunk: RawChunk | None


def load_payload(path: str, display: str, trust_pickle: bool) -> Any:
    from ..core import storage

    if storage.is_uri(path):  # zip archives need a seekable local file
        with storage.LocalCopy(path) as local:
            return load_payload(local, display, trust_pickle)
    from . import pt_pickle

    try:
        if trust_pickle:
            return pt_pickle.load_pt_trusted(path)
        return pt_pickle.load_pt(path)
    except pt_pickle.UnsafePickleError as e:
        raise InvalidInputError(
            f"{display}: needs full unpickling (it references {e.global_name}); "
            "pass --trust-pickle only if you trust this file, since unpickling can run code"
        ) from None
    except pt_pickle.PtFormatError as e:
        raise InvalidInputError(f"{display}: not a readable torch dump: {e}") from None
    except OSError as e:
        raise InvalidInputError(f"{display}: cannot open: {e.strerror or e}") from None


def read_pt(path: str, display: str | None = None, trust_pickle: bool = False) -> PtDump:
    """Load a dump and return its samples as one chunk, numbered by position in `samples`."""
    display = display or path
    payload = load_payload(path, display, trust_pickle)
    if not isinstance(payload, dict) or "samples" not in payload:
        got = type(payload).__name__ if not isinstance(payload, dict) else f"keys {sorted(map(str, payload))[:8]}"
        raise InvalidInputError(f"{display}: samples: expected slime's dump layout {{'rollout_id': step, 'samples': [...]}}, got {got}")
    if "format_version" in payload:
        return PtDump(None, True, None)
    samples = payload["samples"]
    if not isinstance(samples, list):
        raise InvalidInputError(f"{display}: samples: expected a list, got {type(samples).__name__}")
    step = payload.get("rollout_id")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63):
        raise InvalidInputError(f"{display}: rollout_id: expected the step number, an integer in [0, 2**63 - 1], got {step!r}")
    problems: dict[int, Problem] = {}
    records: list = []
    for i, s in enumerate(samples):
        if isinstance(s, dict):
            records.append(s)
        else:
            problems[i] = Problem(Location(display, "sample", i), None, f"expected a sample dict, got {type(s).__name__}")
            records.append(None)
    return PtDump(step, False, RawChunk(display, "sample", list(range(len(records))), records, problems))
