"""No module of the package is over 600 lines: a file that grows past that holds more than one
job, and is split by job (each module's docstring says its one). The modules still being split
are listed below; the list can only shrink: a listed module that is gone or back under the limit
fails until its entry is removed."""
from __future__ import annotations

from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rollout_cli"
LIMIT = 600

# path under rollout_cli/ -> the jobs it is being split into
OVER_THE_LIMIT = {
    "loader/load.py": "the batch, the slime conversion, the views, the dataset",
    "pipeline/validate_columns.py": "the validation package (batch types, row rules, column engine)",
    "inputs/pt_pickle.py": "the .pt reader's jobs",
}


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _sizes() -> dict[str, int]:
    return {p.relative_to(PKG).as_posix(): _lines(p) for p in sorted(PKG.rglob("*.py")) if "__pycache__" not in p.parts}


def test_no_module_is_over_the_limit():
    print(f"modules allowed over {LIMIT} lines while they are split:")
    for rel, jobs in OVER_THE_LIMIT.items():
        print(f"  {rel}: {jobs}")
    over = {rel: n for rel, n in _sizes().items() if n > LIMIT and rel not in OVER_THE_LIMIT}
    assert not over, (f"over {LIMIT} lines: " + ", ".join(f"{rel} ({n})" for rel, n in over.items())
                      + "; split each by its jobs into modules of their own")


@pytest.mark.parametrize("rel", sorted(OVER_THE_LIMIT))
def test_a_listed_module_is_still_over_the_limit(rel):
    """Once a listed module is split (or gone), its entry goes: the list only shrinks."""
    n = _sizes().get(rel)
    assert n is not None and n > LIMIT, (f"{rel} is {'gone' if n is None else f'{n} lines'}: "
                                         "remove it from OVER_THE_LIMIT in tests/test_sizes.py")


def test_the_check_sees_a_long_module(tmp_path, monkeypatch):
    """The check itself: a module one line over the limit, outside the list, fails it."""
    pkg = tmp_path / "rollout_cli"
    (pkg / "pipeline").mkdir(parents=True)
    (pkg / "pipeline" / "long.py").write_text('"""x"""\n' + "x = 1\n" * LIMIT)
    (pkg / "pipeline" / "short.py").write_text("x = 1\n" * LIMIT)
    monkeypatch.setitem(globals(), "PKG", pkg)
    assert _sizes() == {"pipeline/long.py": LIMIT + 1, "pipeline/short.py": LIMIT}
    with pytest.raises(AssertionError, match=r"pipeline/long\.py \(601\)"):
        test_no_module_is_over_the_limit()
