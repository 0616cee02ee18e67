"""rollout_cli.verify.check: every guarantee `verify` makes catches a real, deliberately made failure.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant, and (where the damage is surgical, with the manifest's
sizes and checksums fixed up) that nothing else is reported.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.core.errors import ExitCode, IntegrityError, UsageError
from rollout_cli.core.options import ConvertOptions
from rollout_cli.run.convert import convert
from rollout_cli.core.schema import train_schema
from rollout_cli.verify.check import check_output, digest_of, file_digest, verify_output
from conftest import ROOT, SAMPLE_JSONL

SAMPLE_PARQUET = ROOT / "sample_data" / "parquet" / "rollout_data"


def _convert(inputs: list, out: Path, *extra: str) -> None:
    res = CliRunner().invoke(app, ["convert", *map(str, inputs), str(out), "--workers", "1", "-q", *extra])
    assert res.exit_code == 0, res.output


@pytest.fixture
def out(sample_out) -> Path:
    return sample_out


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def save_manifest(out: Path, m: dict) -> None:
    (out / "manifest.json").write_text(json.dumps(m, indent=1))


def step_entry(m: dict, step: int, split: str = "train") -> dict:
    return next(s for s in m["steps"] if s["step"] == step and s["split"] == split)


def fails(result: dict) -> set[tuple[str, str]]:
    return {(f["file"], f["invariant"]) for f in result["failures"]}


def refresh(out: Path, entry: dict) -> None:
    """Record a rewritten file's size and checksum in its manifest entry (same algorithm)."""
    path = out / entry["path"]
    alg, _ = digest_of(entry)
    entry["bytes"] = path.stat().st_size
    entry[alg] = file_digest(str(path), alg)


def rewrite_shard(out: Path, m: dict, shard: dict, table: pa.Table, *, mmap: bool = True, counts: bool = False) -> None:
    """Write `table` as the shard's Parquet (and its Arrow IPC copy), fixing sizes and checksums
    in the manifest so that only the data's own invariants can fail."""
    table = table.cast(train_schema())
    pq.write_table(table, out / shard["path"], compression="zstd")
    refresh(out, shard)
    if mmap and shard.get("mmap"):
        with pa.ipc.new_file(str(out / shard["mmap"]["path"]), table.schema) as w:
            w.write_table(table)
        refresh(out, shard["mmap"])
    if counts:
        shard["rows"] = table.num_rows
        shard["tokens"] = int(pa.compute.sum(table.column("total_length")).as_py() or 0)
        shard["rollouts"] = len(set(table.column("rollout_id").to_pylist()))
    save_manifest(out, m)


def read_shard(out: Path, shard: dict) -> pa.Table:
    return pq.read_table(out / shard["path"]).cast(train_schema())


