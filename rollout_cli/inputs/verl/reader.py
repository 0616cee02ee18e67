"""Read a verl rollout-skip `gen_batch.dp`: the restricted unpickler (inputs/pickled) gives
the DataProto as plain data, mapping.py its rows as slime samples; rows handed on in chunks,
each numbered by its row in the batch (0-based)."""
from __future__ import annotations

from typing import Iterator

from ...core.errors import InvalidInputError, Location, Problem
from ..base import RawChunk
from ..columns import columnar
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
        rows = mapping.samples(dict(obj["batch"]), obj.get("non_tensor_batch") or {},
                               detect.rollouts_per_prompt(inp.path))
    except mapping.Bad as e:
        where = f"{inp.display}:row {e.row}" if e.row is not None else inp.display
        raise InvalidInputError(f"{where}: {e.field}: {e.message}") from None
    size = request.chunk_records or CHUNK_ROWS
    for a in range(0, len(rows), size):
        records, problems = [], {}
        for k, r in enumerate(rows[a:a + size]):
            if isinstance(r, mapping.Bad):
                problems[k] = Problem(Location(inp.display, "row", a + k), r.field, r.message, "verl.row")
                records.append(None)
            else:
                records.append(r)
        yield columnar(RawChunk(inp.display, "row", list(range(a, a + len(records))), records, problems))
