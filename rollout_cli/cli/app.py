"""The root `rollout-cli` command: the version flag and every command, registered here.

Heavy modules (pyarrow, numpy, torch, rich) are imported inside the commands, so that
`rollout-cli --help` stays fast and never imports torch.
"""
from __future__ import annotations

from typing import Annotated

import typer

from .audit import audit_cmd
from .common import JsonUsageErrors
from .convert import convert
from .helpfmt import CONTEXT_SETTINGS, FittedCommand, FittedGroup
from .derive import derive_cmd
from .export import export_cmd
from .inspect import inspect_cmd
from .report import report_cmd
from .verify import verify

class RootGroup(JsonUsageErrors, FittedGroup):
    """The root command: help laid out to fit, usage errors as JSON under --json."""


app = typer.Typer(
    cls=RootGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Convert RL rollout sample dumps (slime .pt, JSONL, Parquet) into sharded train-data Parquet.\n\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage, 3 invalid input, 4 integrity (audit: divergences), "
    "5 output exists, "
    "6 output not writable, "
    "7 a --fail-on gate failed, 8 output busy (another writer), 9 input unreadable (network, "
    "credentials, permission). Reference: docs/cli.md.",
    context_settings=CONTEXT_SETTINGS,
    rich_markup_mode=None,  # click's formatter: cli/helpfmt.py
)


def _version(value: bool) -> None:
    if value:
        from ..core.versions import __version__

        print(f"rollout-cli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Convert RL rollout sample dumps (slime .pt, JSONL, Parquet) into sharded train-data Parquet."""


app.command("convert", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(convert)
app.command("inspect", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(inspect_cmd)
app.command("verify", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(verify)
app.command("report", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(report_cmd)
app.command("export", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(export_cmd)
app.command("audit", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(audit_cmd)
app.command("derive", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(derive_cmd)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
