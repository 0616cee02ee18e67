"""The library's command functions and their typed results: `convert`, `inspect`, `verify`,
`audit`, `report`, `export` and `check_gates` (commands), each returning a frozen result whose
`to_dict()` is the command's `--json` object (results). The package root re-exports them lazily;
the CLI calls exactly these and renders their results."""
