"""slime `.pt` debug dumps: `{"rollout_id": step, "samples": [Sample.to_dict(), ...]}`.

Loaded without torch by a restricted unpickler (`pt_pickle.py` over inputs/pickled); only `--trust-pickle` unpickles
arbitrary objects, through torch itself.
"""
from __future__ import annotations

import array
from typing import Any, Iterator

import numpy as np

from ...core import slime_keys as K
from ...core.tensors import BFloat16Bits, WidenedBFloat16, widen_bf16
from ...core.errors import InvalidInputError, Location, Problem
from ...core.sample_fields import FLOAT_LISTS, INT_LISTS  # numeric lists a sample may hold as lists
from ..base import RawChunk
from ..columns import columnar

# Samples converted per chunk: each chunk's arrays are new memory while the lists they replace
# are still held (the unpickled graph is freed only as whole chunks are done)
CHUNK_SAMPLES = 128


def load_payload(path: str, display: str, trust_pickle: bool, as_stored: bool = False) -> Any:
    """The dump's object, restricted-loaded (bfloat16 tensors as bit patterns with `as_stored`,
    else widened to float32) or, with `trust_pickle`, through torch.load."""
    if trust_pickle:
        from ...core import storage

        if storage.is_uri(path):  # zip archives need a seekable local file
            with storage.reading(display), storage.LocalCopy(path) as local:
                return load_payload(local, display, trust_pickle)
        from ..pickled import PtFormatError
        from . import pt_pickle

        try:
            return pt_pickle.load_pt_trusted(path)
        except PtFormatError as e:
            raise InvalidInputError(f"{display}: not a readable torch dump: {e}") from None
        except OSError as e:
            raise storage.input_error(display, e, f"{display}: cannot open: {e.strerror or e}") from None
    from ..pickled.reading import read_pickled

    return read_pickled(path, display, torch_archive=True, as_stored=as_stored)


def _open_dump(path: str, display: str, trust_pickle: bool) -> tuple[int | None, bool, list | None]:
    """(step, train_dump, samples) of a dump; samples is None for a train-side dump."""
    payload = load_payload(path, display, trust_pickle, as_stored=True)  # read() widens them outside multimodal inputs
    if not isinstance(payload, dict) or "samples" not in payload:
        got = type(payload).__name__ if not isinstance(payload, dict) else f"keys {sorted(map(str, payload))[:8]}"
        raise InvalidInputError(f"{display}: samples: expected slime's dump layout {{'rollout_id': step, 'samples': [...]}}, got {got}")
    if K.FORMAT_VERSION in payload:  # slime's train-side dump
        return None, True, None
    samples = payload["samples"]
    if not isinstance(samples, list):
        raise InvalidInputError(f"{display}: samples: expected a list, got {type(samples).__name__}")
    step = payload.get("rollout_id")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63):
        raise InvalidInputError(f"{display}: rollout_id: expected the step number, an integer in [0, 2**63 - 1], got {step!r}")
    return step, False, samples


def _chunk(display: str, samples: list, first: int) -> RawChunk:
    problems: dict[int, Problem] = {}
    records: list = []
    for i, s in enumerate(samples):
        if isinstance(s, dict):
            records.append(s)
        else:
            problems[i] = Problem(Location(display, "sample", first + i), None, f"expected a sample dict, got {type(s).__name__}",
                                  "record.type")
            records.append(None)
    return columnar(RawChunk(display, "sample", list(range(first, first + len(records))), records, problems))


def _as_arrays(s: dict) -> None:
    """Replace the sample's numeric lists by numpy arrays, freeing the lists. A list the
    validation must word a problem for (a leading bool, a float among ints, a string, a null,
    an int beyond int64) stays a list, so its message is the same as for any other input."""
    for k in INT_LISTS:
        v = s.get(k)
        if type(v) is list and v and type(v[0]) is not bool:
            try:
                s[k] = np.frombuffer(array.array("q", v), dtype=np.int64)
            except (TypeError, OverflowError):
                pass
    for k in FLOAT_LISTS:
        v = s.get(k)
        if type(v) is list and v:
            try:
                s[k] = np.fromiter(v, dtype=np.float64, count=len(v))
            except (TypeError, ValueError, OverflowError):
                pass


_SCALARS = (int, float, str, bool, bytes, type(None))


def _widened(v: Any) -> Any:
    """`v` with every bfloat16 array in it (bit patterns, as the load gives them) widened to
    float32, as the restricted loader gives bfloat16 elsewhere; lists of scalars are not walked."""
    if isinstance(v, BFloat16Bits):
        return widen_bf16(v).view(WidenedBFloat16)
    if type(v) is dict:
        for k, x in v.items():
            w = _widened(x)
            if w is not x:
                v[k] = w
    elif type(v) in (list, tuple) and v and not isinstance(v[0], _SCALARS):
        items = [_widened(x) for x in v]
        if any(a is not b for a, b in zip(items, v)):
            return items if type(v) is list else tuple(items)
    return v


def _widen_outside_mm(s: dict) -> None:
    """bfloat16 tensors stay bit patterns in multimodal_train_inputs (stored as bfloat16, a
    view of the dump's bytes) and are widened everywhere else in the sample."""
    for k, v in s.items():
        if k != K.MULTIMODAL_TRAIN_INPUTS:
            w = _widened(v)
            if w is not v:
                s[k] = w


def read(inp, request, info) -> Iterator[RawChunk]:
    """The registry's entry: the dump's samples in chunks, numeric lists as arrays. Each
    sample is converted just before its chunk is handed on and dropped from the payload, so
    the object graph shrinks while the arrays grow."""
    step, train_dump, samples = _open_dump(inp.path, inp.display, request.trust_pickle)
    info.step, info.train_dump = step, train_dump
    if train_dump:
        return
    size = request.chunk_records or CHUNK_SAMPLES
    if not request.chunk_records and any(isinstance(s, dict) and s.get(K.MULTIMODAL_TRAIN_INPUTS) for s in samples):
        # the tensors are arrays already (no lists to free as chunks go), and the step's tensor
        # column is then built once, not as pieces to be joined in a second copy
        size = max(len(samples), 1)
    for a in range(0, len(samples), size):
        part = samples[a:a + size]
        samples[a:a + size] = [None] * len(part)  # the chunk holds the only reference now
        for s in part:
            if isinstance(s, dict):
                _widen_outside_mm(s)
                _as_arrays(s)
        yield _chunk(inp.display, part, a)
        del part
