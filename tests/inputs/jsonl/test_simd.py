"""Tests of rollout_cli.inputs.jsonl.simd: the simdjson path gives what orjson gives, with the numeric
lists as arrays of the same values, or hands the line over (None)."""
from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_cli.inputs.jsonl.simd import NUMERIC_LISTS, SampleParser


def parse(line: bytes):
    block = b"xx\n" + line + b"\nyy"  # a line in the middle of a block, as the reader passes it
    return SampleParser().parse(block, 3, 3 + len(line))


def same(rec: dict, line: bytes) -> None:
    """`rec` is orjson's reading of `line`, the numeric lists as arrays of its values."""
    ref = orjson.loads(line)
    assert list(rec) == list(ref)
    for k, v in ref.items():
        got = rec[k]
        if isinstance(got, np.ndarray):
            assert k in NUMERIC_LISTS and isinstance(v, list)
            if NUMERIC_LISTS[k] == "i":
                assert got.dtype == np.int64 and got.tolist() == v
            else:  # what the orjson path makes of the list: the same doubles, bit for bit
                assert got.dtype == np.float64
                assert got.tobytes() == np.fromiter(v, dtype=np.float64, count=len(v)).tobytes()
        else:
            assert got == v and type(got) is type(v)


def test_a_sample_line():
    line = orjson.dumps({
        "group_index": 3, "index": 25, "rollout_id": None, "tokens": [1, 2, 151935], "response_length": 2,
        "reward": 0.5, "loss_mask": [1, 0], "rollout_log_probs": [-0.125, -1e-30], "status": "completed",
        "metadata": {"source": "gsm8k", "tool_calls": [{"name": "calc", "args": ["[1]", 2]}], "turns": 2},
        "prompt": "what is [3]?",
    })
    rec = parse(line)
    assert rec is not None
    assert isinstance(rec["tokens"], np.ndarray) and isinstance(rec["rollout_log_probs"], np.ndarray)
    same(rec, line)


@pytest.mark.parametrize("line", [
    b'{"tokens": [[1], [2]]}',  # nested, the flattened count equal to the length
    b'{"tokens": [1, [2]]}',
    b'{"tokens": [[1, 2], []]}',
    b'{"tokens": [[1], [2]], "prompt": "\\u005b"}',  # an escaped '[' must not hide a nested list
    b'{"tokens": [[1], [2]], "prompt": "\\u005B"}',
    b'{"tokens": [1.0, 2]}',  # not integers
    b'{"tokens": [1, true]}',
    b'{"tokens": [1, null]}',
    b'{"tokens": [1, "2"]}',
    b'{"tokens": [1, 99999999999999999999]}',
    b'{"rollout_log_probs": [0.5, true]}',
    b'{"rollout_log_probs": [0.5, {"a": 1}]}',
    b'{"tokens": [1], "tokens": [2]}',  # duplicate keys
    b'[1, 2]',
    b'"text"',
    b'{"tokens": [1, 2]',
    b'{"tokens": [1, 2]} trailing',
    b'{"tokens": [NaN]}',
    b'{"a": "\xff"}',  # not UTF-8
])
def test_hands_over_what_it_cannot_vouch_for(line):
    assert parse(line) is None


@pytest.mark.parametrize("line", [
    b'{}',
    b'{"tokens": []}',
    b'{"tokens": [-0, 0, 2147483648], "loss_mask": null, "rollout_log_probs": [1, -0.0, 5e-324, 1.7976931348623157e308]}',
    b'{"tokens": "not a list", "loss_mask": 7, "rollout_log_probs": {"a": [1]}}',
    b' {"tokens" : [ 1 , 2 ] , "x" : [ [ ] ] }\r',
    b'{"prompt": "a [ and a ] and \\"[\\" and \\\\", "tokens": [1]}',
    b'{"metadata": {"k": 1, "k": 2}, "tokens": [3]}',
    '{"prompt": "caf\\u00e9 \\ud83d\\ude00 \u00e9", "tokens": [4]}'.encode(),
])
def test_agrees_with_orjson(line):
    rec = parse(line)
    assert rec is not None
    same(rec, line)


