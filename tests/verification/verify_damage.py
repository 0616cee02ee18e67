"""Tools of the verify tests: a clean converted output (the `out` fixture), its manifest, and
ways to damage one shard, cell or byte while fixing up the sizes and checksums the manifest
records, so that only the damage itself can fail."""
from __future__ import annotations

import json
from pathlib import Path
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.core.schema import train_schema
from rollout_cli.verification.check import digest_of, file_digest
from conftest import ROOT, SAMPLE_JSONL


SAMPLE_PARQUET = ROOT / "sample_data" / "parquet" / "rollout_data"


def convert_cli(inputs: list, out: Path, *extra: str) -> None:
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


def input_with_a_bad_sample(tmp_path: Path) -> Path:
    lines = (SAMPLE_JSONL / "1.jsonl").read_bytes().splitlines()
    rec = json.loads(lines[3])
    rec["reward"] = "oops"
    lines[3] = json.dumps(rec).encode()
    p = tmp_path / "in" / "1.jsonl"
    p.parent.mkdir()
    p.write_bytes(b"\n".join(lines) + b"\n")
    return p
