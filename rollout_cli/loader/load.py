"""The loader's public names where they were first importable (`rollout_cli.loader.load`):
the loader is loader/dataset.py (open_dataset, Dataset, RankDataset), loader/batch.py
(PackedBatch), loader/slime.py (slime's train_data form) and output/views.py (Arrow buffers
as numpy views)."""
from __future__ import annotations

from .batch import PackedBatch
from .dataset import SOURCES, SPLITS, Dataset, RankDataset, open_dataset

__all__ = ["open_dataset", "Dataset", "PackedBatch", "RankDataset", "SPLITS", "SOURCES"]
