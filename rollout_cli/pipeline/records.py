"""One step's records, gathered from its validated chunks (in order): where each record is in
its input (the locator every message and reject uses), and the per-record inputs of the id
rule. `convert` (over its workers' parts) and `inspect` (over its own chunks) both call these."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..core.errors import Location
from .validate import NormChunk


def locator(chunks: Sequence[NormChunk]) -> Callable[[int], Location]:
    """Map a record position in the step to file:line, file:row or file:sample."""
    starts = np.cumsum([0] + [len(c.numbers) for c in chunks])

    def where(pos: int) -> Location:
        k = int(np.searchsorted(starts, pos, side="right")) - 1
        c = chunks[k]
        return Location(c.source, c.kind, c.numbers[pos - int(starts[k])])

    return where


def id_inputs(chunks: Sequence[NormChunk]) -> tuple[np.ndarray, np.ndarray, list]:
    """Per record: id state (int8), explicit id (int64, 0 where none) and group_index."""
    id_state = np.fromiter((s for c in chunks for s in c.id_state), dtype=np.int8)
    explicit = np.fromiter((0 if v is None else v for c in chunks for v in c.explicit_id), dtype=np.int64, count=len(id_state))
    group_index = [g for c in chunks for g in c.group_index]
    return id_state, explicit, group_index


def summary_only(nc: NormChunk) -> NormChunk:
    """A chunk's per-record summaries without its rows (what a step keeps of every chunk)."""
    return NormChunk(nc.source, nc.kind, nc.numbers, nc.id_state, nc.explicit_id, nc.group_index, nc.valid)


def dense_groups(group_index: list, pre=None):
    """Group keys renumbered 0, 1, ... in order of first appearance (None stays None), for a
    format whose group_index is a key of the prompt's content (its descriptor's
    `content_groups`, inputs/format.py);
    with `pre` (a table of valid rows with `_pos` and `group_index`), that table's column too.
    Returns the list, or (list, table) when `pre` is given."""
    order: dict = {}
    dense = [None if g is None else order.setdefault(g, len(order)) for g in group_index]
    if pre is None:
        return dense
    import pyarrow as pa

    table = np.fromiter((-1 if g is None else g for g in dense), dtype=np.int64, count=len(dense))
    col = pa.array(table[pre.column("_pos").to_numpy()], pa.int64()) if pre.num_rows else pa.array([], pa.int64())
    k = pre.schema.get_field_index("group_index")
    return dense, pre.set_column(k, pre.schema.field(k), col)
