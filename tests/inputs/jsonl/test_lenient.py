"""Tests of rollout_cli.inputs.jsonl.lenient: NaN, Infinity and -Infinity as Python's json writes
them, read only where orjson refuses a line for them; any other invalid line keeps orjson's error."""
from __future__ import annotations

import json
import math

import orjson
import pytest

from rollout_cli.inputs.jsonl import lenient


def test_reads_the_constants_pythons_json_writes():
    line = json.dumps({"lp": [-0.5, float("nan"), float("inf"), float("-inf")], "n": 3}).encode()
    assert b"NaN" in line and b"-Infinity" in line
    got = lenient.loads(line)
    assert got["n"] == 3 and got["lp"][0] == -0.5 and math.isnan(got["lp"][1])
    assert got["lp"][2:] == [math.inf, -math.inf]
    assert lenient.loads(memoryview(b'[NaN]'))[0] != lenient.loads(b'[NaN]')[0]  # a float nan, from a view too


@pytest.mark.parametrize("line", [
    b'{"a": NaN',  # cut off
    b'{"a": "NaN"',  # the word in a string, the line invalid for another reason
    b'{"a": 1e999, "b": NaN}',  # a number orjson refuses as out of range
    b'{"a": 99999999999999999999999, "b": NaN}',  # an integer out of orjson's range
    b'{"a": 1} NaN',  # content after the value
    b'{"a": nan}',  # not the word Python writes
])
def test_any_other_fault_keeps_orjsons_error(line):
    with pytest.raises(orjson.JSONDecodeError) as got:
        lenient.loads(line)
    with pytest.raises(orjson.JSONDecodeError) as want:
        orjson.loads(line)
    assert str(got.value) == str(want.value)


def test_a_clean_line_never_takes_the_slow_path(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("parsed twice")

    monkeypatch.setattr(lenient.json, "loads", refuse)
    assert lenient.loads(b'{"a": [1, 2.5], "s": "NaN Infinity"}') == {"a": [1, 2.5], "s": "NaN Infinity"}
    with pytest.raises(orjson.JSONDecodeError):  # invalid, and no constant word in it: orjson's error at once
        lenient.loads(b'{"a": [1, 2')