def test_parser_is_reused_after_a_failure():
    p = SampleParser()
    good = b'{"tokens": [1, 2], "metadata": {"a": [1]}}'
    for line in (b'{"tokens": [1, 2.5], "metadata": {"a": [1]}}', good, b'{"tokens": [[1], [2]]}', good):
        rec = p.parse(line, 0, len(line))
        if line is good:
            same(rec, good)
        else:
            assert rec is None


def test_arrays_outlive_the_parser_reuse():
    p = SampleParser()
    first = p.parse(b'{"tokens": [7, 8, 9]}', 0, 21)
    p.parse(b'{"tokens": [1, 2, 3]}', 0, 21)
    assert first["tokens"].tolist() == [7, 8, 9]


_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False), st.text(alphabet=st.characters(), max_size=12),
    st.sampled_from(["[", "]", "[[", "a[b", "\\[", '"['])
)
_value = st.recursive(_scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=4), max_leaves=12)
_ints = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20)
_floats = st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**53), 2**53)), max_size=20)
_numeric = st.fixed_dictionaries({}, optional={
    "tokens": _ints | _value, "loss_mask": _ints, "rollout_log_probs": _floats | _value,
    "teacher_log_probs": _floats, "rollout_top_p_token_ids": st.lists(_ints, max_size=3) | _ints,
})


def _flat_typed(v, kind: str) -> bool:
    """A list the simdjson path must take: flat, of integers in int64 ('i') or of numbers ('d')."""
    if kind == "i":
        return all(type(x) is int and -(2**63) <= x < 2**63 for x in v)
    # simdjson reads an integer past int64 but within uint64 as such, and a double list widens it
    return all(type(x) is float or (type(x) is int and -(2**63) <= x < 2**64) for x in v)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(numeric=_numeric, rest=st.dictionaries(st.text(max_size=6), _value, max_size=5),
       ascii_only=st.booleans(), spaced=st.booleans())
def test_property_same_as_orjson_or_handed_over(numeric, rest, ascii_only, spaced):
    doc = {**rest, **numeric}
    line = json.dumps(doc, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":")).encode("utf-8", "surrogatepass")
    rec = parse(line)
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:  # e.g. a lone surrogate written as UTF-8
        assert rec is None
        return
    # json.dumps writes no '[' as an escape, so only a badly typed or nested list, or a key
    # holding a NUL character, is handed over
    takes = all(_flat_typed(v, NUMERIC_LISTS[k]) for k, v in doc.items() if k in NUMERIC_LISTS and isinstance(v, list)) \
        and not any("\0" in k for k in doc)
    assert (rec is not None) == takes
    if rec is not None:
        same(rec, line)


def test_typical_samples_are_not_handed_over():
    rng = np.random.default_rng(0)
    p = SampleParser()
    for i in range(50):
        n = int(rng.integers(1, 300))
        doc = {"group_index": i // 8, "index": i, "rollout_id": None, "tokens": rng.integers(0, 150000, n).tolist(),
               "response_length": n // 2, "reward": float(rng.random()), "loss_mask": [1] * (n // 2),
               "rollout_log_probs": rng.standard_normal(n // 2).astype(np.float32).astype(float).tolist(),
               "status": "completed", "metadata": {"source": "x", "tool_calls": [["a", 1]] if i % 2 else None}}
        line = orjson.dumps(doc)
        rec = p.parse(line, 0, len(line))
        assert rec is not None
        same(rec, line)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64).map(lambda b: b.replace(b"\0", b"[")), st.integers(0, 70), st.integers(0, 70),
       st.integers(0, 8))
def test_brackets_counts_up_to_one_past_what_is_expected(data, start, end, expected):
    from rollout_cli.inputs.jsonl.simd import _brackets

    true = data[start:end].count(b"[")
    assert _brackets(data, start, end, expected) == min(true, expected + 1)
    assert _brackets(bytearray(data), start, end, expected) == min(true, expected + 1)
