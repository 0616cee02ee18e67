"""Help that fits 80 columns with every option name whole.

typer renders each option's help as a rich `Columns`, which measures as wide as the terminal;
rich's table then narrows the widest columns in turn, the option names included, and at 80
columns cuts any name longer than about 32 characters (slime's
`--microbatch-group-size-per-vp-stage` has 36). Measuring the help cell by its text instead
lets the name column keep its natural width and the help text wrap. Installed when help is
first rendered, so other commands never import rich for it."""
from __future__ import annotations

import typer.core

_installed = False


class _ByText:
    """A help cell that rich measures by its words, not by the space it could fill."""

    def __init__(self, columns):
        self.columns = columns

    def __rich_console__(self, console, options):
        yield self.columns

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        parts = [Measurement.get(console, options, r) for r in self.columns.renderables]
        if not parts:
            return Measurement(1, 1)
        return Measurement(max(p.minimum for p in parts), sum(p.maximum for p in parts) + len(parts) - 1)


def _install() -> None:
    global _installed
    if _installed:
        return
    from typer import rich_utils

    original = rich_utils._get_parameter_help

    def measured(**kwargs):
        return _ByText(original(**kwargs))

    rich_utils._get_parameter_help = measured
    _installed = True


class FittedCommand(typer.core.TyperCommand):
    """A command whose --help is laid out as above."""

    def format_help(self, ctx, formatter):
        _install()
        return super().format_help(ctx, formatter)


class FittedGroup(typer.core.TyperGroup):
    """The root command, laid out the same way (its help must not depend on what ran first)."""

    def format_help(self, ctx, formatter):
        _install()
        return super().format_help(ctx, formatter)
