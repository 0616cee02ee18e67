"""What a framework's reader says of a record it cannot map: `Bad` (the field, why, and, in a
tensor batch, the row at fault), `kind` (a value's type as such a message names it) and
`first_failures` (each row's first failing check of a batch). No numpy import: discovery
imports the readers' packages."""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["Bad", "kind", "first_failures"]


class Bad(Exception):
    """A record (or a batch, row None, or one row of it) that cannot be mapped: the field and
    why."""

    def __init__(self, field: str | None, message: str, row: int | None = None):
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.row = field, message, row


def kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def first_failures(np, checks: tuple[tuple[Any, Callable[[int], Bad]], ...]) -> dict[int, Bad]:
    """row -> its Bad, from (rows failing, the Bad of such a row) checks in order: a row's first
    failing check is its Bad."""
    bad: dict[int, Bad] = {}
    for failed, why in checks:
        for i in np.flatnonzero(failed).tolist():
            if i not in bad:
                bad[i] = why(i)
    return bad
