"""The output format's name and schema version, stamped on the manifest and on every shard."""

FORMAT = "rollout-cli/train-data"
SCHEMA_VERSION = 2  # of the output: the manifest and the shard schema
