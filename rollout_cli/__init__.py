"""rollout-cli: turn RL rollout sample dumps (slime `.pt`, JSONL, Parquet) into sharded
train-data Parquet, and load it back onto the GPU."""
from __future__ import annotations

from .core.versions import __version__

__all__ = ["__version__", "convert", "ConvertOptions", "open_dataset", "PackedBatch", "RankDataset"]


def __getattr__(name: str):
    # keep `import rollout_cli` light: pyarrow-heavy and torch-heavy parts load on first use
    if name in ("convert", "ConvertOptions"):
        from .run import convert as _c

        return getattr(_c, name)
    if name in ("open_dataset", "PackedBatch", "RankDataset"):
        from .loader import load as _l

        return getattr(_l, name)
    raise AttributeError(name)
