"""rollout_cli.verification.files: a listed file that is missing, of another size or checksum, unreadable, of
another schema or schema version, or an Arrow IPC copy whose rows differ from its shard, is caught
and named.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_cli.core.schema import SCHEMA_VERSION, train_schema
from rollout_cli.verification.check import failure_message, verify_output
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import (
    manifest, save_manifest, step_entry, fails, refresh, read_shard, set_cell,
    flip_byte,
)


def test_one_flipped_byte_in_a_shard_is_caught_and_named(out):
    shard = step_entry(manifest(out), 2)["shards"][1]["path"]
    flip_byte(out / shard, 0.2)  # in a data page, before the footer
    res = verify_output(str(out))
    assert fails(res) == {(shard, "checksum")}
    message = failure_message(res)  # what verify prints before exit 4
    assert shard in message and "checksum" in message
    # --quick compares sizes only: a same-size corruption is the one thing it cannot see
    assert verify_output(str(out), quick=True)["failures"] == []


def test_one_flipped_byte_in_the_mmap_copy_is_caught(out):
    mm = step_entry(manifest(out), 1)["shards"][0]["mmap"]["path"]
    flip_byte(out / mm, 0.3)
    assert fails(verify_output(str(out))) == {(mm, "checksum")}


def test_deleted_shard_is_caught_also_by_quick(out):
    m = manifest(out)
    shard = step_entry(m, 3)["shards"][0]["path"]
    (out / shard).unlink()
    for quick in (False, True):
        assert fails(verify_output(str(out), quick=quick)) == {(shard, "file_present")}


def test_truncated_shard_is_caught_by_size(out):
    shard = step_entry(manifest(out), 3, "eval")["shards"][1]["path"]
    data = (out / shard).read_bytes()
    (out / shard).write_bytes(data[:-10])
    for quick in (False, True):
        assert fails(verify_output(str(out), quick=quick)) == {(shard, "size")}


def test_mmap_copy_with_different_rows_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 3)["shards"][0]
    t = read_shard(out, shard)
    t = set_cell(t, "reward", 0, 123.0)
    with pa.ipc.new_file(str(out / shard["mmap"]["path"]), t.schema) as w:
        w.write_table(t)
    refresh(out, shard["mmap"])
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {(shard["mmap"]["path"], "mmap_content")}


def test_shard_with_a_different_column_type_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 2)["shards"][0]
    t = read_shard(out, shard)
    schema = train_schema()
    i = schema.get_field_index("tokens")
    wide = schema.set(i, pa.field("tokens", pa.list_(pa.int64()), nullable=False))
    pq.write_table(t.cast(wide), out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "schema")}
    assert "tokens" in res["failures"][0]["detail"]


def test_shard_missing_a_column_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 2)["shards"][0]
    t = read_shard(out, shard).drop_columns(["teacher_log_probs"])
    pq.write_table(t, out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out))
    assert (shard["path"], "schema") in fails(res)
    assert any("teacher_log_probs" in f["detail"] for f in res["failures"])


def test_keep_text_option_decides_the_expected_schema(out):
    m = manifest(out)
    m["options"]["keep_text"] = True
    save_manifest(out, m)
    res = verify_output(str(out), quick=True)
    assert {inv for _, inv in fails(res)} == {"schema"}
    assert len(res["failures"]) == 16  # every Parquet shard and IPC copy


def test_shard_schema_version_metadata_is_checked(out):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][0]
    t = read_shard(out, shard).replace_schema_metadata({"rollout_cli.schema_version": "0"})
    pq.write_table(t, out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {(shard["path"], "schema_version")}


def test_shards_must_carry_the_manifests_schema_version(out):
    """A version-3 shard in a version-2 output, and a version-2 shard in a version-3 output:
    each is named (the one output holds one schema)."""
    from old_outputs import as_older_schema, as_schema_version_2

    m = manifest(out)
    shard = step_entry(m, 2)["shards"][0]
    t = read_shard(out, shard)
    v2 = train_schema(False, 2)
    pq.write_table(as_older_schema(t, v2), out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out), quick=True)
    assert fails(res) == {(shard["path"], "schema"), (shard["path"], "schema_version")}
    assert "missing column remove_sample" in res["failures"][0]["detail"]
    assert f"expected {SCHEMA_VERSION} (the manifest's)" in res["failures"][1]["detail"]
    pq.write_table(t, out / shard["path"])  # back to version 3, the rest made version 2
    as_schema_version_2(out)
    m = manifest(out)
    shard_old = step_entry(m, 2)["shards"][0]
    pq.write_table(t, out / shard_old["path"])
    refresh(out, shard_old)
    save_manifest(out, m)
    res = verify_output(str(out), quick=True)
    assert fails(res) == {(shard_old["path"], "schema"), (shard_old["path"], "schema_version")}
    assert "unexpected column remove_sample" in res["failures"][0]["detail"]
