"""Read a SkyRL training-batch dump: the restricted unpickler (inputs/pickled) gives the
batch as plain data, mapping.py its rows as slime samples; rows handed on in chunks, each
numbered by its row in the batch (0-based)."""
from __future__ import annotations

from typing import Iterator

from ...core.errors import InvalidInputError, Location, Problem
from ..base import RawChunk
from ..columns import columnar
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
        rows, notes = mapping.samples(state)
    except mapping.Bad as e:
        raise InvalidInputError(f"{inp.display}: {e.field}: {e.message}") from None
    info.notes.extend(f"{inp.display}: {n}" for n in notes)
    size = request.chunk_records or CHUNK_ROWS
    for a in range(0, len(rows), size):
        records, problems = [], {}
        for k, r in enumerate(rows[a:a + size]):
            if isinstance(r, mapping.Bad):
                problems[k] = Problem(Location(inp.display, "row", a + k), r.field, r.message, "skyrl.row")
                records.append(None)
            else:
                records.append(r)
        yield columnar(RawChunk(inp.display, "row", list(range(a, a + len(records))), records, problems))
