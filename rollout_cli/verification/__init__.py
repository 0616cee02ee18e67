"""`verify`: recompute the checksums a manifest records and check the schema and the
invariants of a converted output."""
