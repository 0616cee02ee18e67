#!/usr/bin/env python3
"""Shard encoding: the project's Parquet writer against polars' writer, on the same table.

Reads the largest shard of a converted output (`OUT/data/**/*.parquet`) into memory once, then
times in this process, alternating, median of --reps (CPU and wall seconds):

  rollout-cli   rollout_cli.output.write.write_parquet (pyarrow's writer with the project's
                options: no dictionary and no statistics on the list columns)
  pyarrow       pyarrow.parquet.write_table with the same options, the table whole
  polars        polars.DataFrame.write_parquet of pl.from_arrow(table)

each with zstd-1 and uncompressed, over all columns and over the list columns alone. Every
output is read back and compared with the table. This is the encoder the whole-run benchmark's
Parquet figures depend on (docs/performance.md).

    python bench/shard_encode.py --out /path/to/converted
    python bench/shard_encode.py --out bench/.data/whole-16-s1/out-parquet/rollout-cli --reps 9

Results: stdout and bench/results/shard-encode.json.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from rollout_cli.core.schema import LIST_COLUMNS  # noqa: E402
from rollout_cli.output.write import _writer_options, write_parquet  # noqa: E402


def writers(path: str):
    import polars as pl

    def ours(t: pa.Table, codec: str) -> None:
        write_parquet(t, path, compression=codec, compression_level=1 if codec == "zstd" else None)

    def pyarrow_whole(t: pa.Table, codec: str) -> None:
        opts = _writer_options(t.column_names, codec, 1 if codec == "zstd" else None)
        pq.write_table(t, path, **opts)

    def polars(t: pa.Table, codec: str) -> None:
        df = pl.from_arrow(t)
        if codec == "zstd":
            df.write_parquet(path, compression="zstd", compression_level=1)
        else:
            df.write_parquet(path, compression="uncompressed")

    return {"rollout-cli": ours, "pyarrow": pyarrow_whole, "polars": polars}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="a converted output directory")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    shards = glob.glob(os.path.join(a.out, "data", "**", "*.parquet"), recursive=True)
    if not shards:
        sys.exit(f"no shards under {a.out}/data")
    shard = max(shards, key=os.path.getsize)
    table = pq.read_table(shard)
    lists = table.select([c for c in table.column_names if c in LIST_COLUMNS])
    print(f"{shard}: {table.num_rows} rows, {table.nbytes / 2**20:.1f} MiB in memory", flush=True)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "o.parquet")
        ws = writers(path)
        rows = []
        for label, t in (("all columns", table), ("list columns", lists)):
            for codec in ("zstd", "none"):
                times = {name: [] for name in ws}
                sizes = {}
                for r in range(a.reps + 1):
                    for name, fn in ws.items():
                        c, w = time.process_time(), time.perf_counter()
                        fn(t, codec)
                        cpu, wall = time.process_time() - c, time.perf_counter() - w
                        if r:  # the first round warms up
                            times[name].append((cpu, wall))
                        if name not in sizes:
                            back = pq.read_table(path).select(t.column_names)
                            if not back.cast(t.schema).equals(t):
                                sys.exit(f"{name}: the written file does not read back as the table")
                            sizes[name] = os.path.getsize(path)
                for name, xs in times.items():
                    rows.append({"columns": label, "codec": codec, "writer": name,
                                 "cpu_s": statistics.median(x for x, _ in xs),
                                 "wall_s": statistics.median(y for _, y in xs), "bytes": sizes[name]})
    base = {(r["columns"], r["codec"]): r["cpu_s"] for r in rows if r["writer"] == "polars"}
    print(f"{'columns':13s} {'codec':5s} {'writer':12s} {'CPU s':>7s} {'wall s':>7s} {'MB':>7s} {'CPU x polars':>13s}")
    for r in rows:
        r["cpu_vs_polars"] = r["cpu_s"] / base[(r["columns"], r["codec"])]
        print(f"{r['columns']:13s} {r['codec']:5s} {r['writer']:12s} {r['cpu_s']:7.4f} {r['wall_s']:7.4f} "
              f"{r['bytes'] / 1e6:7.2f} {r['cpu_vs_polars']:13.2f}")
    import polars as pl

    res = {"shard": os.path.relpath(shard, a.out), "rows": table.num_rows, "table_mib": table.nbytes / 2**20,
           "reps": a.reps, "pyarrow": pa.__version__, "polars": pl.__version__, "results": rows}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "shard-encode.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
