"""Stage 6, write: Parquet and Arrow IPC shards, staging and the journaled commit, and the
manifest that marks an output complete."""