def set_cell(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    i = table.schema.get_field_index(column)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def multi_sample_rollout(out: Path, m: dict, step: int = 2) -> tuple[dict, pa.Table, list[int]]:
    """A shard of `step` and the row positions of one rollout with at least two samples there."""
    for shard in step_entry(m, step)["shards"]:
        t = read_shard(out, shard)
        ids = t.column("rollout_id").to_pylist()
        for rid in ids:
            rows = [i for i, x in enumerate(ids) if x == rid]
            if len(rows) >= 2:
                return shard, t, rows
    raise AssertionError("sample data lost its multi-sample rollouts")


def flip_byte(path: Path, where: float | None = None) -> None:
    """Flip one byte: at `where` (a fraction of the file), or by default in the middle of the
    first column chunk of a Parquet file (data pages, not the footer)."""
    data = bytearray(path.read_bytes())
    if where is None:
        c = pq.ParquetFile(path).metadata.row_group(0).column(0)
        i = c.data_page_offset + c.total_compressed_size // 2
    else:
        i = int(len(data) * where)
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------------------- clean outputs


def test_clean_output_passes_full_and_quick(out):
    for quick in (False, True):
        res = verify_output(str(out), quick=quick)
        assert res["ok"] and res["failures"] == [], res["failures"]
        m = manifest(out)
        n_shards = sum(len(s["shards"]) for s in m["steps"])
        assert res["checked"]["shards"] == n_shards == 8
        assert res["checked"]["files"] == 1 + 2 * n_shards  # manifest + Parquet + IPC copies
        assert res["checked"]["rows"] == m["counts"]["rows"]
        assert res["checked"]["hashed_bytes"] == (0 if quick else res["checked"]["bytes"])
        json.dumps(res)  # plain data


def test_clean_outputs_of_other_shapes_pass(tmp_path):
    """--keep-text (extra schema columns), --no-mmap, and an output with rejects.jsonl."""
    a = tmp_path / "text"
    _convert([SAMPLE_PARQUET], a, "--keep-text", "--no-mmap", "--shards", "3", "--keep-groups")
    assert verify_output(str(a))["failures"] == []
    b = tmp_path / "rej"
    _convert([_input_with_a_bad_sample(tmp_path)], b, "--on-error", "skip")
    assert manifest(b)["rejects"]["count"] == 1
    res = verify_output(str(b))
    assert res["failures"] == [] and "rejects.jsonl" in res["files"]


def _input_with_a_bad_sample(tmp_path: Path) -> Path:
    lines = (SAMPLE_JSONL / "1.jsonl").read_bytes().splitlines()
    rec = json.loads(lines[3])
    rec["reward"] = "oops"
    lines[3] = json.dumps(rec).encode()
    p = tmp_path / "in" / "1.jsonl"
    p.parent.mkdir()
    p.write_bytes(b"\n".join(lines) + b"\n")
    return p


# ------------------------------------------------------------------------------- bytes on disk


def test_one_flipped_byte_in_a_shard_is_caught_and_named(out):
    shard = step_entry(manifest(out), 2)["shards"][1]["path"]
    flip_byte(out / shard, 0.2)  # in a data page, before the footer
    res = verify_output(str(out))
    assert fails(res) == {(shard, "checksum")}
    with pytest.raises(IntegrityError) as e:
        check_output(str(out))
    assert e.value.exit_code == ExitCode.INTEGRITY == 4
    assert shard in str(e.value) and "checksum" in str(e.value)
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


# ------------------------------------------------------------------------------- manifest counts


def test_edited_total_count_is_caught(out):
    m = manifest(out)
    m["counts"]["rows"] += 1
    save_manifest(out, m)
    res = verify_output(str(out), quick=True)
    assert fails(res) == {("manifest.json", "counts")}
    assert any("counts.rows" in f["detail"] for f in res["failures"])


@pytest.mark.parametrize("field", ["samples", "rejected", "rows"])
def test_edited_step_count_breaks_rows_plus_rejected_equals_samples(out, field):
    m = manifest(out)
    step_entry(m, 2)[field] += 1
    save_manifest(out, m)
    res = verify_output(str(out))
    assert ("manifest.json", "counts") in fails(res)
    assert any("step 2" in f["detail"] for f in res["failures"])


def test_consistently_edited_row_count_is_caught_against_the_data(out):
    """The manifest adds up, but one shard does not hold the rows it claims."""
    m = manifest(out)
    s = step_entry(m, 1)
    shard = s["shards"][0]
    for d in (shard, s):
        d["rows"] += 1
    s["samples"] += 1
    s["step_samples"] += 1
    m["counts"]["rows"] += 1
    m["counts"]["input_samples"] += 1
    next(i for i in m["inputs"] if i["step"] == 1 and i["split"] == "train")["samples"] += 1
    save_manifest(out, m)
    both = {(shard["path"], "rows"), (shard["mmap"]["path"], "rows")}  # the Parquet shard and its IPC copy
    # ... and every row's step_samples is the step's true row count, not the edited one
    step_rows = {(sh["path"], "step_fields") for sh in s["shards"]}
    assert fails(verify_output(str(out))) == both | step_rows
    assert fails(verify_output(str(out), quick=True)) == both  # footer row counts


def test_consistently_edited_token_count_is_caught_against_the_data(out):
    m = manifest(out)
    s = step_entry(m, 2)
    shard = s["shards"][1]
    shard["tokens"] += 5
    s["tokens"] += 5
    s["tokens_per_shard"][1] += 5
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {(shard["path"], "tokens")}


def test_rejects_file_must_match_the_manifest(tmp_path):
    out = tmp_path / "rej"
    _convert([_input_with_a_bad_sample(tmp_path)], out, "--on-error", "skip")
    (out / "rejects.jsonl").write_bytes(b"")
    assert fails(verify_output(str(out))) == {("rejects.jsonl", "rejects"), ("rejects.jsonl", "checksum")}
    (out / "rejects.jsonl").unlink()
    assert ("rejects.jsonl", "file_present") in fails(verify_output(str(out)))


def test_rejects_file_without_rejected_samples_is_unexpected(out):
    (out / "rejects.jsonl").write_text('{"file": "x", "split": "train", "step": 1}\n')
    assert fails(verify_output(str(out))) == {("rejects.jsonl", "unexpected_file")}


# ------------------------------------------------------------------------------- row invariants


def test_sibling_with_a_different_mask_sum_is_caught(out):
    """Rewrite a shard with pyarrow, one sibling's rollout_mask_sum changed, checksum fixed."""
    m = manifest(out)
    shard, t, rows = multi_sample_rollout(out, m)
    t = set_cell(t, "rollout_mask_sum", rows[1], t.column("rollout_mask_sum")[rows[1]].as_py() + 1)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "rollout_mask_sum_shared")}, res["failures"]


