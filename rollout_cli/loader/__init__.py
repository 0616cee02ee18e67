"""The trainer side, in torch: open a converted output through its model (output/model.py),
memory-map a shard's Arrow IPC copy and hand out packed batches (flat tokens and cu_seqlens),
one per shard or one per micro-batch at any world size (iter_batches, over output/batches.py),
or slime's train_data. The names load on first use, so that importing the package needs no
torch."""
from __future__ import annotations

__all__ = ["open_dataset", "Dataset", "PackedBatch", "Batch", "RankDataset", "BatchDataset", "SPLITS"]


def __getattr__(name: str):
    if name == "PackedBatch":
        from .batch import PackedBatch

        return PackedBatch
    if name == "Batch":  # the numpy form of a batch (backend="numpy"), the same fields
        from ..output.batches import Batch

        return Batch
    if name in ("open_dataset", "Dataset", "RankDataset", "BatchDataset", "SPLITS", "SOURCES"):
        from . import dataset

        return getattr(dataset, name)
    raise AttributeError(name)
