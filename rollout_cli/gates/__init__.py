"""`gates`: thresholds on the figures of `inspect` and `audit`, for CI (`--fail-on`, `--checks`,
`--junit-xml`). One job per module: `figures` (the names a command has, generated from the code
that computes them, and how each is read from its result), `expressions` (`NAME OP NUMBER`),
`checkfile` (the TOML file), `api` (plan, evaluate, the human lines) and `junit` (the report)."""
from .api import Plan, brief, evaluate, line, plan
from .figures import COMMANDS, catalogue, names_help
from .junit import render as junit_xml, write as write_junit

__all__ = ["COMMANDS", "Plan", "brief", "catalogue", "evaluate", "junit_xml", "line", "names_help", "plan", "write_junit"]
