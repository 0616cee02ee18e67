"""The tool's version, and the output format's name and schema version, stamped on the
manifest and on every shard."""

__version__ = "0.2.0"

FORMAT = "rollout-cli/train-data"
# the schema version that keeps multimodal_train_inputs typed (core/tensors.py) and adds
# multimodal_train_input_id and images; the one number to change should another version come first
MULTIMODAL_TYPED_VERSION = 7
SCHEMA_VERSION = MULTIMODAL_TYPED_VERSION  # of the output: the manifest and the shard schema (2: the export, schedule
# and loss-denominator columns; 3: remove_sample; 4: weight_versions, and reward/raw_reward/selected_reward null where
# not recorded; 5: token_exact; 6: the dataset card README.md at OUT's root, core/layout.py;
# MULTIMODAL_TYPED_VERSION: multimodal_train_inputs typed, multimodal_train_input_id, images)
READ_SCHEMA_VERSIONS = tuple(range(2, SCHEMA_VERSION + 1))  # the versions this tool reads (verify, inspect, export, the loader); it writes SCHEMA_VERSION
