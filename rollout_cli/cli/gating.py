"""The gates of `inspect` and `audit` (--fail-on, --checks, --junit-xml), around the command's
library call: planned before any input is read (a bad expression or file exits 2 at once),
evaluated on the result (`checks` in --json), printed one line per check, written as JUnit XML,
and exit 7 when one fails, unless the command's own failure code comes first."""
from __future__ import annotations

from typing import Optional

import typer

from ..core.errors import ExitCode, UsageError
from .common import run_command


def plan(command: str, fail_on: Optional[list[str]], checks: Optional[str], junit_xml: Optional[str], as_json: bool,
         verbose: bool, *, excluded_by: Optional[str] = None):
    """The command's gates.Plan; None when no gate option was given. `excluded_by`: an option of
    the command that gives no result to gate (inspect's --show), a usage error with them."""
    if not fail_on and checks is None and junit_xml is None:
        return None

    def work():
        if excluded_by is not None:
            raise UsageError(f"--fail-on, --checks and --junit-xml gate the summary: not with {excluded_by}")
        from ..gates import plan as gate_plan

        return gate_plan(command, list(fail_on or []), checks)

    return run_command(work, as_json, verbose)


def apply(gates, result, fail_on: Optional[list[str]], checks: Optional[str], junit_xml: Optional[str], as_json: bool,
          verbose: bool) -> tuple:
    """`rollout_cli.check_gates` on the command's result: (the result with `checks` and the
    skipped entries' notes in `summary.notes`, its checks); the JUnit report written. The
    result as it was and [] without a plan."""
    if gates is None:
        return result, []

    def work():
        from ..api.commands import check_gates

        return check_gates(result, fail_on, checks, junit_xml=junit_xml)

    gated = run_command(work, as_json, verbose)
    return gated, list(gated.checks)


def print_lines(checks: list[dict], brief: bool = False) -> None:
    """One line per check, the last lines of the human output (`brief`: verdict, worst value
    and its step only, for -q)."""
    if not checks:
        return
    from ..gates import brief as brief_line, line

    for c in checks:
        print(brief_line(c) if brief else line(c))


def exit_if_failed(checks: list[dict]) -> None:
    """Exit 7 when a check failed (call it after the command's own failure codes)."""
    if any(not c["passed"] for c in checks):
        raise typer.Exit(int(ExitCode.CHECKS_FAILED))