def test_mask_sum_that_is_not_the_loss_mask_total_is_caught(out):
    m = manifest(out)
    shard, t, rows = multi_sample_rollout(out, m)
    v = t.column("rollout_mask_sum")[rows[0]].as_py() + 7
    for r in rows:
        t = set_cell(t, "rollout_mask_sum", r, v)
    rewrite_shard(out, m, shard, t)
    assert fails(verify_output(str(out))) == {(shard["path"], "rollout_mask_sum_total")}


def test_rollout_split_across_shards_is_caught(out):
    m = manifest(out)
    s = step_entry(m, 2)
    shard, t, rows = multi_sample_rollout(out, m)
    k = s["shards"].index(shard)
    other = s["shards"][1 - k]
    moved = t.take(pa.array([rows[-1]]))
    keep = [i for i in range(t.num_rows) if i != rows[-1]]
    rewrite_shard(out, m, shard, t.take(pa.array(keep)), counts=True)
    rewrite_shard(out, m, other, pa.concat_tables([read_shard(out, other), moved]), counts=True)
    s["tokens_per_shard"] = [sh["tokens"] for sh in s["shards"]]
    save_manifest(out, m)
    res = verify_output(str(out))
    assert (other["path"], "rollout_split") in fails(res) or (shard["path"], "rollout_split") in fails(res), res["failures"]
    split = next(f for f in res["failures"] if f["invariant"] == "rollout_split")
    assert shard["path"] in split["detail"] and other["path"] in split["detail"]


@pytest.mark.parametrize(
    "column, change, primary, consequences",
    [
        # (column, change, the invariant that must fail, what else may follow from it)
        ("response_length", lambda v: v + 1, "loss_mask_length", set()),
        ("total_length", lambda v: v + 1, "total_length", {"tokens"}),
        ("step", lambda v: v + 100, "step_column", set()),
        ("truncated", lambda v: not v, "status", set()),
        ("status", lambda v: "bogus", "status", set()),
        ("loss_mask", lambda v: [2] + v[1:], "loss_mask_values", {"rollout_mask_sum_total"}),
        ("loss_mask", lambda v: v + [1], "loss_mask_length", {"rollout_mask_sum_total"}),
    ],
)
def test_row_invariants(out, column, change, primary, consequences):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][1]
    t = read_shard(out, shard)
    row = 3
    t = set_cell(t, column, row, change(t.column(column)[row].as_py()))
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert {f for f, _ in fails(res)} == {shard["path"]}, res["failures"]
    got = {inv for _, inv in fails(res)}
    assert primary in got and got <= {primary} | consequences, res["failures"]
    assert any(f"row {row}" in f["detail"] for f in res["failures"] if f["invariant"] == primary)


def test_null_in_a_required_column_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][0]
    t = pq.read_table(out / shard["path"])
    i = t.schema.get_field_index("reward")
    t = t.set_column(i, pa.field("reward", pa.float32()), pa.array([None] + t.column("reward").to_pylist()[1:], pa.float32()))
    pq.write_table(t, out / shard["path"])  # a nullable field: the schema check fails too
    refresh(out, shard)
    save_manifest(out, m)
    assert (shard["path"], "schema") in fails(verify_output(str(out)))


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


# ------------------------------------------------------------------------------- schema


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


def test_unknown_schema_version_is_refused(out):
    m = manifest(out)
    m["schema_version"] = 999
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {("manifest.json", "schema_version")}


