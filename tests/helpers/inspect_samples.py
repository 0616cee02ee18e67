"""Shared by the inspect tests (library and CLI): small text-carrying samples, and inspect's
rows next to the rows convert wrote."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "sample_data"
FORMATS = ("jsonl", "parquet", "pt")
ROW_COLUMNS = ("step", "rollout_id", "sample_index", "group_index", "reward", "raw_reward", "rollout_mask_sum", "status",
               "truncated", "response_length", "total_length", "source_name", "remove_sample")


def sample(index, group, rid=None, reward=1.0, rl=3, mask=None, status="completed", **extra) -> dict:
    d = {
        "group_index": group, "index": index, "rollout_id": rid, "prompt": f"prompt {group}", "tokens": list(range(100, 105 + rl)),
        "response": f"response {index}", "response_length": rl, "label": "x", "reward": reward,
        "loss_mask": [1] * rl if mask is None else mask, "status": status, "metadata": {},
    }
    d.update(extra)
    return d


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def rows_of(paths, **opts) -> pa.Table:
    """inspect's per-sample rows, all steps, in convert's order."""
    from rollout_cli.inspection import InspectOptions, iter_steps

    return pa.concat_tables([sd.rows for sd in iter_steps([str(p) for p in paths], InspectOptions(**opts))])


def converted_rows(out: Path, split: str = "train") -> pa.Table:
    # shards in manifest order (steps in order); with one shard per step, rows are in input order
    m = orjson.loads((out / "manifest.json").read_bytes())
    parts = []
    for s in m["steps"]:
        if s["split"] == split:
            for sh in s["shards"]:
                parts.append(pq.read_table(out / sh["path"]))
    t = pa.concat_tables(parts)
    mask_sum = pa.array([sum(x) for x in t.column("loss_mask").to_pylist()], pa.int64())
    return t.append_column("mask_sum", mask_sum)


def assert_rows_equal(inspected: pa.Table, written: pa.Table) -> None:
    assert inspected.num_rows == written.num_rows
    for c in ROW_COLUMNS + ("mask_sum",):
        a, b = inspected.column(c), written.column(c)
        if c == "reward":  # float32 both sides, bit for bit
            assert np.array_equal(a.to_numpy().view(np.uint32), pc.cast(b, pa.float32()).to_numpy().view(np.uint32)), c
        else:
            assert a.to_pylist() == pc.cast(b, a.type).to_pylist(), c


def do_convert(inputs, out: Path, **opts) -> Path:
    from rollout_cli.run.convert import ConvertOptions, convert

    convert([str(p) for p in inputs], str(out), ConvertOptions(overwrite=True, mmap=False, **opts))
    return out


def anomalies_of(paths, **opts) -> dict[str, list[dict]]:
    """inspect's anomalies by kind (checked against the complete counts)."""
    from rollout_cli.inspection import InspectOptions, inspect_paths

    r = inspect_paths([str(p) for p in paths], options=InspectOptions(**opts))
    out: dict[str, list[dict]] = {}
    for a in r["anomalies"]:
        out.setdefault(a["kind"], []).append(a)
    assert {k: len(v) for k, v in out.items()} == r["summary"]["anomaly_counts"]
    return out
