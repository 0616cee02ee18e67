"""Foundation shared by every stage: error types and exit codes, the train-row schema and
its version, the conversion options and their value sets, filesystem access (local paths and
pyarrow URIs, durable writes), checksums and the usable core count. Imports nothing else of
the package."""
