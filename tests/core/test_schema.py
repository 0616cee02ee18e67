"""The shard schema (core/schema.py) and the docs that name its columns: every column the docs
name is one the schema has (read from the schema, so a new column needs only its docs row), and
docs/format.md's column table lists every column."""
from __future__ import annotations

import re
from pathlib import Path

from rollout_cli.core.schema import train_schema

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TABLE_HEADER = "| column | Arrow type | from |"
NAME = r"`([a-z][a-z0-9_]*)`"


def schema_columns() -> set[str]:
    return set(train_schema(keep_text=True).names)


def format_table_columns() -> list[str]:
    """The names in the first cell of each row of docs/format.md's column table."""
    lines = (ROOT / "docs" / "format.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(TABLE_HEADER)
    names = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        names += re.findall(NAME, line.split("|")[1])
    return names


def prose_columns(text: str) -> list[str]:
    """Names the prose calls columns: "the `x` column", "column `x`", and the list after
    "columns" ("the columns `a` (...), `b` and `c`")."""
    flat = re.sub(r"\s+", " ", text)
    names = re.findall(NAME + r" columns?\b", flat) + re.findall(r"\bcolumn " + NAME, flat)
    for m in re.finditer(r"\bcolumns ((?:`\w+`(?: \([^)]*\))?(?:, | and )?)+)", flat):
        names += re.findall(NAME, re.sub(r"\([^)]*\)", "", m.group(1)))
    return names


def test_format_md_names_only_schema_columns():
    documented = format_table_columns()
    assert len(documented) >= 30
    assert sorted(set(documented) - schema_columns()) == []


def test_format_md_lists_every_column():
    assert sorted(schema_columns() - set(format_table_columns())) == []


def test_prose_names_only_schema_columns():
    found = {}
    for doc in DOCS:
        for name in prose_columns(doc.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(doc.name)
    assert {"rollout_position", "optimizer_step", "micro_batch", "truncated", "tokens"} <= set(found)
    unknown = {n: where for n, where in found.items() if n not in schema_columns()}
    assert unknown == {}


def test_prose_reader_finds_the_forms_it_claims():
    text = "The columns `a_b` (where it is), `c` and `d` say so; the `e` column; column `f`; a `g` here."
    assert sorted(prose_columns(text)) == ["a_b", "c", "d", "e", "f"]
