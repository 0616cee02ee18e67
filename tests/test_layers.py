"""The package's folders form a stack: a module imports from its own folder and from folders
below it, never from a folder above it or beside it. Every import counts, also those inside
functions (the lazy imports that keep start-up fast)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rollout_cli"

# Bottom to top. Folders on one line are peers: neither imports the other.
LAYERS = [
    {"core"},
    {"inputs"},
    {"pipeline"},
    {"output"},
    {"run"},
    {"inspect", "loader", "verify", "slime", "export"},
    {"audit"},
    {"report", "gates"},
    {"cli"},
    {"entry", "__init__"},  # the executable, and the package's lazy facade
    {"__main__"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _unit(mod_parts: list[str]) -> str:
    """The folder (or top-level module) a dotted name inside the package belongs to."""
    if not mod_parts:
        return "__init__"
    return mod_parts[0]


def _imports(path: Path, root: Path = PKG) -> list[tuple[int, list[str]]]:
    """(line, target module parts relative to the package) for every import of the package
    (whose folder is `root`)."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    is_pkg = parts[-1] == "__init__"
    here = parts[:-1] if is_pkg else parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = base + (node.module.split(".") if node.module else [])
                if not node.module:  # `from . import a, b`: each name may be a module
                    for alias in node.names:
                        found.append((node.lineno, target + [alias.name]))
                    continue
                found.append((node.lineno, target))
            elif node.module and (node.module == "rollout_cli" or node.module.startswith("rollout_cli.")):
                found.append((node.lineno, node.module.split(".")[1:]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "rollout_cli" or alias.name.startswith("rollout_cli."):
                    found.append((node.lineno, alias.name.split(".")[1:]))
    return found


def _unit_of_file(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    return rel.parts[0] if len(rel.parts) > 1 else rel.parts[0]


def test_every_folder_and_top_module_has_a_layer():
    units = {_unit_of_file(p) for p in _modules()}
    assert units <= set(LEVEL), f"place these in LAYERS: {sorted(units - set(LEVEL))}"


def test_every_folder_says_what_it_is():
    for d in sorted(p for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = d / "__init__.py"
        assert init.exists(), f"{d.name}/ has no __init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 12, f"{d.name}/__init__.py needs a paragraph saying what the folder is for"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_point_down_the_stack(path):
    src = _unit_of_file(path)
    bad = []
    for line, target in _imports(path):
        dst = _unit(target)
        if dst == src:
            continue
        if dst not in LEVEL:
            continue  # an attribute of the package root, e.g. `from .. import x` in a subfolder
        if LEVEL[dst] >= LEVEL[src]:
            bad.append(f"line {line}: imports {'.'.join(target) or 'rollout_cli'} ({dst}, layer {LEVEL[dst]}) from {src} (layer {LEVEL[src]})")
    assert not bad, f"{path.relative_to(PKG)}:\n  " + "\n  ".join(bad)


def test_the_rule_catches_an_upward_import(tmp_path):
    """The check itself: an import from a higher folder is found (in a stand-in package
    folder, so nothing is written into the package)."""
    root = tmp_path / "rollout_cli"
    fake = root / "pipeline" / "_layers_probe.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from ..run import convert\n")
    found = [(_unit(t)) for _, t in _imports(fake, root)]
    assert found == ["run"] and LEVEL["run"] > LEVEL["pipeline"]
