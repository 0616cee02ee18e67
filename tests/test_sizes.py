"""No module of the package is over 600 lines: a file that grows past that holds more than one
job, and is split by job (each module's docstring says its one)."""
from __future__ import annotations

from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rollout_cli"
LIMIT = 600


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _sizes() -> dict[str, int]:
    return {p.relative_to(PKG).as_posix(): _lines(p) for p in sorted(PKG.rglob("*.py")) if "__pycache__" not in p.parts}


def test_no_module_is_over_the_limit():
    over = {rel: n for rel, n in _sizes().items() if n > LIMIT}
    assert not over, (f"over {LIMIT} lines: " + ", ".join(f"{rel} ({n})" for rel, n in over.items())
                      + "; split each by its jobs into modules of their own")


def test_the_check_sees_a_long_module(tmp_path, monkeypatch):
    """The check itself: a module one line over the limit fails it."""
    pkg = tmp_path / "rollout_cli"
    (pkg / "pipeline").mkdir(parents=True)
    (pkg / "pipeline" / "long.py").write_text('"""x"""\n' + "x = 1\n" * LIMIT)
    (pkg / "pipeline" / "short.py").write_text("x = 1\n" * LIMIT)
    monkeypatch.setitem(globals(), "PKG", pkg)
    assert _sizes() == {"pipeline/long.py": LIMIT + 1, "pipeline/short.py": LIMIT}
    with pytest.raises(AssertionError, match=r"pipeline/long\.py \(601\)"):
        test_no_module_is_over_the_limit()
