"""cli/helpfmt: help at 80 columns whatever the terminal, every option name whole (click's
formatter wraps the help text, never the name), options grouped by their panel."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from typer.testing import CliRunner

from rollout_cli.cli.app import app as rollout_app
from rollout_cli.cli.helpfmt import CONTEXT_SETTINGS, FittedCommand, FittedGroup

NAME = "--microbatch-group-size-per-vp-stage"


def _app() -> typer.Typer:
    app = typer.Typer(cls=FittedGroup, add_completion=False, rich_markup_mode=None, context_settings=CONTEXT_SETTINGS)

    def cmd(x: Annotated[Optional[int], typer.Option(NAME, metavar="N", rich_help_panel="Schedule",
                                                     help="vpp > 1: align to dp x N, " * 6)] = None,
            y: Annotated[int, typer.Option("--y", help="A plain option.")] = 0):
        """A command."""

    app.command("cmd", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(cmd)
    app.command("other", cls=FittedCommand, context_settings=CONTEXT_SETTINGS)(cmd)
    return app


def test_a_long_option_name_stays_whole_at_80_columns_on_any_terminal():
    for columns in ("60", "80", "300"):
        out = CliRunner().invoke(_app(), ["cmd", "--help"], env={"COLUMNS": columns}).output
        assert NAME in out and "…" not in out
        assert max(len(line) for line in out.splitlines()) <= 80, columns


def test_options_are_grouped_by_panel():
    out = CliRunner().invoke(_app(), ["cmd", "--help"]).output
    lines = out.splitlines()
    assert lines.index("Options:") < lines.index("Schedule:")
    assert out.index("--y") < out.index("Schedule:") < out.index(NAME)


def test_every_command_of_the_cli_fits():
    for args in ([], ["convert"], ["inspect"], ["verify"], ["report"], ["export"], ["audit"]):
        out = CliRunner().invoke(rollout_app, [*args, "--help"], env={"COLUMNS": "300"}).output
        assert out.startswith("Usage:") and max(len(line) for line in out.splitlines()) <= 80, args
