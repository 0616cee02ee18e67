"""JSON lines parsed with simdjson: a sample's long numeric lists (tokens, masks, log-probs)
come out as numpy arrays without ever becoming Python numbers, which is most of what parsing
a sample with a general-purpose JSON library costs.

The result must be what `orjson.loads` gives for the same line, with those lists as arrays of
the same values. Whenever that is not certain, `SampleParser.parse` returns None and the
caller parses the line with orjson instead (which also words any error)."""
from __future__ import annotations

import numpy as np
import simdjson

# field -> simdjson buffer type: 'i' signed 64-bit integers, 'd' doubles (integers widen)
from ...core.sample_fields import NUMERIC_LISTS

_DTYPES = {"i": np.int64, "d": np.float64}
_ESCAPED_BRACKET = b"\\u005"  # the start of "\u005b"/"\u005B", a '[' written as an escape


def _lists(v) -> tuple[int, int]:
    """(lists, '[' characters in strings and keys) in a plain value."""
    if isinstance(v, str):
        return 0, v.count("[")
    lists = chars = 0
    if isinstance(v, list):
        lists = 1
        items = v
    elif isinstance(v, dict):
        chars = sum(k.count("[") for k in v)
        items = v.values()
    else:
        return 0, 0
    for x in items:
        if not isinstance(x, (int, float)) and x is not None:
            a, b = _lists(x)
            lists += a
            chars += b
    return lists, chars


def _brackets(block: bytes | bytearray, start: int, end: int, expected: int) -> int:
    """The '[' in `block[start:end]`, counted up to `expected + 1`. A line holds a handful, so
    hopping from one to the next with `find` (memchr) is 10 GB/s where `bytes.count`'s byte loop
    is 1.9 (a 48 MB line): a 16-step JSONL run, 9 alternating runs, 3.08 -> 2.94 CPU-s,
    1.74 -> 1.69 s."""
    find = block.find
    n = 0
    at = find(b"[", start, end)
    while at >= 0 and n <= expected:
        n += 1
        at = find(b"[", at + 1, end)
    return n


class SampleParser:
    """Parses one JSON object per call; keep one per reader (it reuses its buffers).

    `lists`: field -> buffer type of the numeric lists to hand over as arrays (slime's fields
    by default). `wrapped`: fields of `lists` written as a one-element list of the numeric
    list (``"token_ids": [[1, 2]]``, as a batch sliced to one row is); such a field comes out
    as the inner list's array."""

    def __init__(self, lists: dict[str, str] | None = None, wrapped: frozenset[str] = frozenset()) -> None:
        self._parser = simdjson.Parser()
        self._lists = NUMERIC_LISTS if lists is None else lists
        self._wrapped = wrapped

    def parse(self, block: bytes | bytearray, start: int, end: int) -> dict | None:
        """The object on `block[start:end]`, or None when orjson must decide."""
        try:
            return self._parse(block, start, end)
        except Exception:  # invalid JSON, a list of mixed types, a number out of range...
            return None

    def _parse(self, block: bytes | bytearray, start: int, end: int) -> dict | None:
        doc = self._parser.parse(memoryview(block)[start:end])
        if not isinstance(doc, simdjson.Object):
            return None
        keys = list(doc.keys())
        joined = "".join(keys)
        if len(set(keys)) != len(keys) or "\0" in joined:
            return None  # a key twice (orjson keeps the last value), or one lookups cannot take
        rec = {}
        v = None
        lists = 0  # lists met
        chars = joined.count("[")  # '[' characters met in keys and strings
        numeric, wrapped = self._lists, self._wrapped
        for k in keys:
            v = doc[k]
            kind = numeric.get(k)
            if kind is not None:
                if k in wrapped:
                    inner = v[0] if isinstance(v, simdjson.Array) and len(v) == 1 else None
                    if isinstance(inner, simdjson.Array):
                        rec[k] = np.frombuffer(inner.as_buffer(of_type=kind), dtype=_DTYPES[kind])
                        del inner
                        lists += 2
                        continue
                    del inner  # not the wrapped shape: kept as parsed, for the reader to word
                elif isinstance(v, simdjson.Array):
                    # as_buffer flattens nested lists: the bracket count below rules them out
                    rec[k] = np.frombuffer(v.as_buffer(of_type=kind), dtype=_DTYPES[kind])
                    lists += 1
                    continue
            if isinstance(v, simdjson.Object):
                v = v.as_dict()
            elif isinstance(v, simdjson.Array):
                v = v.as_list()
            rec[k] = v
            if v is not None and not isinstance(v, (int, float)):
                a, b = _lists(v)
                lists += a
                chars += b
        del doc, v  # no simdjson proxy may outlive the call: the parser is reused
        # every '[' in the line opens a list or is a character of a string; when the count is
        # that of the lists and characters met, the numeric lists held no nested list. A '['
        # written as an escape is met but not counted, so if the strings hold any '[' at all,
        # the line must have none written that way.
        if _brackets(block, start, end, lists + chars) != lists + chars:
            return None
        if chars and block.find(_ESCAPED_BRACKET, start, end) >= 0:
            return None
        return rec
