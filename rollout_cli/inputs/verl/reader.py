"""Read a verl rollout-skip `gen_batch.dp`: the restricted unpickler (inputs/pickled) gives
the DataProto as plain data, mapping.py its rows as slime samples; rows handed on in chunks,
each numbered by its row in the batch (0-based)."""
from __future__ import annotations

from typing import Iterator

from ...core.errors import InvalidInputError, Location, Problem
from ..base import RawChunk
from . import detect, mapping

CLASS = "verl.protocol.DataProto"
CHUNK_ROWS = 256


def load(path: str, display: str, trust_pickle: bool = False):
    """The file's object as plain data, through the restricted unpickler (never running code
    from the file unless --trust-pickle)."""
    from ..pickled import read_pickled

    return read_pickled(path, display, trust_pickle)


def read(inp, request, info) -> Iterator[RawChunk]:
    """The registry's entry: the batch's rows, `CHUNK_ROWS` (or request.chunk_records) at a time."""
    obj = load(inp.path, inp.display, request.trust_pickle)
    name = getattr(obj, "class_name", None)
    if name != CLASS:
        raise InvalidInputError(f"{inp.display}: expected a pickled verl DataProto (the rollout-skip cache), "
                                f"got {name or type(obj).__name__}")
    if obj.get("batch") is None:
        raise InvalidInputError(f"{inp.display}: batch: the DataProto holds no tensors")
    try:
        plan = mapping.plan(dict(obj["batch"]), obj.get("non_tensor_batch") or {},
                            detect.rollouts_per_prompt(inp.path))
    except mapping.Bad as e:
        where = f"{inp.display}:row {e.row}" if e.row is not None else inp.display
        raise InvalidInputError(f"{where}: {e.field}: {e.message}") from None
    del obj
    size = request.chunk_records or CHUNK_ROWS
    rows = len(plan.p)
    for a in range(0, rows, size):
        b = min(a + size, rows)
        problems = {i - a: Problem(Location(inp.display, "row", i), r.field, r.message, "verl.row")
                    for i, r in sorted(plan.bad.items()) if a <= i < b}
        yield RawChunk(inp.display, "row", list(range(a, b)), None, problems, mapping.columns(plan, a, b))
