"""Reading ROLL's rollout mock dumps: the pickled `DataProto` loaded as plain data by the
restricted unpickler (inputs/pickled: no pickle code runs, ROLL, torch and tensordict need not
be installed), its rows mapped onto samples by mapping.py. One file is one step, read whole.
"""
from __future__ import annotations

from typing import Iterator

CHUNK_ROWS = 128


def load(path: str, display: str):
    """The DataProto of a dump as plain data; bad input raises InvalidInputError naming it."""
    from ...core import storage
    from ...core.errors import InvalidInputError
    from ..pickled import PickleFormatError, UnsafePickleError, load_pickle

    if storage.is_uri(path):
        with storage.reading(display), storage.LocalCopy(path) as local:
            return load(local, display)
    try:
        return load_pickle(path)
    except UnsafePickleError as e:
        raise InvalidInputError(
            f"{display}: not a ROLL rollout dump rollout-cli reads: it references {e.global_name}, which ROLL's "
            "DataProto does not hold (ROLL dumps are read without running pickle code; --trust-pickle does not apply)"
        ) from None
    except PickleFormatError as e:
        raise InvalidInputError(f"{display}: not a readable ROLL rollout dump: {e}") from None
    except OSError as e:
        raise storage.input_error(display, e, f"{display}: cannot open: {e.strerror or e}") from None


def read(inp, request, info) -> Iterator:
    """The registry's entry: the dump's rows as samples, numbered by row (0-based)."""
    import numpy as np

    from ...core.errors import InvalidInputError, Location, Problem
    from ..base import RawChunk
    from ..columns import columnar
    from .mapping import Bad, batch_samples

    display = inp.display
    proto = load(inp.path, display)
    try:
        samples = batch_samples(np, proto)
    except Bad as e:
        raise InvalidInputError(f"{display}: {e.field}: {e.message}" if e.field else f"{display}: {e.message}") from None
    del proto
    size = request.chunk_records or CHUNK_ROWS
    for a in range(0, len(samples), size):
        part = samples[a:a + size]
        problems = {i: Problem(Location(display, "row", a + i), s.field, s.message, "roll.row")
                    for i, s in enumerate(part) if isinstance(s, Bad)}
        records = [None if isinstance(s, Bad) else s for s in part]
        yield columnar(RawChunk(display, "row", list(range(a, a + len(part))), records, problems))
