"""The tool's version, and the output format's name and schema version, stamped on the
manifest and on every shard."""

__version__ = "0.2.0"

FORMAT = "rollout-cli/train-data"
SCHEMA_VERSION = 6  # of the output: the manifest and the shard schema (2: the export, schedule and loss-denominator
# columns; 3: remove_sample; 4: weight_versions, and reward/raw_reward/selected_reward null where not recorded;
# 5: token_exact; 6: the dataset card README.md at OUT's root, core/layout.py)
READ_SCHEMA_VERSIONS = (2, 3, 4, 5, 6)  # the versions this tool reads (verify, inspect, export, the loader); it writes SCHEMA_VERSION
