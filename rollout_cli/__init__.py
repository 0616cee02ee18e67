"""rollout-cli: turn RL rollout sample dumps (slime `.pt`, JSONL, Parquet) into sharded
train-data Parquet, read it back (`open_output`, no torch needed), and load it onto the GPU
(`open_dataset`).

The public API is `rollout_cli.__all__` (the command functions, their results and options, the
errors) and `rollout_cli.loader.__all__`; every other module is internal (docs/api.md)."""
from __future__ import annotations

from .core.versions import __version__

# name -> the module that defines it; loaded on first use, so `import rollout_cli` stays light
# (pyarrow loads with the first command or output opened, torch only with the loader and export)
_WHERE = {
    **dict.fromkeys(("convert", "inspect", "verify", "audit", "report", "export", "derive", "check_gates"),
                    "api.commands"),
    **dict.fromkeys(("ConvertResult", "InspectResult", "RolloutResult", "VerifyResult", "AuditResult",
                     "ReportResult", "ExportResult"), "api.results"),
    "ConvertOptions": "core.options",
    **dict.fromkeys(("DeriveOptions",), "derivation.options"),
    **dict.fromkeys(("DeriveResult", "DerivedFile"), "derivation.run"),
    **dict.fromkeys(("open_output", "Output"), "output.model"),  # the torch-free model of an output
    **dict.fromkeys(("open_dataset", "PackedBatch", "RankDataset"), "loader"),  # its torch face
    **dict.fromkeys(("ExitCode", "RolloutCliError", "UsageError", "InvalidInputError", "IntegrityError",
                     "ManifestError", "OutputExistsError", "OutputError", "OutputBusyError",
                     "InputUnavailableError"), "errors"),
}

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
