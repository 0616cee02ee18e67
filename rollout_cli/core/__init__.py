"""Foundation shared by every stage: error types and exit codes, the output contract (the
train-row schema, its version, and `layout`: every path inside OUT), the conversion options and their value sets, filesystem access (local paths and
pyarrow URIs, durable writes), checksums and the usable core count. Imports nothing else of
the package."""
