"""The tool's version, and the output format's name and schema version, stamped on the
manifest and on every shard."""

__version__ = "0.2.0"

FORMAT = "rollout-cli/train-data"
SCHEMA_VERSION = 3  # of the output: the manifest and the shard schema (2: the export, schedule and loss-denominator
# columns; 3: remove_sample)
READ_SCHEMA_VERSIONS = (2, 3)  # the versions this tool reads (verify, inspect, export, the loader); it writes SCHEMA_VERSION
