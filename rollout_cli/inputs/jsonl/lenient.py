"""JSON lines as Python's `json` writes them: `NaN`, `Infinity` and `-Infinity` written literally.

Python's `json.dumps` writes a non-finite float that way unless told not to (`allow_nan=True` is
its default), so a framework that logs samples with it (open-instruct's `--save_traces` writes an
empty completion's log-prob as `NaN`) leaves lines that orjson and simdjson refuse. `loads` is
orjson's `loads` for every other line; only a line orjson refuses, and that holds one of those
words, is parsed again with the standard library, and kept only when a constant was met in it
and every number fits orjson's range: otherwise orjson's error stands, so a line that is
invalid for any other reason is worded as before. What a non-finite value then means is for the
field's validation to say (a non-finite log-prob stays invalid, named as a value of its field).
The fast paths are untouched: a clean line never reaches the fallback."""
from __future__ import annotations

import json

import orjson

_WORDS = (b"NaN", b"Infinity")
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1  # orjson's integer range
_INF = float("inf")
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Refused(ValueError):
    pass


def _parse(data: bytes) -> object:
    met = []

    def constant(word: str) -> float:
        met.append(word)
        return _CONSTANTS[word]

    def integer(text: str) -> int:
        v = int(text)
        if not _INT_MIN <= v <= _UINT_MAX:
            raise _Refused(text)
        return v

    def number(text: str) -> float:
        v = float(text)
        if v in (_INF, -_INF):  # a finite literal out of range: orjson refuses it
            raise _Refused(text)
        return v

    value = json.loads(data, parse_constant=constant, parse_int=integer, parse_float=number)
    if not met:
        raise _Refused("no constant")
    return value


def fallback(data) -> object:
    """The value of a line orjson refused: parsed by the standard library when it holds one of
    the constant words and that parse is one orjson would give but for them; otherwise
    orjson's own error is raised (orjson.JSONDecodeError)."""
    raw = bytes(data)
    if any(w in raw for w in _WORDS):
        try:
            return _parse(raw)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            pass
    return orjson.loads(raw)


def loads(data) -> object:
    """The JSON value of `data` (bytes, bytearray or memoryview), NaN/Infinity/-Infinity read
    as floats; raises orjson.JSONDecodeError as orjson.loads does otherwise."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return fallback(data)
