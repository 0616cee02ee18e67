"""rollout_cli.inspection (api): usage errors and unreadable inputs."""
from __future__ import annotations

import shutil

import pytest

from inspect_samples import DATA, do_convert
from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.inspection import inspect_paths, show_rollout


def test_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], "nope")
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], "rollout_id", sort="bogus")
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], "step", sort="rollout_mask_sum")
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], limit=-1)
    with pytest.raises(UsageError):
        inspect_paths([str(tmp_path / "missing")])
    with pytest.raises(UsageError):
        show_rollout([str(DATA / "jsonl")], "16")  # three steps: needs STEP:ID
    with pytest.raises(UsageError):
        show_rollout([str(DATA / "jsonl")], "1:99")
    with pytest.raises(UsageError):
        show_rollout([str(DATA / "jsonl")], "a:b")
    out = do_convert([DATA / "jsonl"], tmp_path / "out")
    with pytest.raises(UsageError):
        inspect_paths([str(out), str(DATA / "jsonl")])
    with pytest.raises(UsageError):  # a shard is not a dump
        inspect_paths([str(out / "data" / "step-000001" / "shard-00000-of-00001.parquet")])


def test_unreadable_inputs(tmp_path):
    bad = tmp_path / "1.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InvalidInputError):
        inspect_paths([str(bad)])
    out = do_convert([DATA / "jsonl"], tmp_path / "out")
    (out / "manifest.json").write_text("{")
    with pytest.raises(InvalidInputError):
        inspect_paths([str(out)])
    out2 = do_convert([DATA / "jsonl"], tmp_path / "out2")
    shutil.copy(bad, out2 / "data" / "step-000002" / "shard-00000-of-00001.parquet")
    with pytest.raises(InvalidInputError):
        inspect_paths([str(out2)])


def test_inspect_imports_nothing_of_the_converting_process():
    # inspect runs the pipeline's stage functions, never run/ (the converting process) or the CLI
    import ast

    from inspect_samples import ROOT

    for path in sorted((ROOT / "rollout_cli" / "inspect").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                name = "." * node.level + (node.module or "")
                assert not name.startswith(("..run", "..cli", "rollout_cli.run", "rollout_cli.cli")), f"{path.name}: {name}"
