"""The root `rollout-cli` command: the version flag and every command, registered here.

Each command's module is imported when that command runs (or a help text lists it), so that
`rollout-cli convert` builds and imports only `convert` (the seven commands' modules and their
options cost a run 25 ms more, before any work starts), and `--help` never imports torch:
heavy modules (pyarrow, numpy, torch, rich) are imported inside the commands.
"""
from __future__ import annotations

import functools
import importlib
from typing import Annotated

import typer

from .common import JsonUsageErrors
from .helpfmt import CONTEXT_SETTINGS, FittedCommand, FittedGroup

# name -> (module of rollout_cli.cli, function), in the order the help lists them
COMMANDS = {
    "convert": ("convert", "convert"),
    "inspect": ("inspect", "inspect_cmd"),
    "verify": ("verify", "verify"),
    "report": ("report", "report_cmd"),
    "export": ("export", "export_cmd"),
    "audit": ("audit", "audit_cmd"),
    "derive": ("derive", "derive_cmd"),
}


@functools.lru_cache(maxsize=None)
def command(name: str):
    """The click command of `name` (a key of COMMANDS), built from its function by typer."""
    module, function = COMMANDS[name]
    one = typer.Typer(add_completion=False, rich_markup_mode=None)
    one.command(name, cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(
        getattr(importlib.import_module(f"{__package__}.{module}"), function))
    return typer.main.get_command(one)

class RootGroup(JsonUsageErrors, FittedGroup):
    """The root command: help laid out to fit, usage errors as JSON under --json, the commands
    of COMMANDS built when asked for."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name: str):
        return command(cmd_name) if cmd_name in COMMANDS else None


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
