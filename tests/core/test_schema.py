"""rollout_cli.core.schema: the train-row schema of each version this tool reads, and the docs
that name its columns."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from rollout_cli.core.schema import (COLUMNS_SINCE, MULTIMODAL_TYPED_VERSION, NULLABLE_SINCE, READ_SCHEMA_VERSIONS,
                                     SCHEMA_VERSION, TYPE_BEFORE, train_schema)
from rollout_cli.core.tensors import MM_TYPE
from rollout_cli.output import manifest


def test_remove_sample_is_a_bool_column_of_the_current_schema():
    s = train_schema()
    assert SCHEMA_VERSION == MULTIMODAL_TYPED_VERSION
    assert s.metadata[b"rollout_cli.schema_version"] == str(SCHEMA_VERSION).encode()
    assert json.loads(s.metadata[b"huggingface"]) == {
        "info": {"features": {"images": {"feature": {"_type": "Image"}, "_type": "List"}}}}
    f = s.field("remove_sample")
    assert f.type == pa.bool_() and not f.nullable
    assert s.names.index("remove_sample") == s.names.index("loss_mask") + 1
    assert "remove_sample" in train_schema(keep_text=True).names


def test_schema_4_adds_weight_versions_and_lets_unrecorded_rewards_be_null():
    s = train_schema()
    assert s.field("weight_versions").type == pa.list_(pa.string()) and s.field("weight_versions").nullable
    assert [n for n in s.names if s.field(n).nullable and n in ("reward", "raw_reward", "selected_reward")] == [
        "reward", "raw_reward", "selected_reward"]
    for v in (2, 3):
        old = train_schema(False, v)
        assert "weight_versions" not in old.names
        assert not any(old.field(n).nullable for n in ("reward", "raw_reward", "selected_reward"))


def test_schema_5_adds_token_exact():
    s = train_schema()
    assert s.field("token_exact").type == pa.bool_() and not s.field("token_exact").nullable
    for v in (2, 3, 4):
        assert "token_exact" not in train_schema(False, v).names


def test_schema_6_adds_the_dataset_card_and_no_column():
    from rollout_cli.core import layout

    assert train_schema(False, 5).names == train_schema(False, 6).names and layout.ENTRIES_SINCE == {layout.CARD: 6}
    assert layout.CARD in layout.ENTRIES


def test_an_older_version_is_the_current_schema_without_its_later_columns():
    assert READ_SCHEMA_VERSIONS == tuple(range(2, SCHEMA_VERSION + 1))
    assert COLUMNS_SINCE == {"remove_sample": 3, "weight_versions": 4, "token_exact": 5,
                             "multimodal_train_input_id": MULTIMODAL_TYPED_VERSION, "images": MULTIMODAL_TYPED_VERSION}
    assert NULLABLE_SINCE == {"reward": 4, "raw_reward": 4, "selected_reward": 4}
    for keep_text in (False, True):
        new = train_schema(keep_text)
        for v in (2, 3, 4):
            old = train_schema(keep_text, v)
            assert old.names == [n for n in new.names if COLUMNS_SINCE.get(n, 0) <= v]

            def expected(n):
                f = new.field(n).with_nullable(False) if NULLABLE_SINCE.get(n, 0) > v else new.field(n)
                return f.with_type(TYPE_BEFORE[n][1]) if n in TYPE_BEFORE else f

            assert all(old.field(n).equals(expected(n)) for n in old.names)
            assert old.metadata == {b"rollout_cli.schema_version": str(v).encode()}


def test_the_typed_multimodal_version_stores_tensors_typed_and_older_ones_json_text():
    assert train_schema().field("multimodal_train_inputs").type == MM_TYPE
    assert train_schema().field("multimodal_train_input_id").type == pa.string()
    old = train_schema(False, MULTIMODAL_TYPED_VERSION - 1)
    assert old.field("multimodal_train_inputs").type == pa.string() and "multimodal_train_input_id" not in old.names


@pytest.mark.parametrize("version, ok", [(1, False), (2, True), (3, True), (4, True), (SCHEMA_VERSION, True),
                                         (SCHEMA_VERSION + 1, False), ("3", False), (True, False)])
def test_the_manifest_reader_takes_the_versions_this_tool_reads(tmp_path, version, ok):
    m = manifest.build(options={}, inputs=[], steps=[], counts={}, rejects=None, anomalies=[], volatile={})
    assert m["schema_version"] == SCHEMA_VERSION
    m["schema_version"] = version
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    if ok:
        assert manifest.read(str(tmp_path))["schema_version"] == version
    else:
        with pytest.raises(manifest.ManifestError, match="this tool reads " + ", ".join(map(str, READ_SCHEMA_VERSIONS))) as e:
            manifest.read(str(tmp_path))
        assert e.value.invariant == "schema_version"


# The docs that name its columns: every column the docs name is one the schema has (read from
# the schema, so a new column needs only its docs row), and docs/format.md's column table lists
# every column.

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