def test_shard_schema_version_metadata_is_checked(out):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][0]
    t = read_shard(out, shard).replace_schema_metadata({"rollout_cli.schema_version": "0"})
    pq.write_table(t, out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {(shard["path"], "schema_version")}


# ------------------------------------------------------------------------------- remove_sample


def test_a_removed_row_with_a_nonzero_mask_is_caught_with_exit_4(out):
    """remove_sample true means slime zeroed the loss mask: a row that says so and still trains
    on tokens is broken (only that row's invariant fails; its sums are untouched)."""
    m = manifest(out)
    shard, t, rows = multi_sample_rollout(out, m)
    r = rows[0]
    assert sum(t.column("loss_mask")[r].as_py()) > 0 and t.column("remove_sample")[r].as_py() is False
    rewrite_shard(out, m, shard, set_cell(t, "remove_sample", r, True))
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "remove_sample")}
    assert f"row {r}: remove_sample is true but its loss_mask sums to" in res["failures"][0]["detail"]
    cli = CliRunner().invoke(app, ["verify", str(out)])
    assert cli.exit_code == ExitCode.INTEGRITY == 4 and "remove_sample" in cli.output


def test_the_removed_sample_of_the_sample_data_passes(out):
    """sample_data step 1, sample 10: remove_sample true and a mask of zeros, as convert wrote it."""
    m = manifest(out)
    flagged = [(s["step"], r) for s in m["steps"] for sh in s["shards"]
               for r in read_shard(out, sh).filter(pa.compute.field("remove_sample")).column("rollout_position").to_pylist()]
    assert flagged == [(1, 10)]
    assert verify_output(str(out))["ok"]


def test_remove_sample_of_another_type_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][0]
    t = read_shard(out, shard)
    schema = train_schema()
    i = schema.get_field_index("remove_sample")
    narrow = schema.set(i, pa.field("remove_sample", pa.int8(), nullable=False))
    pq.write_table(t.cast(narrow), out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "schema")}
    assert "remove_sample: int8 not null, expected bool not null" in res["failures"][0]["detail"]


def test_an_output_of_schema_version_2_passes(out):
    """Outputs written before the remove_sample column (schema version 2) are still verified
    against the schema of their version, in full and quick mode."""
    from old_outputs import as_schema_version_2

    as_schema_version_2(out)
    for quick in (False, True):
        res = verify_output(str(out), quick=quick)
        assert res["ok"], res["failures"]
        assert res["schema_version"] == 2


def test_shards_must_carry_the_manifests_schema_version(out):
    """A version-3 shard in a version-2 output, and a version-2 shard in a version-3 output:
    each is named (the one output holds one schema)."""
    from old_outputs import as_schema_version_2

    m = manifest(out)
    shard = step_entry(m, 2)["shards"][0]
    t = read_shard(out, shard)
    v2 = train_schema(False, 2)
    pq.write_table(t.select(v2.names).cast(v2), out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out), quick=True)
    assert fails(res) == {(shard["path"], "schema"), (shard["path"], "schema_version")}
    assert "missing column remove_sample" in res["failures"][0]["detail"]
    assert "expected 3 (the manifest's)" in res["failures"][1]["detail"]
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


# ------------------------------------------------------------------------------- the manifest itself


def test_missing_manifest_means_not_complete(out):
    (out / "manifest.json").unlink()
    res = verify_output(str(out))
    assert fails(res) == {("manifest.json", "manifest")} and "interrupted" in res["failures"][0]["detail"]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": "something-else"}'])
def test_unreadable_or_foreign_manifest(out, text):
    (out / "manifest.json").write_text(text)
    assert fails(verify_output(str(out))) == {("manifest.json", "manifest")}


@pytest.mark.parametrize("path", ["../outside.parquet", "/etc/passwd", "data/../../x.parquet", "other/x.parquet"])
def test_manifest_paths_must_stay_inside_out(out, path):
    m = manifest(out)
    step_entry(m, 1)["shards"][0]["path"] = path
    save_manifest(out, m)
    res = verify_output(str(out))
    assert fails(res) == {("manifest.json", "manifest_structure")}


def test_malformed_manifest_fields_are_failures_not_crashes(out):
    m = manifest(out)
    m["steps"][0]["shards"][0]["rows"] = "eight"
    del m["steps"][1]["tokens"]
    m["counts"] = []
    save_manifest(out, m)
    res = verify_output(str(out))
    assert {inv for _, inv in fails(res)} == {"manifest_structure"} and len(res["failures"]) == 3


