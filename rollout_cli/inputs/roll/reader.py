"""Reading ROLL's rollout mock dumps: the pickled `DataProto` loaded as plain data by the
restricted unpickler (inputs/pickled: no pickle code runs, ROLL, torch and tensordict need not
be installed; only `--trust-pickle` runs a global off its list), its rows mapped onto samples by
mapping.py. One file is one step, read whole; each chunk in columnar form cut from the
batch's tensors (mapping.columns).
"""
from __future__ import annotations

from typing import Iterator

CHUNK_ROWS = 128


def load(path: str, display: str, trust_pickle: bool = False):
    """The DataProto of a dump as plain data (inputs/pickled's read_pickled: bad input raises
    InvalidInputError naming the file)."""
    from ..pickled import read_pickled

    return read_pickled(path, display, trust_pickle)


def read(inp, request, info) -> Iterator:
    """The registry's entry: the dump's rows as samples, numbered by row (0-based)."""
    import numpy as np

    from ...core.errors import InvalidInputError, Location, Problem
    from ..base import RawChunk
    from .mapping import Bad, columns, plan

    display = inp.display
    proto = load(inp.path, display, request.trust_pickle)
    try:
        p = plan(np, proto)
    except Bad as e:
        raise InvalidInputError(f"{display}: {e.field}: {e.message}" if e.field else f"{display}: {e.message}") from None
    del proto
    size = request.chunk_records or CHUNK_ROWS
    for a in range(0, p.rows, size):
        b = min(a + size, p.rows)
        problems = {i - a: Problem(Location(display, "row", i), s.field, s.message, "roll.row")
                    for i, s in sorted(p.bad.items()) if a <= i < b}
        yield RawChunk(display, "row", list(range(a, b)), None, problems, columns(np, p, a, b))
