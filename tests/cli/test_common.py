"""cli/common.py: how every command turns the library's errors into the documented exit codes.
A known error is one line on stderr (its further problems below it) and its own code; under
--json also one JSON object on stdout; anything else is ours: exit 1, "internal error"; Ctrl-C
is 130; --json counts only before `--`."""
from __future__ import annotations

import json

import pytest
import typer

from rollout_cli.cli.common import run_command, wants_json
from rollout_cli.core.errors import (ExitCode, InputUnavailableError, IntegrityError, InvalidInputError, Location,
                                     OutputBusyError, OutputError, OutputExistsError, Problem, UsageError)


def _raise(e):
    def fn():
        raise e
    return fn


@pytest.mark.parametrize("err, code", [
    (UsageError("bad flag"), 2), (InvalidInputError("bad line"), 3), (IntegrityError("bad digest"), 4),
    (OutputExistsError("there"), 5), (OutputError("full"), 6), (OutputBusyError("locked"), 8),
    (InputUnavailableError("gone"), 9),
])
def test_a_known_error_exits_with_its_code(err, code, capsys):
    with pytest.raises(typer.Exit) as e:
        run_command(_raise(err), as_json=False, verbose=False)
    assert e.value.exit_code == code == int(err.exit_code)
    out, errout = capsys.readouterr()
    assert out == "" and errout == f"error: {err}\n"


def test_json_gives_one_object_on_stdout_and_further_problems_on_stderr(capsys):
    probs = [Problem(Location("a.jsonl", "line", n), "reward", "expected a number", "reward.type") for n in (2, 7)]
    err = InvalidInputError("2 invalid samples", problems=probs)
    with pytest.raises(typer.Exit) as e:
        run_command(_raise(err), as_json=True, verbose=False)
    assert e.value.exit_code == ExitCode.INVALID_INPUT
    out, errout = capsys.readouterr()
    obj = json.loads(out)
    assert (obj["error"], obj["exit_code"], len(obj["problems"])) == ("InvalidInputError", 3, 2)
    assert errout.splitlines() == ["error: 2 invalid samples", f"  {probs[1]}"]


def test_an_unexpected_failure_is_internal(capsys):
    with pytest.raises(typer.Exit) as e:
        run_command(_raise(KeyError("x")), as_json=True, verbose=False)
    assert e.value.exit_code == 1
    out, errout = capsys.readouterr()
    assert json.loads(out) == {"error": "InternalError", "message": "KeyError: 'x'", "exit_code": 1}
    assert "internal error: KeyError" in errout and "Traceback" not in errout
    with pytest.raises(typer.Exit):
        run_command(_raise(KeyError("x")), as_json=False, verbose=True)
    assert "Traceback" in capsys.readouterr().err


def test_interrupt_and_a_commands_own_exit():
    with pytest.raises(typer.Exit) as e:
        run_command(_raise(KeyboardInterrupt()), as_json=False, verbose=False)
    assert e.value.exit_code == 130
    with pytest.raises(typer.Exit) as e:
        run_command(_raise(typer.Exit(7)), as_json=False, verbose=False)
    assert e.value.exit_code == 7
    assert run_command(lambda: 41 + 1, as_json=False, verbose=False) == 42


def test_json_counts_before_the_double_dash_only():
    assert wants_json(["convert", "a", "b", "--json"])
    assert not wants_json(["convert", "--", "--json"])
    assert not wants_json(["convert", "--jsonl"])