def test_duplicate_step_and_wrong_layout(out):
    m = manifest(out)
    m["steps"][1]["shards"][0]["path"], m["steps"][1]["shards"][1]["path"] = (
        m["steps"][1]["shards"][1]["path"], m["steps"][1]["shards"][0]["path"])
    save_manifest(out, m)
    assert ("manifest.json", "shard_layout") in fails(verify_output(str(out), quick=True))


# ------------------------------------------------------------------------------- stray files


@pytest.mark.parametrize(
    "rel",
    ["data/step-000001/notes.txt", "data/step-000009/shard-00000-of-00002.parquet", "mmap/data/step-000002/extra.arrow",
     "eval/stray.parquet", "data/.hidden"],
)
def test_extra_file_in_the_data_trees_is_caught(out, rel):
    p = out / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes((out / step_entry(manifest(out), 1)["shards"][0]["path"]).read_bytes())
    for quick in (False, True):
        assert fails(verify_output(str(out), quick=quick)) == {(rel, "unexpected_file")}


def test_unrelated_top_level_file_is_only_a_note(out):
    (out / "README.txt").write_text("hello")
    res = verify_output(str(out))
    assert res["ok"] and any("README.txt" in n for n in res["notes"])


# ------------------------------------------------------------------------------- streaming


def test_verify_streams_row_groups_and_never_reads_a_whole_file(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    src = tmp_path / "in" / "5.jsonl"
    src.parent.mkdir()
    with open(src, "w") as f:
        for i in range(120):
            rl = int(rng.integers(100, 400))
            f.write(json.dumps({"group_index": i // 4, "index": i, "tokens": rng.integers(0, 50000, 50 + rl).tolist(),
                                "response_length": rl, "reward": float(i % 2), "status": "completed"}) + "\n")
    out = tmp_path / "out"
    _convert([src], out, "--shards", "2", "--row-group-bytes", "65536")
    assert all(sh["row_groups"] > 1 for sh in step_entry(manifest(out), 5)["shards"])

    def whole_file(*a, **k):
        raise AssertionError("verify must read shards one row group at a time")

    monkeypatch.setattr(pq.ParquetFile, "read", whole_file)
    monkeypatch.setattr(pq, "read_table", whole_file)
    res = verify_output(str(out))
    assert res["failures"] == [] and res["checked"]["rows"] == 120


def test_not_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        verify_output(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError):
        verify_output(str(tmp_path / "f"))


# ------------------------------------------------------------------------------- loss denominators


def _group_rows(t: pa.Table) -> list[int]:
    """Row positions of one prompt group with at least two samples in the table."""
    gi = t.column("group_index").to_pylist()
    for g in gi:
        rows = [i for i, x in enumerate(gi) if x == g and g is not None]
        if len(rows) >= 2:
            return rows
    raise AssertionError("sample data lost its multi-sample groups")


def test_clean_output_carries_consistent_denominators(out):
    m = manifest(out)
    for s in m["steps"]:
        rows = [r for sh in s["shards"] for r in read_shard(out, sh).to_pylist()]
        assert s["step_samples"] == s["rows"] == len(rows)
        assert s["step_mask_sum"] == sum(sum(r["loss_mask"]) for r in rows)
        assert {(r["step_mask_sum"], r["step_rollouts"], r["step_samples"]) for r in rows} == {
            (s["step_mask_sum"], s["step_rollouts"], s["step_samples"])}


def test_group_value_not_shared_by_siblings_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 2)["shards"][0]
    t = read_shard(out, shard)
    rows = _group_rows(t)
    t = set_cell(t, "group_mask_sum", rows[-1], t.column("group_mask_sum")[rows[-1]].as_py() + 1)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "group_fields_shared")}, res["failures"]


def test_group_rollouts_that_is_not_the_groups_count_is_caught(out):
    """Every row of the group (in both shards: a group may span them) says one rollout more."""
    m = manifest(out)
    shards = step_entry(m, 2)["shards"]
    t = read_shard(out, shards[0])
    g = t.column("group_index")[_group_rows(t)[0]].as_py()
    for shard in shards:
        t = read_shard(out, shard)
        for r, x in enumerate(t.column("group_index").to_pylist()):
            if x == g:
                t = set_cell(t, "group_rollouts", r, t.column("group_rollouts")[r].as_py() + 1)
        rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert {inv for _, inv in fails(res)} == {"group_fields_total"}, res["failures"]
    assert f"group_index {g}:" in res["failures"][0]["detail"]


