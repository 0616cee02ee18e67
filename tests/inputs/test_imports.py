"""The inputs package's imports run one way: no module of it is in an import circle, counting
every import (those inside functions too), each resolved to the module it names."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "rollout_cli"


def _graph(root: Path) -> dict[str, set[str]]:
    mods = {}
    for p in root.rglob("*.py"):
        parts = [root.name, *p.relative_to(root).with_suffix("").parts]
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom):
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - n.level + 1]) if n.level else ""
                b = ".".join(x for x in (base, n.module) if x)
                if b.split(".")[0] != root.name:
                    continue
                edges[m].update(t for a in n.names if (t := resolve(f"{b}.{a.name}")) and t != m)
            elif isinstance(n, ast.Import):
                edges[m].update(t for a in n.names if a.name.split(".")[0] == root.name
                                and (t := resolve(a.name)) and t != m)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_inputs():
    circles = [c for c in _circles(_graph(PKG)) if any(m.startswith("rollout_cli.inputs") for m in c)]
    assert circles == []


def test_a_circle_through_a_function_import_is_found(tmp_path):
    root = tmp_path / "rollout_cli"
    (root / "inputs").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "inputs" / "__init__.py").write_text("")
    (root / "inputs" / "a.py").write_text("from .b import x\n")
    (root / "inputs" / "b.py").write_text("def x():\n    from . import a\n")
    assert _circles(_graph(root)) == [["rollout_cli.inputs.a", "rollout_cli.inputs.b"]]
