"""Read a SkyRL training-batch dump: the restricted unpickler (inputs/pickled) gives the
batch as plain data, mapping.py its rows as slime samples; rows handed on in chunks, each
numbered by its row in the batch (0-based), each chunk in columnar form cut from the
batch's tensors (mapping.columns)."""
from __future__ import annotations

from typing import Iterator

from ...core.errors import InvalidInputError, Location, Problem
from ..base import RawChunk
from . import mapping

CLASSES = tuple(f"skyrl.backends.skyrl_train.training_batch.{n}" for n in ("TrainingInputBatch", "TensorBatch"))
CHUNK_ROWS = 256


def load(path: str, display: str, trust_pickle: bool = False):
    """The file's object as plain data, through the restricted unpickler (never running code
    from the file unless --trust-pickle)."""
    from ..pickled import read_pickled

    return read_pickled(path, display, trust_pickle)


def batch_state(obj, display: str) -> dict:
    name = getattr(obj, "class_name", None)
    if name not in CLASSES:
        got = name or type(obj).__name__
        raise InvalidInputError(f"{display}: expected a pickled SkyRL TrainingInputBatch "
                                f"(trainer.dump_data_batch), got {got}")
    return obj


def read(inp, request, info) -> Iterator[RawChunk]:
    """The registry's entry: the batch's rows, `CHUNK_ROWS` (or request.chunk_records) at a time."""
    state = batch_state(load(inp.path, inp.display, request.trust_pickle), inp.display)
    try:
        plan, notes = mapping.plan(state)
    except mapping.Bad as e:
        raise InvalidInputError(f"{inp.display}: {e.field}: {e.message}") from None
    del state
    info.notes.extend(f"{inp.display}: {n}" for n in notes)
    size = request.chunk_records or CHUNK_ROWS
    for a in range(0, plan.real, size):
        b = min(a + size, plan.real)
        problems = {i - a: Problem(Location(inp.display, "row", i), r.field, r.message, "skyrl.row")
                    for i, r in sorted(plan.bad.items()) if a <= i < b}
        yield RawChunk(inp.display, "row", list(range(a, b)), None, problems, mapping.columns(plan, a, b))
