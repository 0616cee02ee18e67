"""The command line: one Typer module per command over the library API, shared option
groups, rendering of tables and JSON, and the mapping of errors to exit codes."""