def test_step_value_that_differs_between_shards_is_caught(out):
    """One shard's rows say another step_mask_sum than the other shard's and the manifest's."""
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][1]
    t = read_shard(out, shard)
    col = t.column("step_mask_sum")
    t = t.set_column(t.schema.get_field_index("step_mask_sum"), "step_mask_sum",
                     pa.array([v + 5 for v in col.to_pylist()], pa.int64()))
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "step_fields")}, res["failures"]
    assert "the manifest records" in res["failures"][0]["detail"]


@pytest.mark.parametrize("field", ["step_mask_sum", "step_rollouts", "step_samples", "step_groups"])
def test_step_value_edited_in_the_manifest_is_caught(out, field):
    m = manifest(out)
    s = step_entry(m, 2)
    s[field] += 1
    save_manifest(out, m)
    got = fails(verify_output(str(out)))
    assert {inv for _, inv in got} == {"step_fields"}
    # every shard's rows disagree with the edited value (rollouts and samples: the manifest too)
    assert {sh["path"] for sh in s["shards"]} <= {f for f, _ in got}


def test_rollout_baseline_siblings_with_different_rewards_are_caught(tmp_path):
    out = tmp_path / "out"
    convert([str(SAMPLE_JSONL)], str(out), ConvertOptions(shards=2, workers=1, reward_baseline="rollout", sibling_reward="mean"))
    assert verify_output(str(out))["failures"] == []
    m = manifest(out)
    assert m["options"]["reward_baseline"] == "rollout" and m["options"]["sibling_reward"] == "mean"
    shard, t, rows = multi_sample_rollout(out, m)
    t = set_cell(t, "reward", rows[0], t.column("reward")[rows[0]].as_py() + 0.5)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "rollout_reward_shared")}, res["failures"]


