"""OUT/data reads as one table, with no custom code, in DuckDB, Polars, pyarrow.dataset and
HF datasets (each skipped only when its package is not importable; the `test` extra installs
them all)."""
from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np
import orjson
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from rollout_cli.run.convert import ConvertOptions, convert
from rollout_cli.core.schema import train_schema

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_JSONL = os.path.join(os.path.dirname(HERE), "sample_data", "jsonl")
_OPTION_NAMES = {f.name for f in dataclasses.fields(ConvertOptions)}


def _opts(**kw) -> ConvertOptions:
    kw.setdefault("overwrite", True)
    if "workers" in _OPTION_NAMES:
        kw.setdefault("workers", 1)
    return ConvertOptions(**kw)


def _vlm_run(d) -> str:
    """A slime .pt run whose samples carry bfloat16 pixel values and int64 image grids (one
    sample without), and an eval step."""
    import torch

    (d / "vlm" / "rollout_data").mkdir(parents=True)
    for step in (1, 2):
        samples = []
        for i in range(6):
            mm = None if i == 3 else {"pixel_values": torch.randn(4 * (i + 1), 12).to(torch.bfloat16),
                                      "image_grid_thw": torch.tensor([[1, 2, 2 * (i + 1)]])}
            samples.append({"tokens": list(range(1, 12)), "response_length": 3, "reward": float(i),
                            "status": "completed", "index": i, "group_index": i // 2,
                            "rollout_log_probs": [-0.5] * 3, "multimodal_train_inputs": mm})
        torch.save({"rollout_id": step, "samples": samples}, str(d / "vlm" / "rollout_data" / f"{step}.pt"))
    torch.save({"rollout_id": 2, "samples": samples}, str(d / "vlm" / "rollout_data" / "eval_2.pt"))
    return str(d / "vlm")


@pytest.fixture(scope="module", params=["sample_data", "no_log_probs_step", "vlm"])
def out(request, tmp_path_factory):
    """sample_data (3 train steps, 1 eval step), 3 shards; a variant where one step has no
    log-probs at all, so some files hold all-null optional columns; and a vision-language run
    (typed multimodal_train_inputs)."""
    d = tmp_path_factory.mktemp("interop")
    inputs = [_vlm_run(d)] if request.param == "vlm" else [SAMPLE_JSONL]
    if request.param == "no_log_probs_step":
        rows = [orjson.loads(line) for line in open(os.path.join(SAMPLE_JSONL, "rollout_data", "1.jsonl"), "rb")]
        for r in rows:
            r["rollout_log_probs"] = None
        with open(d / "9.jsonl", "wb") as f:
            f.writelines(orjson.dumps(r) + b"\n" for r in rows)
        inputs.append(str(d / "9.jsonl"))
    o = d / "out"
    convert(inputs, str(o), _opts(shards=3))
    m = orjson.loads((o / "manifest.json").read_bytes())
    rows = sum(s["rows"] for s in m["steps"] if s["split"] == "train")
    tokens = sum(s["tokens"] for s in m["steps"] if s["split"] == "train")
    return str(o), rows, tokens


COLUMNS = train_schema().names


def _pattern(o: str) -> str:
    return os.path.join(o, "data", "**", "*.parquet")


def test_data_holds_only_parquet_files(out):
    o, rows, _ = out
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(o, "data")) for f in fs]
    assert files and all(f.endswith(".parquet") for f in files), [f for f in files if not f.endswith(".parquet")]
    # nothing hidden either (no _SUCCESS, no .crc, no staging leftovers)
    assert not [f for f in files if os.path.basename(f).startswith((".", "_"))]
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == rows


def test_pyarrow_dataset(out):
    o, rows, tokens = out
    t = pads.dataset(os.path.join(o, "data"), format="parquet").to_table()
    assert t.num_rows == rows
    assert t.column_names == COLUMNS
    assert t.schema.remove_metadata().equals(train_schema().remove_metadata())
    assert int(np.sum(t.column("total_length").to_numpy())) == tokens


def test_duckdb(out):
    import duckdb
    o, rows, tokens = out
    con = duckdb.connect()
    rel = con.sql(f"select * from read_parquet('{_pattern(o)}')")
    assert rel.columns == COLUMNS
    [(n, tok, lp)] = con.execute(
        f"select count(*), sum(total_length), count(rollout_log_probs) from read_parquet('{_pattern(o)}')"
    ).fetchall()
    assert (n, tok) == (rows, tokens)
    assert lp > 0


def test_polars(out):
    import polars as pl
    o, rows, tokens = out
    df = pl.scan_parquet(_pattern(o)).collect()
    assert df.height == rows
    assert df.columns == COLUMNS
    assert int(df["total_length"].sum()) == tokens


def test_hf_datasets(out, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets
    o, rows, tokens = out
    files = sorted(glob.glob(_pattern(o), recursive=True))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.num_rows == rows
    assert ds.column_names == COLUMNS
    assert sum(ds["total_length"]) == tokens


def test_root_globs_match_every_parquet_shard_and_no_arrow_copy(out):
    """`OUT/**/*.parquet` (polars, DuckDB) reads train and eval shards, every row with its step,
    and never the uncompressed Arrow IPC copies under mmap/."""
    import duckdb
    import polars as pl

    o, rows, _ = out
    m = orjson.loads(open(os.path.join(o, "manifest.json"), "rb").read())
    every = sum(s["rows"] for s in m["steps"])
    pattern = os.path.join(o, "**", "*.parquet")
    matched = glob.glob(pattern, recursive=True)
    assert matched and not [p for p in matched if "/mmap/" in p or not p.endswith(".parquet")]
    assert glob.glob(os.path.join(o, "mmap", "**", "*.arrow"), recursive=True)
    assert pl.scan_parquet(pattern).select(pl.len()).collect().item() == every
    con = duckdb.connect()
    assert con.execute(f"select count(*), count(step) from read_parquet('{pattern}')").fetchone() == (every, every)


def test_load_dataset_at_the_root(out, tmp_path):
    import datasets

    o, rows, _ = out
    m = orjson.loads(open(os.path.join(o, "manifest.json"), "rb").read())
    ds = datasets.load_dataset(o, cache_dir=str(tmp_path / "hf"))
    assert ds["train"].num_rows == rows
    assert ds["validation"].num_rows == sum(s["rows"] for s in m["steps"] if s["split"] == "eval") > 0


def test_multimodal_tensor_bytes_read_in_every_tool(out, tmp_path, monkeypatch):
    """The typed multimodal_train_inputs column, as each tool reads it: the same bytes per row."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets
    import duckdb
    import polars as pl

    o, rows, _ = out
    files = sorted(glob.glob(_pattern(o), recursive=True))
    t = pads.dataset(os.path.join(o, "data"), format="parquet").to_table()

    def sizes(rows_of_entries) -> list:
        return [None if r is None else [(e["key"], e["dtype"], list(e["shape"]) if e["shape"] is not None else None,
                                         None if e["data"] is None else len(e["data"])) for e in r]
                for r in rows_of_entries]

    want = sizes(t.column("multimodal_train_inputs").to_pylist())
    got_pl = sizes(pl.scan_parquet(_pattern(o)).collect()["multimodal_train_inputs"].to_list())
    got_duck = sizes([r[0] for r in duckdb.connect().execute(
        f"select multimodal_train_inputs from read_parquet('{_pattern(o)}')").fetchall()])
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    got_hf = sizes(ds["multimodal_train_inputs"])
    assert sorted(map(repr, got_pl)) == sorted(map(repr, got_duck)) == sorted(map(repr, got_hf)) == sorted(map(repr, want))
    assert len(want) == rows
