"""rollout_cli.errors (errors.py): the public error types are the ones the library raises, and
each one's exit code is the README's exit-code table's."""
from __future__ import annotations

import re
from pathlib import Path

import rollout_cli.core.errors as core
import rollout_cli.errors as errors
from rollout_cli.output.manifest import ManifestError

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_public_errors_are_the_raised_ones():
    for name in errors.__all__:
        obj = getattr(errors, name)
        assert obj is (ManifestError if name == "ManifestError" else getattr(core, name))
    assert issubclass(errors.ManifestError, errors.IntegrityError)


def test_each_exit_code_is_a_row_of_the_readme_table():
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", README.read_text(), re.M))
    documented = dict(re.findall(r"^\| (\d) \| (\w+)", errors.__doc__, re.M))
    for name in errors.__all__:
        if name == "ExitCode":
            continue
        code = int(getattr(errors, name).exit_code)
        assert str(code) in rows, f"{name}: exit {code} is not in README's table"
        assert name in errors.__doc__.split(f"| {code} |")[1].split("\n")[0], f"{name} is not on exit {code}'s row"
    assert set(documented) <= set(rows)
    assert {int(c) for c in rows} == {int(c) for c in errors.ExitCode}
