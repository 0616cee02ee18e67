"""The public names of `rollout_cli` and the module defining each, by kind (one table: the package
root loads each name from it on first use, docs/api.md is generated from it)."""
from __future__ import annotations

FUNCTIONS = {
    **dict.fromkeys(("convert", "inspect", "verify", "audit", "report", "export", "derive", "check_gates"),
                    "api.commands"),
    "open_output": "output.model",  # the torch-free model of an output
    "open_dataset": "loader",  # its torch face
}
RESULTS = {
    **dict.fromkeys(("ConvertResult", "InspectResult", "RolloutResult", "VerifyResult", "AuditResult",
                     "ReportResult", "ExportResult"), "api.results"),
    **dict.fromkeys(("DeriveResult", "DerivedFile"), "derivation.run"),
    "Output": "output.model",
    **dict.fromkeys(("PackedBatch", "RankDataset"), "loader"),
}
OPTIONS = {"ConvertOptions": "core.options", "DeriveOptions": "derivation.options"}
ERRORS = dict.fromkeys(("ExitCode", "RolloutCliError", "UsageError", "InvalidInputError", "IntegrityError",
                        "ManifestError", "OutputExistsError", "OutputError", "OutputBusyError",
                        "InputUnavailableError"), "errors")
PUBLIC = {**FUNCTIONS, **RESULTS, **OPTIONS, **ERRORS}
