"""rollout_cli.core.schema: the train-row schema of each version this tool reads."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from rollout_cli.core.schema import COLUMNS_SINCE, READ_SCHEMA_VERSIONS, SCHEMA_VERSION, train_schema
from rollout_cli.output import manifest


def test_remove_sample_is_a_bool_column_of_the_current_schema():
    s = train_schema()
    assert SCHEMA_VERSION == 3 and s.metadata == {b"rollout_cli.schema_version": b"3"}
    f = s.field("remove_sample")
    assert f.type == pa.bool_() and not f.nullable
    assert s.names.index("remove_sample") == s.names.index("loss_mask") + 1
    assert "remove_sample" in train_schema(keep_text=True).names


def test_an_older_version_is_the_current_schema_without_its_later_columns():
    assert READ_SCHEMA_VERSIONS == (2, 3) and COLUMNS_SINCE == {"remove_sample": 3}
    for keep_text in (False, True):
        old, new = train_schema(keep_text, 2), train_schema(keep_text)
        assert old.names == [n for n in new.names if n != "remove_sample"]
        assert all(old.field(n).equals(new.field(n)) for n in old.names)
        assert old.metadata == {b"rollout_cli.schema_version": b"2"}


@pytest.mark.parametrize("version, ok", [(1, False), (2, True), (3, True), (4, False), ("3", False), (True, False)])
def test_the_manifest_reader_takes_the_versions_this_tool_reads(tmp_path, version, ok):
    m = manifest.build(options={}, inputs=[], steps=[], counts={}, rejects=None, anomalies=[], volatile={})
    assert m["schema_version"] == SCHEMA_VERSION
    m["schema_version"] = version
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    if ok:
        assert manifest.read(str(tmp_path))["schema_version"] == version
    else:
        with pytest.raises(manifest.ManifestError, match="this tool reads 2, 3") as e:
            manifest.read(str(tmp_path))
        assert e.value.invariant == "schema_version"
