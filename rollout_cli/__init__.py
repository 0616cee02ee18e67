"""rollout-cli: turn RL rollout sample dumps (slime `.pt`, JSONL, Parquet) into sharded
train-data Parquet, read it back (`open_output`, no torch needed), and load it onto the GPU
(`open_dataset`).

The public API is `rollout_cli.__all__` (the command functions, their results and options, the
errors) and `rollout_cli.loader.__all__`; every other module is internal (docs/api.md)."""
from __future__ import annotations

from .core.versions import __version__

from .api.public import PUBLIC as _WHERE  # name -> the module defining it, loaded on first use

__all__ = ["__version__", *_WHERE]


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'rollout_cli' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
