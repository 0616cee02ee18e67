#!/usr/bin/env python3
"""What Hive-style step folders (`step=3/`) would buy: polars and DuckDB reading one step of a
converted output, selected by a filter on the `step` column over the output's own folders
(`step-000003/`, pruned by each file's Parquet statistics), and the same filter over a copy with
Hive folders (hard links: the same files), pruned by the path; the step's folder read directly is
the floor. Each query sums `total_length` and the lengths of `tokens` of the step's rows.

    python bench/hive_pruning.py OUT                # OUT: a converted output (e.g. the 16-step whole run)
    python bench/hive_pruning.py OUT --reps 7 --step 9

Prints, per tool and way, the median and min wall seconds over the reps (run in turn, the
order rotating each rep), and checks every way gives the same answer.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def hive_copy(out: str, dest: str) -> str:
    """OUT/data as Hive folders (`data/step=N/shard-...parquet`), hard-linked."""
    m = json.load(open(os.path.join(out, "manifest.json")))
    for s in m["steps"]:
        if s["split"] != "train":
            continue
        d = os.path.join(dest, "data", f"step={s['step']}")
        os.makedirs(d, exist_ok=True)
        for sh in s["shards"]:
            os.link(os.path.join(out, sh["path"]), os.path.join(d, os.path.basename(sh["path"])))
    return dest


def ways(out: str, hive: str, step: int) -> dict:
    import duckdb
    import polars as pl

    flat = os.path.join(out, "data", "**", "*.parquet")
    hived = os.path.join(hive, "data", "**", "*.parquet")
    folder = os.path.join(out, "data", f"step-{step:06d}", "*.parquet")
    agg = [pl.col("total_length").sum().alias("t"), pl.col("tokens").list.len().sum().alias("n")]
    sql = "select sum(total_length), sum(len(tokens)) from read_parquet('{}'{}) {}"

    def pol(pattern, hive_partitioning, where=True):
        lf = pl.scan_parquet(pattern, hive_partitioning=hive_partitioning)
        if where:
            lf = lf.filter(pl.col("step") == step)
        row = lf.select(agg).collect().row(0)
        return tuple(int(v) for v in row)

    def duck(pattern, opts, where):
        con = duckdb.connect()
        row = con.execute(sql.format(pattern, opts, where)).fetchone()
        return tuple(int(v) for v in row)

    return {
        "polars step column (statistics)": lambda: pol(flat, False),
        "polars Hive path": lambda: pol(hived, True),
        "polars the step's folder": lambda: pol(folder, False, where=False),
        "duckdb step column (statistics)": lambda: duck(flat, "", f"where step = {step}"),
        "duckdb Hive path": lambda: duck(hived, ", hive_partitioning = true", f"where step = {step}"),
        "duckdb the step's folder": lambda: duck(folder, "", ""),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="a converted output")
    p.add_argument("--step", type=int, default=None, help="the step to read (default: the middle train step)")
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args(argv)
    m = json.load(open(os.path.join(a.out, "manifest.json")))
    train = [s["step"] for s in m["steps"] if s["split"] == "train"]
    step = a.step if a.step is not None else train[len(train) // 2]
    with tempfile.TemporaryDirectory(prefix="hive-", dir=os.path.dirname(os.path.abspath(a.out))) as tmp:
        w = ways(a.out, hive_copy(a.out, tmp), step)
        answers = {name: f() for name, f in w.items()}  # warm-up, and the answers compared
        assert len(set(answers.values())) == 1, answers
        times: dict[str, list[float]] = {name: [] for name in w}
        names = list(w)
        for r in range(a.reps):
            for name in names[r % len(names):] + names[:r % len(names)]:
                t0 = time.perf_counter()
                w[name]()
                times[name].append(time.perf_counter() - t0)
    files = sum(len(s["shards"]) for s in m["steps"] if s["split"] == "train")
    print(f"{a.out}: {len(train)} train steps, {files} files; step {step}; {a.reps} reps")
    for name, ts in times.items():
        print(f"  {name:34s} median {statistics.median(ts):.4f} s  min {min(ts):.4f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
