"""Stage 6, write: Parquet and Arrow IPC shards (encoded on several
threads and stitched), staging and the journaled commit, and the manifest that marks an
output complete."""
