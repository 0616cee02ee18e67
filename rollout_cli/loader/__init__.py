"""The trainer side: open a converted output through its manifest, memory-map a shard's
Arrow IPC copy and hand out packed batches (flat tokens and cu_seqlens) or slime's train_data."""
