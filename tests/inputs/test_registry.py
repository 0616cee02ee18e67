"""Tests of rollout_cli.inputs.registry: one descriptor per format, every hook it names
resolves, and no code outside a format's own package tests a format's name."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copts, make_sample, write_jsonl
from rollout_cli.inputs import registry
from rollout_cli.inputs.discover import discover
from rollout_cli.inputs.format import Format, _resolve
from rollout_cli.inputs.registry import FORMATS, extension_format, extensions, format_of, read_input

PKG = Path(registry.__file__).resolve().parents[1]
NAMES = ["jsonl", "parquet", "pt", "nemo_rl", "miles", "prime_rl", "atropos", "roll", "pipelinerl", "open_instruct",
         "skyrl", "verl", "verl_text", "trl", "text"]


def test_the_names_are_those_input_format_takes():
    assert list(FORMATS) == NAMES  # --input-format's help lists them in this order
    assert all(isinstance(f, Format) and f.name == n for n, f in FORMATS.items())


def test_each_format_is_one_package_with_its_descriptor():
    pkgs = {"jsonl": "jsonl", "parquet": "parquet", "pt": "slime_pt", "nemo_rl": "nemo_rl", "miles": "miles",
            "prime_rl": "prime_rl", "atropos": "atropos", "roll": "roll", "pipelinerl": "pipelinerl",
            "open_instruct": "open_instruct", "skyrl": "skyrl", "verl": "verl"}
    for name, pkg in pkgs.items():
        assert importlib.import_module(f"rollout_cli.inputs.{pkg}").FORMAT is FORMATS[name]
        refs = [FORMATS[name].reader, FORMATS[name].detector, FORMATS[name].splitter, FORMATS[name].train_reader,
                FORMATS[name].units]
        # its code is its own package's (the train side of `pt` is slime's train dump reader)
        assert all(r.startswith((f"rollout_cli.inputs.{pkg}.", "rollout_cli.inputs.train_pt."))
                   for r in refs if r is not None), name


@pytest.mark.parametrize("name", NAMES)
def test_every_hook_resolves(name):
    f = FORMATS[name]
    for hook in ("reader", "splitter", "step_field", "train_reader", "train_peek", "output_shard", "units"):
        ref = getattr(f, hook)
        if ref is not None:
            assert callable(_resolve(ref)), (name, hook)
    if f.detector is not None:
        mod = importlib.import_module(f.detector)
        assert callable(mod.claims) and callable(mod.step_and_split), name
    for m in f.preload:
        importlib.import_module(m)


def test_the_traits_of_each_format():
    assert [n for n, f in FORMATS.items() if f.detector] == ["nemo_rl", "miles", "prime_rl", "atropos", "roll",
                                                             "pipelinerl", "open_instruct", "skyrl", "verl", "verl_text", "trl",
                                                             "text"]  # asked in this order
    assert [n for n, f in FORMATS.items() if f.splitter] == ["jsonl", "parquet", "nemo_rl", "prime_rl"]
    assert [n for n, f in FORMATS.items() if f.content_groups] == ["nemo_rl", "verl_text", "trl", "text"]
    assert [n for n, f in FORMATS.items() if f.payload_step] == ["pt"]
    assert registry.train_formats() == ["nemo_rl", "pt"]
    assert [n for n, f in FORMATS.items() if f.step_field] == ["jsonl", "parquet", "verl_text", "trl", "text"]
    assert [n for n, f in FORMATS.items() if f.output_shard] == ["parquet"]
    assert [n for n, f in FORMATS.items() if f.no_train_side] == ["prime_rl", "atropos", "roll", "pipelinerl",
                                                                  "open_instruct", "skyrl", "verl", "verl_text", "trl",
                                                                  "text"]
    assert [n for n, f in FORMATS.items() if f.text_dump] == ["verl_text", "trl", "text"]
    assert [n for n, f in FORMATS.items() if f.units] == ["pipelinerl", "open_instruct"]  # files of several steps


def test_the_extension_table():
    assert extensions() == {".jsonl.zst": "jsonl", ".jsonl.gz": "jsonl", ".parquet": "parquet", ".jsonl": "jsonl",
                            ".pt": "pt"}
    assert extension_format("a/B.JSONL.GZ") == "jsonl" and extension_format("x.pt") == "pt"
    assert extension_format("x.json") is None


def test_a_single_split_is_whole():
    inp = type("I", (), {"format": "pt"})()
    assert format_of("pt").split(inp, 8) == [(0, None)] and format_of("jsonl").split(inp, 1) == [(0, None)]


def test_importing_the_registry_imports_no_reader():
    """The converting process asks the descriptors about every file: no numpy, no pyarrow, no
    reader module until a file is read."""
    code = ("import sys; import rollout_cli.inputs.registry as r; import rollout_cli.inputs.discover\n"
            "print(sorted(m for m in sys.modules if m in ('numpy', 'pyarrow') or m.endswith(('.reader', '.mapping'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PKG.parent).stdout.strip()
    assert out == "[]"


# ------------------------------------------------------------------ no format branch outside its package
def _format_branches(path: Path, root: Path = PKG) -> list[str]:
    """`x.format == "pt"`, `fmt != "jsonl"`, `fmt in ("jsonl", "parquet")`: a comparison of a
    format variable with a format's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = []
        for s in sides:
            if isinstance(s, ast.Constant) and s.value in NAMES:
                names.append(s.value)
            elif isinstance(s, (ast.Tuple, ast.List, ast.Set)):
                names += [e.value for e in s.elts if isinstance(e, ast.Constant) and e.value in NAMES]
        subject = any((isinstance(s, ast.Attribute) and s.attr == "format")
                      or (isinstance(s, ast.Name) and s.id in ("fmt", "format")) for s in sides)
        if names and subject:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_format_branch_outside_a_formats_package():
    own = {PKG / "inputs" / d for d in ("jsonl", "parquet", "slime_pt", "nemo_rl", "miles", "prime_rl", "skyrl", "verl", "train_pt")}
    files = [p for p in PKG.rglob("*.py") if not any(d in p.parents for d in own)]
    assert [b for p in files for b in _format_branches(p)] == []


