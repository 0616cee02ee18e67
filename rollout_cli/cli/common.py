"""What every command shares: running the library call and turning its errors into the
documented exit codes (0 ok, 1 internal, 2 usage, 3 invalid input, 4 integrity, 5 output
exists, 6 not writable; 7, a failed gate, is cli/gating.py's; 130 on Ctrl-C)."""
from __future__ import annotations

import json
import sys
from typing import Callable, NoReturn, TypeVar

import typer

from ..core.errors import ExitCode, RolloutCliError
from .render import err_console

T = TypeVar("T")


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
