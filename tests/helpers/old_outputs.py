"""Outputs as an earlier rollout-cli wrote them, made from a current one.

`as_schema_version_2(out)` rewrites a converted output in place as schema version 2 wrote it:
every shard (Parquet and its Arrow IPC copy) without the columns added since
(core.schema.COLUMNS_SINCE: `remove_sample`), stamped version 2, and the manifest's
`schema_version` 2 with the shards' new sizes and checksums. The rows are otherwise the ones
version 2 wrote: a removed sample's loss mask was zeroed then too.

`schema_3_output(dest)` copies to `dest` the output of schema version 3 that rollout-cli 0.2.0
wrote (tests/snapshots/schema_v3_output/, its README says how), as that version left it;
`schema_4_output(dest)` likewise the output of schema version 4 (tests/snapshots/schema_v4_output/).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_cli.core.hashing import digest_of, file_digest
from rollout_cli.core.schema import train_schema


def _refresh(out: Path, entry: dict) -> None:
    alg, _ = digest_of(entry)
    entry["bytes"] = (out / entry["path"]).stat().st_size
    entry[alg] = file_digest(str(out / entry["path"]), alg)


def as_older_schema(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """`t`'s rows in an older version's `schema`: its columns only, multimodal_train_inputs as
    the JSON text that version wrote (tensors as nested lists)."""
    import orjson

    from rollout_cli.core import tensors

    t = t.select(schema.names)
    name = "multimodal_train_inputs"
    if t.schema.field(name).type != schema.field(name).type:
        rows = tensors.decode_column(t.column(name))
        text = [None if d is None else orjson.dumps(d, option=orjson.OPT_SERIALIZE_NUMPY).decode() for d in rows]
        t = t.set_column(t.schema.get_field_index(name), name, pa.array(text, pa.string()))
    return t.cast(schema)


def as_schema_version_2(out) -> Path:
    out = Path(out)
    m = json.loads((out / "manifest.json").read_text())
    schema = train_schema(bool(m["options"].get("keep_text", False)), 2)
    assert "remove_sample" not in schema.names
    for s in m["steps"]:
        for sh in s["shards"]:
            t = as_older_schema(pq.read_table(out / sh["path"]), schema)
            pq.write_table(t, out / sh["path"], compression="zstd")
            _refresh(out, sh)
            if sh.get("mmap"):
                with pa.ipc.new_file(str(out / sh["mmap"]["path"]), schema) as w:
                    w.write_table(t.combine_chunks())
                _refresh(out, sh["mmap"])
    m["schema_version"] = 2
    (out / "manifest.json").write_text(json.dumps(m, indent=1))
    return out


SCHEMA_3 = Path(__file__).resolve().parents[1] / "snapshots" / "schema_v3_output"


def schema_3_output(dest) -> Path:
    dest = Path(dest)
    shutil.copytree(SCHEMA_3, dest, ignore=shutil.ignore_patterns("README.md"))
    return dest


SCHEMA_4 = Path(__file__).resolve().parents[1] / "snapshots" / "schema_v4_output"


def schema_4_output(dest) -> Path:
    dest = Path(dest)
    shutil.copytree(SCHEMA_4, dest, ignore=shutil.ignore_patterns("README.md"))
    return dest
