"""What every command shares: running the library call and turning its errors into the
documented exit codes (0 ok, 1 internal, 2 usage, 3 invalid input, 4 integrity, 5 output
exists, 6 not writable, 8 output busy, 9 input unreadable; 7, a failed gate, is
cli/gating.py's; 130 on Ctrl-C)."""
from __future__ import annotations

import json
import sys
from typing import Callable, NoReturn, TypeVar

import typer

if hasattr(typer, "TyperException"):  # typer 0.28 carries its own click, whose errors derive from this
    CommandLineError = typer.TyperException
else:  # pragma: no cover (earlier typer raises click's own)
    from click import ClickException as CommandLineError

from ..core.errors import ExitCode, RolloutCliError
from .render import err_console

T = TypeVar("T")
_JSON = "rollout_cli.json"  # Context.meta key: --json is on the command line


def wants_json(args) -> bool:
    """--json among the options of a command line (not after `--`)."""
    for a in args:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def is_usage_error(e: Exception) -> bool:
    """A mistake on the command line (click's UsageError and its kinds: exit code 2)."""
    return getattr(e, "exit_code", None) == int(ExitCode.USAGE)


def print_usage_error(e: CommandLineError) -> None:
    """The JSON object of a command-line mistake (unknown option, bad value, missing argument),
    on stdout as every other error's: the usage text goes to stderr as without --json."""
    print(json.dumps({"error": "UsageError", "message": e.format_message(), "exit_code": int(ExitCode.USAGE)}))
    sys.stdout.flush()


class JsonUsageErrors:
    """A click group mixin: under --json, a usage error that click finds while parsing the
    group's or a command's arguments is printed as the one JSON object as well (typer then
    prints its usage text to stderr and exits 2)."""

    def make_context(self, info_name, args, parent=None, **extra):
        as_json = wants_json(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except CommandLineError as e:
            if as_json and is_usage_error(e):
                print_usage_error(e)
            raise
        ctx.meta[_JSON] = as_json
        return ctx

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CommandLineError as e:
            if ctx.meta.get(_JSON) and is_usage_error(e):
                print_usage_error(e)
            raise


def report(e: RolloutCliError, as_json: bool) -> NoReturn:
    """Print a known error (one line, then its further problems) and exit with its code."""
    con = err_console()
    if con.is_terminal:
        con.print(f"[bold red]error[/]: {e}", highlight=False, markup=True, soft_wrap=True)
    else:
        print(f"error: {e}", file=sys.stderr)
    problems = getattr(e, "problems", None) or []
    for p in problems[1:]:
        print(f"  {p}", file=sys.stderr)
    if as_json:
        print(json.dumps(e.to_dict()))
    raise typer.Exit(int(e.exit_code))


def run_command(fn: Callable[[], T], as_json: bool, verbose: bool) -> T:
    """fn(), with a known error reported and exited with its code, and an unexpected one
    reported as internal (exit 1; the traceback with -v)."""
    try:
        return fn()
    except RolloutCliError as e:
        report(e, as_json)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130)
    except typer.Exit:
        raise
    except Exception as e:  # an unexpected failure is ours: say so, exit 1
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"internal error: {type(e).__name__}: {e} (rerun with -v for the traceback)", file=sys.stderr)
        if as_json:
            print(json.dumps({"error": "InternalError", "message": f"{type(e).__name__}: {e}", "exit_code": 1}))
        raise typer.Exit(int(ExitCode.INTERNAL))
