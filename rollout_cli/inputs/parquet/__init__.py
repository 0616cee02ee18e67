"""Parquet: one row per sample, read column-wise by row group (reader.py); a file is cut into
ranges of whole row groups for several workers (parts.py). A shard of a rollout-cli output is
Parquet too, and is told apart by its schema metadata."""
from ..format import Format

FORMAT = Format(
    name="parquet",
    reader="rollout_cli.inputs.parquet.reader:read",
    extensions=(".parquet",),
    splitter="rollout_cli.inputs.parquet.parts:split",
    step_field="rollout_cli.inputs.parquet.reader:peek_step_value",
    output_shard="rollout_cli.inputs.parquet.parts:is_output_shard",
    preload=("rollout_cli.inputs.parquet.reader",),
    whole="rollout_cli.inputs.completeness:parquet_missing",
    version_lag="rollout_cli.inputs.slime_pt.versions:versions_behind",  # slime's weight_versions
)
