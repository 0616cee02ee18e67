"""The package's folders form a stack: a module imports from its own folder and from folders
below it, never from a folder above it or beside it. Every import counts, also those inside
functions (the lazy imports that keep start-up fast). At the end: every module that holds a rule
has its test file (tests/README.md), and test file names are unique."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rollout_cli"

# Bottom to top. Folders on one line are peers: neither imports the other.
LAYERS = [
    {"core"},
    {"text"},
    {"inputs"},
    {"pipeline"},
    {"output"},
    {"run"},
    {"inspection", "loader", "verification", "slime", "exporting", "derivation"},
    {"auditing"},
    {"reporting", "gates"},
    {"api", "errors"},  # the library's command functions and results; its public errors
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


# --- no import circle among the package's modules -------------------------------------------

# Known circles, each a set of modules (dotted, below rollout_cli) that import one another; the
# test prints them. The list may only shrink: a circle that is gone must leave it.
KNOWN_CIRCLES: list[set[str]] = []


def _module_file(root: Path, parts: list[str]) -> Path | None:
    p = root.joinpath(*parts)
    if parts and p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    return p / "__init__.py" if (p / "__init__.py").is_file() else None


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _named_module(root: Path, parts: list[str]) -> str:
    """The module a dotted name (below the package) names: the longest prefix that is one (the
    rest is an attribute, e.g. a function imported from it)."""
    parts = list(parts)
    while parts and _module_file(root, parts) is None:
        parts.pop()
    return ".".join(parts)


def _module_imports(path: Path, root: Path) -> set[str]:
    """The package's modules that `path` imports, top-level and in-function, relative and
    absolute, each resolved to the module it names: `from .a import b` names a.b where b is a
    module, else a."""
    name = _module_name(path, root).split(".") if path != root / "__init__.py" else []
    here = name if path.name == "__init__.py" else name[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = here[: len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module and (node.module == "rollout_cli" or node.module.startswith("rollout_cli.")):
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                sub = target + [alias.name]
                found.add(_named_module(root, sub if _module_file(root, sub) else target))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "rollout_cli" or alias.name.startswith("rollout_cli."):
                    found.add(_named_module(root, alias.name.split(".")[1:]))
    return found


def import_circles(root: Path = PKG) -> list[set[str]]:
    """The package's import circles: the strongly connected groups of two or more modules of
    its import graph (Tarjan's algorithm)."""
    graph = {}
    for p in sorted(q for q in root.rglob("*.py") if "__pycache__" not in q.parts):
        me = _module_name(p, root)
        graph[me] = _module_imports(p, root) - {me}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle():
    circles = import_circles()
    for known in KNOWN_CIRCLES:
        print(f"known import circle (allowed, to be removed): {' <-> '.join(sorted(known))}")
    new = [sorted(c) for c in circles if c not in KNOWN_CIRCLES]
    assert not new, f"import circles among rollout_cli's modules: {new}"
    gone = [sorted(k) for k in KNOWN_CIRCLES if k not in circles]
    assert not gone, f"no longer a circle, take it off KNOWN_CIRCLES: {gone}"


def test_the_circle_check_finds_every_kind_of_import(tmp_path):
    """The check itself, on a stand-in package: a circle closed by an in-function import, by
    `from . import module` and by an absolute import is found; a module importing a name from
    its package's `__init__`, and `__init__` importing the module, is one too; a chain is not."""
    root = tmp_path / "rollout_cli"
    files = {
        "__init__.py": "",
        "a/__init__.py": "from .impl import run\n",
        "a/impl.py": "def run():\n    from . import other\n",
        "a/other.py": "from rollout_cli.a.impl import run\n",
        "b/__init__.py": "",
        "b/low.py": "X = 1\n",
        "b/high.py": "from .low import X\nfrom ..a import impl\n",
        "c/__init__.py": "from .m import f\nG = 1\n",
        "c/m.py": "def f():\n    from . import G\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert sorted(sorted(c) for c in import_circles(root)) == [["a.impl", "a.other"], ["c", "c.m"]]


# the validation package's modules, bottom to top: each imports only from those before it, and
# only their public names
VALIDATE_ORDER = ["batch", "media", "rows", "lists", "columns", "images", "__init__"]


def test_validation_imports_run_one_way_through_public_names():
    root = PKG / "pipeline" / "validate"
    assert sorted(p.stem for p in root.glob("*.py")) == sorted(VALIDATE_ORDER), "place the new module in VALIDATE_ORDER"
    for k, name in enumerate(VALIDATE_ORDER):
        path = root / f"{name}.py"
        below = {f"pipeline.validate.{m}" for m in VALIDATE_ORDER[:k] if m != "__init__"}
        inside = {m for m in _module_imports(path, PKG) if m.startswith("pipeline.validate")}
        assert inside <= below, f"{name}.py imports {sorted(inside - below)}, not below it"
        tree = ast.parse(path.read_text())
        private = [f"line {n.lineno}: {a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level
                   for a in n.names if a.name.startswith("_")]
        modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level and not n.module
                   for a in n.names}  # `from . import rows as r`: r.<name>
        private += [f"line {n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id in modules and n.attr.startswith("_")]
        assert not private, f"{name}.py uses private names of another module: {private}"


# --- tests mirror the modules ---------------------------------------------------------------

TESTS = Path(__file__).resolve().parent

# Modules whose rules are tested in a file named otherwise: a format package's readers in the
# format's one test file, an engine or the worker half of convert through the contract it serves,
# presentation through the command tests. module -> that test file (below tests/; it must exist).
TESTED_IN = {
    "inputs/limits.py": "inputs/jsonl/test_long_lines.py",
    "inputs/pickled/images.py": "inputs/pickled/test_pil_images.py",
    "pipeline/validate/images.py": "pipeline/test_images.py",
    "pipeline/validate/media.py": "pipeline/test_media.py",
    "inputs/textdump.py": "inputs/text/test_text_dumps.py",
    "inputs/text/detect.py": "inputs/text/test_text_dumps.py",
    "inputs/trl/detect.py": "inputs/text/test_text_dumps.py",
    "inputs/verl_text/detect.py": "inputs/text/test_text_dumps.py",
    "text/tokenizer.py": "inputs/text/test_text_dumps.py",
    "text/pieces.py": "inputs/text/test_text_dumps.py",
    "text/template.py": "inspection/test_template_drift.py",
    "inspection/template_check.py": "inspection/test_template_drift.py",
    "auditing/step.py": "auditing/test_api.py",
    "loader/batch.py": "loader/test_load.py",
    "loader/slime.py": "loader/test_load.py",
    "output/views.py": "loader/test_load.py",
    "output/files.py": "output/test_model.py",
    "run/record.py": "run/test_convert.py",
    "verification/common.py": "verification/test_check.py",
    "verification/card.py": "output/test_card.py",
    "cli/audit_text.py": "cli/test_audit_cli.py",
    "cli/docs.py": "cli/test_help.py",
    "cli/render.py": "cli/test_convert_cli.py",
    "core/choices.py": "core/test_core_options.py",
    "core/no_pandas.py": "test_entry.py",
    "inputs/jsonl/reader.py": "inputs/jsonl/test_jsonl.py",
    "inputs/miles/sidecars.py": "inputs/miles/test_miles.py",
    "inputs/nemo_rl/detect.py": "inputs/nemo_rl/test_nemo_rl.py",
    "inputs/nemo_rl/mapping.py": "inputs/nemo_rl/test_nemo_rl.py",
    "inputs/nemo_rl/reader.py": "inputs/nemo_rl/test_nemo_rl.py",
    "inputs/parquet/parts.py": "inputs/test_columnar_formats.py",
    "inputs/parquet/reader.py": "inputs/test_columnar_formats.py",
    "inputs/prime_rl/reader.py": "inputs/prime_rl/test_prime_rl.py",
    "inputs/pickled/archive.py": "inputs/slime_pt/test_pt_pickle.py",
    "inputs/pickled/context.py": "inputs/pickled/test_unpickle.py",
    "inputs/pickled/errors.py": "inputs/pickled/test_unpickle.py",
    "inputs/pickled/plain.py": "inputs/pickled/test_allow.py",
    "inputs/pickled/tensors.py": "inputs/slime_pt/test_pt_pickle.py",
    "inputs/pipelinerl/detect.py": "inputs/pipelinerl/test_pipelinerl.py",
    "inputs/pipelinerl/reader.py": "inputs/pipelinerl/test_pipelinerl.py",
    "inputs/open_instruct/detect.py": "inputs/open_instruct/test_open_instruct.py",
    "inputs/open_instruct/reader.py": "inputs/open_instruct/test_open_instruct.py",
    "inputs/slime_pt/reader.py": "inputs/slime_pt/test_pt_pickle.py",
    "inputs/train_pt/reader.py": "inputs/train_pt/test_train_pt.py",
    "inspection/rows.py": "inspection/test_dumps.py",
    "reporting/page.py": "reporting/test_report_browser.py",
    "run/engines/local.py": "run/test_engine_local.py",
    "run/engines/ray.py": "run/test_engine_ray.py",
    "run/engines/worker_setup.py": "run/test_engine_local.py",
    "run/preload.py": "run/test_engine_contract.py",
    "run/stages.py": "run/test_convert.py",
    "derivation/rows.py": "derivation/test_derivation_run.py",
    "derivation/options.py": "derivation/test_derivation_run.py",
}

# Modules that hold no rule or decision of their own: no test file is expected. A package's
# __init__.py (its docstring, its re-exports, a format's descriptor) is tested with its modules.
NO_RULE = {
    "__main__.py": "`python -m rollout_cli`: calls entry.main",
    "core/cores.py": "the cores the process may use, as the OS says",
    "core/libc.py": "loads the C library for two calls",
    "core/pages.py": "page-aligned anonymous memory for the shard writer",
    "core/versions.py": "the version and format constants",
    "inputs/base.py": "the reader contract's data classes",
    "run/tasks.py": "the picklable data classes a worker is handed and hands back",
}

# Modules that hold a rule and have no test file of their own yet. The list may only shrink.
UNTESTED: dict[str, str] = {}


def _mirrors(rel: Path) -> list[Path]:
    """The test files that mirror module `rel` (below rollout_cli/): tests/<dir>/test_<module>.py,
    test_<module>_<what>.py beside it, or test_<package>_<module>.py in the folder or the one
    above it (test file names are unique across the suite: it has no packages)."""
    d, stem = rel.parent, rel.stem
    found = [TESTS / d / f"test_{stem}.py", *sorted((TESTS / d).glob(f"test_{stem}_*.py"))]
    if d.name:
        found += [TESTS / d / f"test_{d.name}_{stem}.py", TESTS / d.parent / f"test_{d.name}_{stem}.py"]
    return [p for p in found if p.is_file()]


def test_every_module_with_a_rule_has_its_test_file():
    for name, why in sorted(NO_RULE.items()):
        print(f"no test file expected: {name}: {why}")
    for name, why in sorted(UNTESTED.items()):
        print(f"no test file yet (to be written): {name}: {why}")
    missing, listed_but_mirrored, stale = [], [], []
    for path in _modules():
        rel = path.relative_to(PKG)
        name = rel.as_posix()
        if rel.name == "__init__.py":
            continue
        mirrored = _mirrors(rel)
        if name in TESTED_IN:
            if not (TESTS / TESTED_IN[name]).is_file():
                stale.append(f"{name}: TESTED_IN names tests/{TESTED_IN[name]}, which is not there")
        elif name in NO_RULE or name in UNTESTED:
            if mirrored and name in UNTESTED:
                listed_but_mirrored.append(f"{name} (tests/{mirrored[0].relative_to(TESTS)})")
        elif not mirrored:
            missing.append(name)
    known = {p.relative_to(PKG).as_posix() for p in _modules()}
    stale += [f"{n}: listed, but no such module" for n in sorted((set(TESTED_IN) | set(NO_RULE) | set(UNTESTED)) - known)]
    assert not missing, (f"modules without a test file: {missing}; write tests/<package>/test_<module>.py, "
                         "or list the module in TESTED_IN or NO_RULE (tests/test_layers.py) saying why")
    assert not listed_but_mirrored, f"these have a test file now, take them off UNTESTED: {listed_but_mirrored}"
    assert not stale, stale


def test_the_mirror_check_finds_a_module_without_a_test_file(tmp_path, monkeypatch):
    """The check itself: a module's test file is found under each accepted name, and a module
    with none is not."""
    tests = tmp_path
    for f in ("pipeline/test_step.py", "cli/test_convert_cli.py", "gates/test_gates_api.py",
              "pipeline/test_validate_batch.py"):
        (tests / f).parent.mkdir(parents=True, exist_ok=True)
        (tests / f).write_text("")
    monkeypatch.setitem(globals(), "TESTS", tests)
    assert _mirrors(Path("pipeline/step.py")) == [tests / "pipeline/test_step.py"]
    assert _mirrors(Path("cli/convert.py")) == [tests / "cli/test_convert_cli.py"]
    assert _mirrors(Path("gates/api.py")) == [tests / "gates/test_gates_api.py"]
    assert _mirrors(Path("pipeline/validate/batch.py")) == [tests / "pipeline/test_validate_batch.py"]
    assert _mirrors(Path("pipeline/plan.py")) == []


def test_test_file_names_are_unique():
    """The suite has no packages (pytest imports each test file by its bare name), so two test
    files of one name in different folders cannot both be collected."""
    seen: dict[str, list[str]] = {}
    for p in TESTS.rglob("test_*.py"):
        seen.setdefault(p.name, []).append(str(p.relative_to(TESTS)))
    twice = {n: sorted(ps) for n, ps in seen.items() if len(ps) > 1}
    assert not twice, f"test files of the same name (name them test_<package>_<module>.py): {twice}"
