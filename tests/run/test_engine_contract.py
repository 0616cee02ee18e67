"""What an engine is told and what it may know: it runs the functions it is handed, with the
labels and the modules the converting process gives it, and imports nothing of the pipeline."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import rollout_cli.run.engines as engines_pkg
from rollout_cli.run.engines.local import InlineEngine, PoolEngine
from rollout_cli.run.preload import WORKER_MODULES

ENGINES = Path(engines_pkg.__file__).parent


def _imported(path: Path) -> set[str]:
    """Every module a file imports, relative imports resolved within rollout_cli.run.engines."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ["rollout_cli", "run", "engines"][: 3 - node.level + 1] if node.level else []
            found.add(".".join(base + ([node.module] if node.module else [])))
    return found


@pytest.mark.parametrize("name", sorted(p.name for p in ENGINES.glob("*.py")))
def test_engines_import_nothing_of_the_pipeline(name):
    ours = {m for m in _imported(ENGINES / name) if m.startswith("rollout_cli")}
    assert all(m == "rollout_cli" or m.startswith(("rollout_cli.core", "rollout_cli.run.engines")) for m in ours), ours


@pytest.mark.parametrize("name", sorted(p.name for p in ENGINES.glob("*.py")))
def test_engines_name_no_stage_function_or_pipeline_module(name):
    code = (ENGINES / name).read_text()
    names = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    strings = {n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for stage in ("parse_part", "finish_unit", "file_fingerprint", "_fingerprint"):
        assert stage not in names and stage not in strings
    assert not any(s in strings for s in WORKER_MODULES)


def _pid() -> int:
    return os.getpid()


def _boom() -> None:
    raise ValueError("bad input")


def test_a_task_submitted_here_runs_in_this_process():
    engine = PoolEngine(2, WORKER_MODULES)
    try:
        assert engine.result(engine.submit(_pid, here=True)) == os.getpid()
        assert engine.result(engine.submit(_pid)) != os.getpid()
        with pytest.raises(ValueError, match="bad input"):
            engine.result(engine.submit(_boom, here=True))
    finally:
        engine.shutdown()
    inline = InlineEngine()
    assert inline.result(inline.submit(_pid, label="x", here=True)) == os.getpid()
