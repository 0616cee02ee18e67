"""Stage 6, write: Parquet and Arrow IPC shards, staging and the journaled commit, and the
manifest that marks an output complete; and the model every reader opens an output through
(model.py's open_output: typed steps and shards, a shard as an Arrow table, no torch)."""
