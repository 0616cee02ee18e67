"""Help at 80 columns, through click's own formatter (the app sets `rich_markup_mode=None` and
`max_content_width` / `terminal_width` 80): click writes each option's name whole and wraps
its help text. The options stay grouped as typer's rich layout groups them: each option's
`rich_help_panel` is a section of its own (arguments first, then the plain "Options", then
the panels in the order they first appear)."""
from __future__ import annotations

import typer.core

WIDTH = 80
# the context settings of every command: the help's width, whatever the terminal's
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": WIDTH, "terminal_width": WIDTH}


def _sections(command, ctx, formatter) -> None:
    """The command's arguments, then its options by panel, each panel one help section."""
    args: list[tuple[str, str]] = []
    panels: dict[str, list[tuple[str, str]]] = {"Options": []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if param.param_type_name == "argument":
            args.append(record)
        else:
            panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args)
    for name, rows in panels.items():
        if rows:
            with formatter.section(name):
                formatter.write_dl(rows)


class FittedCommand(typer.core.TyperCommand):
    """A command whose help sections follow its options' panels."""

    def format_options(self, ctx, formatter):
        _sections(self, ctx, formatter)


class FittedGroup(typer.core.TyperGroup):
    """The root command, laid out the same way, then its commands."""

    def format_options(self, ctx, formatter):
        _sections(self, ctx, formatter)
        self.format_commands(ctx, formatter)
