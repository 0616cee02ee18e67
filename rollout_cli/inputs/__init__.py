"""Stage 1, read: find the input files, tell their format, step and split (`discover`), and
read each through the reader its format names in the registry (`registry`): JSONL with its
simdjson fast path, Parquet, and slime's torch `.pt` dumps through a restricted unpickler."""
