#!/usr/bin/env python
"""`rollout-cli derive` against a DuckDB query computing the same best-of-group selection.

The output: the whole-run benchmark's S-step JSONL run (bench/run_whole.py's generator, cached
under bench/.data/), converted once by `rollout-cli convert` into bench/.data/derive-<S>/out.
Each tool runs as one whole process measured by bench/procmon.py (wall time, peak RSS),
alternating run by run so that a shared machine's noise falls on both alike:

  derive-sft  python -m rollout_cli derive OUT DEST --as sft --overwrite -q
  derive-dpo  python -m rollout_cli derive OUT DEST --as dpo --overwrite -q
  duckdb      one process: the candidate rule and the best of each (step, group_index) over
              OUT/data/**/*.parquet in SQL, the chosen rollouts' rows (input_ids,
              completion_mask, provenance) written to one Parquet file (zstd)

The DuckDB rows are checked against derive's SFT rows (the same (step, rollout_position) set)
before timing. Prints the medians and the ratio derive-sft / duckdb; --out writes JSON.

Usage: python bench/derive.py [--steps S] [--quick] [--runs R] [--out bench/results/derive-16.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from procmon import measure  # noqa: E402
from run_whole import ensure_run  # noqa: E402

DUCKDB = r"""
import sys, duckdb
out, dest = sys.argv[1], sys.argv[2]
src = f"read_parquet('{out}/data/**/*.parquet')"
con = duckdb.connect()
con.execute(f'''
COPY (
  WITH r AS (
    SELECT step, rollout_id, min(group_index) AS g, min(rollout_position) AS pos,
           min(raw_reward) AS lo, max(raw_reward) AS hi,
           bool_and(status = 'completed') AS ok, bool_or(remove_sample) AS removed,
           sum(list_sum(loss_mask)) AS mask_sum, count(*) - count(raw_reward) AS no_reward,
           count(*) - count(group_index) AS no_group
    FROM {src} GROUP BY step, rollout_id),
  best AS (
    SELECT step, rollout_id FROM r
    WHERE ok AND NOT removed AND mask_sum > 0 AND no_reward = 0 AND no_group = 0 AND lo = hi
    QUALIFY row_number() OVER (PARTITION BY step, g ORDER BY lo DESC, pos) = 1)
  SELECT t.tokens AS input_ids,
         list_concat(list_resize([]::UTINYINT[], len(t.tokens) - t.response_length, 0::UTINYINT),
                     t.loss_mask) AS completion_mask,
         t.token_exact, t.step, t.group_index, t.rollout_id, t.rollout_position, t.sample_index,
         t.raw_reward, t.weight_versions, t.source_name
  FROM {src} t JOIN best USING (step, rollout_id)
  ORDER BY t.step, t.rollout_position
) TO '{dest}' (FORMAT parquet, COMPRESSION zstd)''')
"""


def converted(steps: int, quick: bool) -> str:
    data = ROOT / "bench" / ".data"
    run_dir, _ = ensure_run(str(data), steps, 1, ("jsonl",), quick)
    out = data / f"derive-{steps}{'q' if quick else ''}" / "out"
    if not (out / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "rollout_cli", "convert", os.path.join(run_dir, "jsonl"), str(out),
                        "--overwrite", "--no-mmap", "-q"], check=True)
    return str(out)


def check_same(out: str, tmp: str) -> int:
    import pyarrow.parquet as pq

    subprocess.run([sys.executable, "-m", "rollout_cli", "derive", out, f"{tmp}/sft", "--as", "sft", "--overwrite", "-q"],
                   check=True)
    subprocess.run([sys.executable, "-c", DUCKDB, out, f"{tmp}/duck.parquet"], check=True)
    a = pq.read_table(f"{tmp}/sft/data/train-00000-of-00001.parquet", columns=["step", "rollout_position", "completion_mask"])
    b = pq.read_table(f"{tmp}/duck.parquet", columns=["step", "rollout_position", "completion_mask"])
    assert a.num_rows == b.num_rows, (a.num_rows, b.num_rows)
    assert a.column("rollout_position").to_pylist() == b.column("rollout_position").to_pylist()
    assert a.column("completion_mask").to_pylist()[:50] == b.column("completion_mask").to_pylist()[:50]
    return a.num_rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="10-20 MiB steps instead of 10-70")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args(argv)
    out = converted(a.steps, a.quick)
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / ".data") as tmp:
        rows = check_same(out, tmp)
        tools = {
            "derive-sft": [sys.executable, "-m", "rollout_cli", "derive", out, f"{tmp}/sft", "--as", "sft", "--overwrite", "-q"],
            "derive-dpo": [sys.executable, "-m", "rollout_cli", "derive", out, f"{tmp}/dpo", "--as", "dpo", "--overwrite", "-q"],
            "duckdb": [sys.executable, "-c", DUCKDB, out, f"{tmp}/duck.parquet"],
        }
        runs: dict[str, list[dict]] = {k: [] for k in tools}
        for i in range(a.runs):
            order = list(tools)[i % len(tools):] + list(tools)[:i % len(tools)]
            for name in order:
                m = measure(tools[name], pss=False)
                if m["rc"] != 0:
                    raise SystemExit(f"{name} failed: {m}")
                runs[name].append(m)
    summary = {name: {"wall_s": statistics.median(r["wall_s"] for r in rs),
                      "peak_rss_mib": round(max(r["max_rss_mib"] for r in rs), 1)}
               for name, rs in runs.items()}
    ratio = summary["derive-sft"]["wall_s"] / summary["duckdb"]["wall_s"]
    m = json.loads(Path(out, "manifest.json").read_text())
    result = {"steps": a.steps, "quick": a.quick, "output_rows": sum(s["rows"] for s in m["steps"]),
              "sft_rows": rows, "runs": a.runs, "tools": summary, "derive_sft_over_duckdb": round(ratio, 3),
              "cpus": os.cpu_count(), "python": platform.python_version()}
    for name, s in summary.items():
        print(f"{name:11s} {s['wall_s']:8.3f} s  peak {s['peak_rss_mib']:8.1f} MiB")
    print(f"derive-sft / duckdb: {ratio:.2f}x ({rows} SFT rows of {result['output_rows']})")
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
