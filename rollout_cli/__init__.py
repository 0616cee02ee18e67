"""rollout-cli: turn RL rollout sample dumps (slime `.pt`, JSONL, Parquet) into sharded
train-data Parquet, read it back (`open_output`, no torch needed), and load it onto the GPU
(`open_dataset`)."""
from __future__ import annotations

from .core.versions import __version__

__all__ = ["__version__", "convert", "ConvertOptions", "open_output", "Output", "open_dataset", "PackedBatch",
           "RankDataset", "derive", "DeriveResult", "DeriveOptions"]


def __getattr__(name: str):
    # keep `import rollout_cli` light: pyarrow-heavy and torch-heavy parts load on first use
    if name in ("convert", "ConvertOptions"):
        from .run import convert as _c

        return getattr(_c, name)
    if name in ("open_output", "Output"):  # the torch-free model of an output
        from .output import model as _m

        return getattr(_m, name)
    if name in ("open_dataset", "PackedBatch", "RankDataset"):  # its torch face
        from . import loader as _l

        return getattr(_l, name)
    if name == "derive":  # the package, callable as derive(out, dest, as_=...)
        import importlib

        return importlib.import_module(".derive", __name__)
    if name in ("DeriveResult", "DeriveOptions"):
        from .derive import run as _d

        return getattr(_d, name)
    raise AttributeError(name)