def test_the_branch_finder_finds_a_branch(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text('def f(u, fmt):\n    return u.input.format == "pt" or fmt in ("jsonl", "parquet")\n')
    assert _format_branches(path, tmp_path) == ["probe.py:2", "probe.py:2"]


# ------------------------------------------------------------------ adding a format
def test_a_new_format_is_one_descriptor(tmp_path, monkeypatch):
    """Registering a descriptor is all it takes: its files are found by their ending, their
    step read from the first record, and read through its reader (here the JSONL reader under
    another ending), with no other change."""
    new = Format(name="myl", reader="rollout_cli.inputs.jsonl.reader:read", extensions=(".myl",),
                 step_field="rollout_cli.inputs.jsonl.reader:peek_step_value")
    monkeypatch.setitem(FORMATS, "myl", new)
    write_jsonl(tmp_path / "run.myl", [make_sample(index=i, step=4) for i in range(3)])
    (f,), skipped, _ = discover([str(tmp_path)], options=copts())
    assert (f.format, f.step, f.step_from, skipped) == ("myl", 4, "field", [])
    assert sum(len(c) for c in read_input(f)) == 3
    monkeypatch.setitem(FORMATS, "myl", dataclasses.replace(new, extensions=()))
    assert discover([str(tmp_path)], options=copts())[0] == []


def test_whole_file_checks_belong_to_their_formats(tmp_path):
    """run/live.py asks each input's format whether the file is whole: line formats look for a
    cut-off last line, .pt for a zip archive, Parquet for its footer; others check nothing."""
    from rollout_cli.inputs.registry import FORMATS

    assert {n for n, f in FORMATS.items() if f.cut_off} == {"jsonl", "nemo_rl", "prime_rl", "atropos", "pipelinerl",
                                                        "open_instruct", "verl_text", "trl", "text"}
    assert {n for n, f in FORMATS.items() if f.whole} == {"pt", "parquet", "skyrl", "verl", "trl", "text"}
    cut = tmp_path / "3.jsonl"
    cut.write_bytes(b'{"a": 1}\n{"a": [1, 2')
    assert FORMATS["jsonl"].cut_off_reason(str(cut)) == "it ends inside line 2"
    assert FORMATS["parquet"].cut_off_reason(str(cut)) is None
    assert FORMATS["pt"].missing_whole(str(cut)) == "not a complete zip archive"
    assert FORMATS["parquet"].missing_whole(str(cut)) == "no Parquet footer"
    assert FORMATS["jsonl"].missing_whole(str(cut)) is None
    assert FORMATS["skyrl"].missing_whole(str(cut)) == "not a complete pickle (no STOP at its end)"
    pkl = tmp_path / "b.pkl"
    pkl.write_bytes(__import__("pickle").dumps({"a": 1}, protocol=4))
    assert FORMATS["verl"].missing_whole(str(pkl)) is None
    pkl.write_bytes(pkl.read_bytes()[:-1])
    assert FORMATS["verl"].missing_whole(str(pkl)) == "not a complete pickle (no STOP at its end)"
