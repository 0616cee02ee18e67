"""The local engines: inline and the fork-server process pool."""
from __future__ import annotations

import os
import sys

import pytest

from rollout_cli.engines.local import InlineEngine, PoolEngine, start_early


def _array_then_modules() -> tuple[list[int], bool]:
    import pyarrow as pa

    values = pa.array([1, 2, 3]).to_pylist()  # pa.array looks for pandas types
    return values, "pandas" in sys.modules


def _import_pandas() -> str:
    try:
        import pandas  # noqa: F401
    except ImportError as e:
        return f"refused: {e}"
    return "imported"


def _pid() -> int:
    return os.getpid()


def _boom() -> None:
    raise ValueError("bad input")


def test_pool_workers_never_import_pandas():
    pytest.importorskip("pandas")  # only meaningful where pandas is installed
    engine = PoolEngine(2)
    try:
        h = engine.submit(_array_then_modules)
        values, has_pandas = engine.result(engine.wait([h])[0])
        assert values == [1, 2, 3]
        assert has_pandas is False
        assert engine.result(engine.submit(_import_pandas)).startswith("refused")
    finally:
        engine.shutdown()


def test_pool_gives_each_task_a_fresh_process_and_delivers_errors():
    start_early()  # harmless when the fork server is already up
    engine = PoolEngine(2)
    try:
        pids = {engine.result(engine.submit(_pid)) for _ in range(3)}
        assert len(pids) == 3 and os.getpid() not in pids
        with pytest.raises(ValueError, match="bad input"):
            engine.result(engine.submit(_boom))
    finally:
        engine.shutdown()


def test_inline_engine_runs_in_this_process():
    engine = InlineEngine()
    assert engine.result(engine.submit(_pid)) == os.getpid()
    h = engine.submit(_boom)
    with pytest.raises(ValueError, match="bad input"):
        engine.result(h)
