"""cli/helpfmt: a help cell is measured by its text, so a long option name beside a short help
stays whole at 80 columns (typer's own layout cuts it)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from typer.testing import CliRunner

from rollout_cli.cli.helpfmt import FittedCommand, FittedGroup

NAME = "--microbatch-group-size-per-vp-stage"


def _app(cls) -> typer.Typer:
    app = typer.Typer(cls=FittedGroup if cls is FittedCommand else None, add_completion=False)

    def cmd(x: Annotated[Optional[int], typer.Option(NAME, metavar="N", help="vpp > 1: align to dp x N.")] = None):
        """A command."""

    app.command("cmd", cls=cls)(cmd)
    app.command("other", cls=cls)(cmd)
    return app


def _help(app) -> str:
    return CliRunner().invoke(app, ["cmd", "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"}, terminal_width=80).output


def test_a_long_option_name_stays_whole():
    out = _help(_app(FittedCommand))
    assert NAME in out and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_without_it_typer_cuts_the_name():
    """What the adapter is for (in a fresh process: the adapter, once installed, stays). If this
    starts failing, typer lays such names out whole by itself and helpfmt can go."""
    import subprocess
    import sys

    code = (
        "import typer\nfrom typing import Annotated, Optional\n"
        "app = typer.Typer(add_completion=False)\n"
        f"def cmd(x: Annotated[Optional[int], typer.Option({NAME!r}, metavar='N', help='vpp > 1: align to dp x N.')] = None):\n"
        "    pass\n"
        "app.command('cmd')(cmd)\napp.command('other')(cmd)\napp()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, "cmd", "--help"], capture_output=True, text=True,
                         env={"COLUMNS": "80", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}).stdout
    assert "Usage" in out and NAME not in out and "…" in out
