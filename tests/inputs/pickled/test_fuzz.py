"""The restricted unpickler under fuzzing (bounded here; bench/fuzz_pickles.py runs a million cases):
whatever the bytes, a load gives a value that can be read through (every array's bytes, every
object item) or raises PickleFormatError / UnsafePickleError (exit 3 from every reader); never
another exception, never a signal (which would end this test run)."""
from __future__ import annotations

import functools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pickle_fuzz import (GLOBALS, PLAIN_OPS, STOP, WORDS, mutated_case, op_bytes, op_global, op_int, op_str, run_case,
                         seeds)

FUZZ = settings(max_examples=800, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

opcode = st.one_of(
    st.sampled_from(GLOBALS).map(op_global),
    st.sampled_from(WORDS).map(op_str),
    st.text(max_size=6).map(op_str),
    st.one_of(st.integers(-3, 300), st.sampled_from([2**31, 2**40, 2**63, 2**64])).map(op_int),
    st.binary(max_size=24).map(op_bytes),
    st.integers(0, 15).map(lambda i: b"q" + bytes([i])),  # BINPUT
    st.integers(0, 15).map(lambda i: b"h" + bytes([i])),  # BINGET
    st.sampled_from([op for op, _ in PLAIN_OPS]),
)


@FUZZ
@given(st.sampled_from([2, 3, 4, 5]), st.lists(opcode, max_size=40))
def test_opcode_programs(protocol, ops):
    run_case(b"\x80" + bytes([protocol]) + b"".join(ops) + STOP, False)


@functools.lru_cache(maxsize=1)
def _seeds():
    return seeds()


def test_seeds_load_as_values():
    got = [(name, run_case(data, archive)) for name, data, archive in _seeds()]
    assert {r for _, r in got} == {"value"}, [n for n, r in got if r != "value"]
    assert {"slime-pt", "verl", "roll", "skyrl"} <= {n for n, _ in got}


@FUZZ
@given(st.integers(0, 10**6), st.randoms(use_true_random=False))
def test_mutated_framework_pickles(which, rng: random.Random):
    pool = _seeds()
    data, archive = mutated_case(pool[which % len(pool)], rng)
    run_case(data, archive)
