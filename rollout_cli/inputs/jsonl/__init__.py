"""JSONL: one slime `Sample.to_dict()` object per line, plain, gzip or zstd, or stdin. The
reader (reader.py) parses lines with simdjson where its result is certain (simd.py), else with
orjson; a file is cut into newline-aligned byte ranges for several workers."""
from ..format import Format

FORMAT = Format(
    name="jsonl",
    reader="rollout_cli.inputs.jsonl.reader:read",
    extensions=(".jsonl", ".jsonl.gz", ".jsonl.zst"),
    splitter="rollout_cli.inputs.jsonl.reader:split",
    step_field="rollout_cli.inputs.jsonl.reader:peek_step_value",
    preload=("rollout_cli.inputs.jsonl.reader", "rollout_cli.inputs.jsonl.simd"),
    cut_off="rollout_cli.inputs.completeness:line_cut",
    fingerprint_on_read="rollout_cli.inputs.jsonl.reader:hashes_whole",
    version_lag="rollout_cli.inputs.slime_pt.versions:versions_behind",  # slime's weight_versions
)