# --- an output on an object store -------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_out(s3, tmp_path_factory):
    """The sample JSONL plus one invalid sample (skipped into rejects.jsonl), converted to S3
    and to a local folder."""
    from pyarrow import fs as pafs

    from conftest import make_sample, write_jsonl

    src = tmp_path_factory.mktemp("s3-verify-in")
    for f in SAMPLE_JSONL.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    bad = make_sample(index=900, group_index=900)
    bad["loss_mask"] = [1]
    write_jsonl(src / "9.jsonl", [make_sample(index=901, group_index=901), bad])
    pafs.copy_files(str(src), "bkt/verify-in", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    local = tmp_path_factory.mktemp("s3-verify-local") / "out"
    opts = dict(workers=1, on_error="skip", shards=2)
    convert([str(src)], str(local), ConvertOptions(**opts))
    convert(["s3://bkt/verify-in"], "s3://bkt/verify-out", ConvertOptions(**opts))
    return "s3://bkt/verify-out", local


def _copy_out(s3, name: str) -> str:
    from pyarrow import fs as pafs

    pafs.copy_files("bkt/verify-out", f"bkt/{name}", source_filesystem=s3, destination_filesystem=s3)
    return f"s3://bkt/{name}"


def test_verify_reads_an_output_on_an_object_store(s3_out):
    uri, local = s3_out
    r = CliRunner().invoke(app, ["verify", uri, "--json"])
    assert r.exit_code == 0, r.output
    got, want = json.loads(r.output), verify_output(str(local))
    same = ("files", "shards", "steps", "eval_steps", "rows")  # (rejects.jsonl names the inputs: its bytes differ)
    assert got["ok"] and {k: got["checked"][k] for k in same} == {k: want["checked"][k] for k in same}
    assert got["checked"]["hashed_bytes"] == got["checked"]["bytes"] > 0
    m = json.loads((Path(local) / "manifest.json").read_text())
    assert m["rejects"]["count"] == 1  # rejects.jsonl checked too, in the generation
    files = set(got["files"])
    gen = json.loads(__import__("rollout_cli.core.storage", fromlist=["x"]).read_bytes(f"{uri}/manifest.json"))["generation"]
    assert f"gen/{gen}/rejects.jsonl" in files and all(f == "manifest.json" or f.startswith(f"gen/{gen}/") for f in files)
    assert CliRunner().invoke(app, ["verify", uri, "--quick"]).exit_code == 0


@pytest.mark.parametrize("what", ["parquet", "arrow", "rejects"])
def test_verify_fails_with_exit_4_on_a_changed_object(s3, s3_out, what):
    from rollout_cli.core import storage

    uri = _copy_out(s3, f"verify-bad-{what}")
    m = json.loads(storage.read_bytes(f"{uri}/manifest.json"))
    sh = m["steps"][0]["shards"][0]
    rel = {"parquet": sh["path"], "arrow": sh["mmap"]["path"], "rejects": m["rejects"]["path"]}[what]
    data = bytearray(storage.read_bytes(f"{uri}/{rel}"))
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    storage.write_bytes(f"{uri}/{rel}", bytes(data))
    r = CliRunner().invoke(app, ["verify", uri])
    assert r.exit_code == ExitCode.INTEGRITY, r.output
    assert rel in r.output
    result = verify_output(uri)
    assert any(f["file"] == rel and f["invariant"] in ("checksum", "readable", "mmap_content") for f in result["failures"])
    storage.delete_file(f"{uri}/{rel}")
    assert any(f["file"] == rel and f["invariant"] == "file_present" for f in verify_output(uri)["failures"])


def test_verify_on_an_object_store_tells_leftovers_from_stray_files(s3, s3_out):
    from rollout_cli.core import storage

    uri = _copy_out(s3, "verify-stray")
    m = json.loads(storage.read_bytes(f"{uri}/manifest.json"))
    # another generation's files (an interrupted run's, an old dataset's): noted, not failed
    storage.write_bytes(f"{uri}/gen/{'0' * 32}/data/step-000001/shard-00000-of-00002.parquet", b"old")
    result = verify_output(uri)
    assert result["ok"], result["failures"]
    assert any(n.startswith(f"gen/{'0' * 32}:") for n in result["notes"])
    # a file in the manifest's own generation that it does not list: a failure
    stray = f"gen/{m['generation']}/data/step-000001/extra.parquet"
    storage.write_bytes(f"{uri}/{stray}", b"x")
    result = verify_output(uri)
    assert [(f["file"], f["invariant"]) for f in result["failures"]] == [(stray, "unexpected_file")]


def test_verify_keeps_the_layout_check_on_generation_paths(s3_out):
    """A generation path must still be the layout's path inside it, and only a manifest that
    names a generation may use generation paths."""
    from rollout_cli.verify.check import _laid_out

    want = "data/step-000001/shard-00000-of-00002.parquet"
    with_gen = {"generation": "ab" * 16}
    assert _laid_out(want, want, {}) and _laid_out(want, want, with_gen)
    assert _laid_out(f"gen/{'ab' * 16}/{want}", want, with_gen)
    assert not _laid_out(f"gen/{'ab' * 16}/{want}", want, {})
    assert not _laid_out(f"gen/{'ab' * 16}/data/step-000002/shard-00000-of-00002.parquet", want, with_gen)
    assert not _laid_out(f"gen/NOTHEX/{want}", want, with_gen)


def test_verify_of_a_missing_or_unconverted_uri(s3):
    r = CliRunner().invoke(app, ["verify", "s3://bkt/no-such-output"])
    assert r.exit_code == ExitCode.USAGE and "no such directory" in r.output
    r = CliRunner().invoke(app, ["verify", "s3://bkt/dumps/jsonl"])  # objects, but no manifest
    assert r.exit_code == ExitCode.INTEGRITY and "manifest.json" in r.output and "missing" in r.output


def test_pending_steps_are_notes_and_a_malformed_pending_list_fails(out):
    """A step left out while its input was being written (convert --skip-incomplete) is a
    note, not a failure; a pending list verify cannot read is a manifest_structure failure."""
    m = manifest(out)
    entry = {"path": "run/4.jsonl", "format": "jsonl", "split": "train", "step": 4,
             "reason": "still being written? it ends inside line 9"}
    save_manifest(out, dict(m, pending=[entry]))
    r = verify_output(str(out))
    assert r["ok"] and r["pending"] == [entry]
    assert any(n.startswith("run/4.jsonl: train step 4 is pending") for n in r["notes"])
    save_manifest(out, dict(m, pending=[{"path": "run/4.jsonl", "split": "train", "step": "4"}]))
    assert fails(verify_output(str(out))) == {("manifest.json", "manifest_structure")}
