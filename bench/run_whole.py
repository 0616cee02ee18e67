#!/usr/bin/env python3
"""Whole-run conversion benchmark: a folder of S step files, rollout-cli against polars and
duckdb converting the same files one by one.

A run is S step files (`step_000001.<ext>` ...) whose sizes vary deterministically between
10 and 80 MiB of JSONL (mean 40 MiB at 16 steps, 20 at 64, 12 at 256: see step_sizes), made
once by the shared generator (../shared/bench/make_rollouts.py, else bench/gen_rollouts.py)
and cached under bench/.data/whole-<S>-s<seed>/, in three forms of the same samples:

  jsonl    the generator's output;
  parquet  pyarrow's writer with its defaults (snappy, dictionary, statistics; types as
           pyarrow infers them: int64/double lists), one row group per 256 samples, as a
           dumper writing batches through ParquetWriter does (pq.write_table's own default is
           a single row group at these sizes), so every step has several row groups;
  pt       torch.save({"rollout_id": step, "samples": [dict, ...]}), slime's dump layout.

Tools, each run as one whole process tree measured by bench/procmon.py (CPU = user+sys of every
process of the tree, exact: the harness is a child subreaper and waits for them all):

  rollout-cli      rollout-cli convert RUN OUT --overwrite --compression zstd -q
  rollout-cli-w1   the same with --workers 1
  polars           one process converting the files one by one (the "per-file copy"):
                   for each file, bench/run_convert.py's polars code (scan -> cast to the
                   trainer types -> sink_parquet zstd-1)
  polars-proc      the same code, one process per file (a shell loop)
  duckdb           one process, per file COPY (SELECT ... cast) TO ... (FORMAT parquet, zstd-1)
  torch            (.pt only) torch.load of every file, nothing written: the floor of any
                   converter that reads .pt with torch

Reps go round-robin over the tools (the start rotates), each after the run's files are read
once (warm page cache) and the output folder emptied.  --then-load adds, after each
rollout-cli run, a fresh process that loads every shard of every step through
rollout_cli.open_dataset and copies its tokens into one preallocated buffer: the trainer's
first load, which pays for shards that are not in the page cache.

    python bench/run_whole.py --quick                       # 4 small steps, JSONL and Parquet
    python bench/run_whole.py --steps 16 --formats jsonl,parquet
    python bench/run_whole.py --steps 16 --formats jsonl --then-load
    python bench/run_whole.py --steps 256 --reps 1 --pss-reps 0

Results: a table per format and run length on stdout and bench/results/whole-<fmt>-<S>.json.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import procmon  # noqa: E402
import run_convert  # noqa: E402

SHARED_GEN = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "bench", "make_rollouts.py"))
ROWS_PER_GROUP = 256
EXT = {"jsonl": "jsonl", "parquet": "parquet", "pt": "pt",
       # the same samples as pyarrow.json.read_json types them, written by pq.write_table (snappy,
       # a row group per 256 samples): the Parquet form of earlier releases' figures and of the
       # recorded digests (bench/digests.py)
       "parquet-readjson": "parquet"}
# the subject's options besides RUN OUT (--subject-args): the held-out command's
SUBJECT_ARGS = "--n-samples-per-prompt 8 --overwrite -q"
SUBJECTS = ("rollout-cli", "rollout-cli-w1")
FORMAT_TOOLS = {
    "jsonl": ("rollout-cli", "rollout-cli-w1", "polars", "duckdb"),
    "parquet": ("rollout-cli", "rollout-cli-w1", "polars", "duckdb"),
    "pt": ("rollout-cli", "rollout-cli-w1", "torch"),
}
EXTRA_TOOLS = {"jsonl": ("polars-proc",), "parquet": ("polars-proc",), "pt": ()}

DUCKDB_PARQUET = r"""
import sys
import duckdb
q = lambda s: "'" + s.replace("'", "''") + "'"
duckdb.connect().execute(
    f"COPY (SELECT * REPLACE (tokens::INTEGER[] AS tokens, loss_mask::TINYINT[] AS loss_mask, "
    f"rollout_log_probs::FLOAT[] AS rollout_log_probs) FROM read_parquet({q(sys.argv[1])})) "
    f"TO {q(sys.argv[2])} (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1)")
"""

# one process, the single-file code run for every file in turn (imports happen once)
LOOP = r"""
import os, sys
code = compile(sys.argv[1], "<peer>", "exec")
outdir, files = sys.argv[2], sys.argv[3:]
for f in files:
    stem = os.path.splitext(os.path.basename(f))[0]
    sys.argv = ["-c", f, os.path.join(outdir, stem + ".parquet")]
    exec(code, {"__name__": "__main__"})
"""

TORCH_LOOP = r"""
import sys
import torch
for f in sys.argv[1:]:
    payload = torch.load(f, weights_only=False)
    assert len(payload["samples"]) > 0
"""

# the trainer's first load: every shard of every step, tokens copied into one buffer
FIRST_LOAD = r"""
import sys, warnings
import torch
import rollout_cli
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
ds = rollout_cli.open_dataset(sys.argv[1])
total = int(sys.argv[2])
buf = torch.empty(total, dtype=torch.int32)
buf.zero_()
off = 0
for step in ds.steps:
    for shard in range(ds.num_shards):
        t = ds.load(step, shard).tokens
        buf[off:off + t.numel()].copy_(t)
        off += t.numel()
assert off == total, (off, total)
print(int(buf.sum(dtype=torch.int64)))
"""


def find_subject() -> str | None:
    """The rollout-cli executable next to this interpreter (what the peers run with), else the
    one on PATH: a version manager's shim on PATH (pyenv's is a bash script) starts a shell and
    a few helpers before the interpreter, 0.03-0.3 s a run here."""
    cand = os.path.join(os.path.dirname(sys.executable), "rollout-cli")
    return cand if os.access(cand, os.X_OK) else run_convert.find_subject()


def generator() -> str:
    return SHARED_GEN if os.path.exists(SHARED_GEN) else os.path.join(HERE, "gen_rollouts.py")


def step_sizes(steps: int, seed: int, quick: bool = False) -> list[float]:
    """MiB of JSONL per step: uniform in [10, 2*mean-10], mean 40 MiB up to 16 steps, then
    40*sqrt(16/S) (20 at 64), never under 12 (256 steps: 10-14 MiB, 3 GiB in all).
    --quick: 10-20 MiB."""
    mean = 15.0 if quick else max(12.0, min(40.0, 40.0 * math.sqrt(16 / steps)))
    hi = min(80.0, 2 * mean - 10)
    rng = np.random.default_rng(10_007 * steps + seed)
    return [round(float(x), 1) for x in rng.uniform(10.0, hi, steps)]


def _truth(meta: dict) -> dict:
    """The generator's sidecar in one shape, whichever generator wrote it."""
    if "tok_sum" in meta:
        return {"samples": meta["n"], "tokens": meta["n_tokens"], "token_sum": meta["tok_sum"],
                "mask_sum": meta["mask_sum"], "logprob_sum": meta["lp_sum"], "jsonl_bytes": meta["jsonl_bytes"]}
    return {k: meta[k] for k in ("samples", "tokens", "token_sum", "mask_sum", "logprob_sum", "jsonl_bytes")
            if k in meta}


def _gen_cmd(step: int, size_mb: float, seed: int, out: str) -> list[str]:
    return [sys.executable, generator(), "--target-mb", str(size_mb), "--seed", str(seed * 100_003 + step), "--out", out]


def _make_step(d: str, step: int, size_mb: float, seed: int, fmts: tuple[str, ...]) -> dict:
    name = f"step_{step:06d}"
    jsonl = os.path.join(d, "jsonl", name + ".jsonl")
    meta_path = os.path.join(d, "meta", name + ".json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            truth = json.load(f)
        if not (os.path.exists(jsonl) and os.path.getsize(jsonl) == truth["jsonl_bytes"]):
            truth = None
    else:
        truth = None
    if truth is None:
        tmp = os.path.join(d, "tmp", name + ".jsonl")
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        subprocess.run(_gen_cmd(step, size_mb, seed, tmp), check=True, stderr=subprocess.DEVNULL)
        side = tmp + (".truth.json" if os.path.exists(tmp + ".truth.json") else ".meta.json")
        with open(side) as f:
            truth = _truth(json.load(f))
        truth["jsonl_bytes"] = os.path.getsize(tmp)
        os.replace(tmp, jsonl)
        os.remove(side)
        with open(meta_path, "w") as f:
            json.dump(truth, f)
    for fmt in fmts:
        if fmt == "jsonl":
            continue
        path = os.path.join(d, fmt, f"{name}.{EXT[fmt]}")
        if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(jsonl):
            continue
        if fmt == "parquet" and generator() == SHARED_GEN:
            # the generator's own Parquet form (pyarrow's writer, zstd, a row group per 1,024
            # samples): the same samples, as a dumper writes them from Python lists
            tmp = os.path.join(d, "tmp", name + ".jsonl")
            subprocess.run(_gen_cmd(step, size_mb, seed, tmp) + ["--parquet-only"], check=True,
                           stderr=subprocess.DEVNULL)
            os.remove(tmp + ".truth.json")
            os.replace(os.path.join(d, "tmp", name + ".parquet"), path)
            continue
        code = {
            "parquet": "import sys, pyarrow.json as pj, pyarrow.parquet as pq\n"
                       "t = pj.read_json(sys.argv[1])\n"
                       f"pq.write_table(t, sys.argv[2] + '.tmp', row_group_size={ROWS_PER_GROUP})\n",
            "parquet-readjson": "import sys, pyarrow.json as pj, pyarrow.parquet as pq\n"
                                "t = pj.read_json(sys.argv[1])\n"
                                f"pq.write_table(t, sys.argv[2] + '.tmp', row_group_size={ROWS_PER_GROUP})\n",
            "pt": "import sys, orjson, torch\n"
                  "rows = [orjson.loads(l) for l in open(sys.argv[1], 'rb')]\n"
                  f"torch.save({{'rollout_id': {step}, 'samples': rows}}, sys.argv[2] + '.tmp')\n",
        }[fmt]
        subprocess.run([sys.executable, "-c", code, jsonl, path], check=True)
        os.replace(path + ".tmp", path)
    return truth


def ensure_run(data_dir: str, steps: int, seed: int, fmts: tuple[str, ...], quick: bool) -> tuple[str, dict]:
    """Generate (once) the run of `steps` steps in every format asked; returns its folder and
    the summed checksums."""
    d = os.path.join(data_dir, f"whole-{steps}{'q' if quick else ''}-s{seed}")
    for sub in ("jsonl", "meta") + fmts:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    sizes = step_sizes(steps, seed, quick)
    print(f"run {d}: {steps} steps, {min(sizes)}-{max(sizes)} MiB JSONL each ({sum(sizes):,.0f} MiB)",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as ex:
        truths = list(ex.map(lambda i: _make_step(d, i + 1, sizes[i], seed, fmts), range(steps)))
    if time.perf_counter() - t0 > 1:
        print(f"  made in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    total = {k: sum(t[k] for t in truths) for k in truths[0]}
    total["steps"] = steps
    total["step_mib"] = sizes
    return d, total


def tool_cmd(tool: str, fmt: str, src_dir: str, files: list[str], out: str, exe: str | None,
             subject_args: str = SUBJECT_ARGS) -> tuple[list[str], dict | None]:
    """(command, extra environment) of a tool."""
    if tool in SUBJECTS:
        cmd = [exe, "convert", src_dir, out, *shlex.split(subject_args)]
        if tool == "rollout-cli-w1":
            cmd += ["--workers", "1"]
        return cmd, None
    if tool == "torch":
        return [sys.executable, "-c", TORCH_LOOP, *files], None
    one = DUCKDB_PARQUET if (tool == "duckdb" and fmt == "parquet") else run_convert.peer_code(
        "polars" if tool == "polars-proc" else tool, fmt)
    if tool == "polars-proc":
        script = 'out="$1"; shift; for f in "$@"; do b=$(basename "$f"); ' \
                 f'"{sys.executable}" -c "$CODE" "$f" "$out/${{b%.*}}.parquet" || exit 1; done'
        return ["sh", "-c", script, "sh", out, *files], {"CODE": one}
    return [sys.executable, "-c", LOOP, one, out, *files], None


def warm(files: list[str]) -> None:
    for i in range(0, len(files), 64):
        subprocess.run(["cat", *files[i:i + 64]], stdout=subprocess.DEVNULL, check=True)


def summarise(tool: str, runs: list[dict], nbytes: int, steps: int) -> dict:
    timed = [r for r in runs if r["timed"] and r["rc"] == 0]
    if not timed:
        return {"tool": tool, "failed": True}
    clean = [r for r in timed if not r["noisy"]]
    used = clean if len(clean) >= max(1, len(timed) // 2 + 1) else timed
    med = lambda k: statistics.median(r[k] for r in used)  # noqa: E731
    wall = med("wall_s")
    pss = [r["peak_pss_mib"] for r in runs if r["rc"] == 0 and r["peak_pss_mib"] is not None]
    row = {"tool": tool, "reps": len(used), "noisy_reps_used": sum(r["noisy"] for r in used),
           "wall_s": wall, "min_s": min(r["wall_s"] for r in used), "max_s": max(r["wall_s"] for r in used),
           "cpu_s": med("cpu_s"), "user_s": med("user_s"), "sys_s": med("sys_s"),
           "steps_per_s": steps / wall, "mb_per_s": nbytes / 1e6 / wall,
           "peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in timed),
           "max_rss_mib": max(r["max_rss_mib"] for r in timed),
           "peak_pss_mib": max(pss) if pss else None, "max_procs": max(r["max_procs"] for r in timed)}
    loads = [r["load"] for r in used if r.get("load")]
    if loads:
        row["load_wall_s"] = statistics.median(x["wall_s"] for x in loads)
        row["load_cpu_s"] = statistics.median(x["cpu_s"] for x in loads)
        row["convert_load_wall_s"] = statistics.median(r["wall_s"] + r["load"]["wall_s"] for r in used if r.get("load"))
    return row


def print_table(rows: list[dict], title: str) -> None:
    hdr = ["tool", "wall s", "min s", "CPU s", "sys s", "steps/s", "MB/s", "peak PSS MiB", "peak RSS sum MiB",
           "wall x polars", "CPU x polars", "load s", "conv+load s", "noisy", "output"]
    f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
    lines = [hdr]
    for r in rows:
        if r.get("failed"):
            lines.append([r["tool"], "FAILED"] + [""] * (len(hdr) - 2))
            continue
        v = r.get("verify", {})
        lines.append([r["tool"], f(r["wall_s"], ".2f"), f(r["min_s"], ".2f"), f(r["cpu_s"], ".2f"), f(r["sys_s"], ".2f"),
                      f(r["steps_per_s"], ".2f"), f(r["mb_per_s"], ".0f"), f(r["peak_pss_mib"], ",.0f"),
                      f(r["peak_rss_tree_mib"], ",.0f"), f(r.get("wall_vs_polars"), ".2f"),
                      f(r.get("cpu_vs_polars"), ".2f"), f(r.get("load_wall_s"), ".2f"),
                      f(r.get("convert_load_wall_s"), ".2f"), f"{r['noisy_reps_used']}/{r['reps']}",
                      "ok" if v.get("ok") else ("not checked" if not v else "WRONG: " + v.get("error", "?"))])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(hdr))]
    print(f"\n{title}")
    for i, l in enumerate(lines):
        print("  ".join(str(c).rjust(w[j]) if 0 < j < len(hdr) - 1 else str(c).ljust(w[j]) for j, c in enumerate(l)).rstrip())
        if i == 0:
            print("  ".join("-" * x for x in w))


def bench_one(a, fmt: str, steps: int, exe: str | None) -> bool:
    run_dir, truth = ensure_run(a.data_dir, steps, a.seed, (fmt,), a.quick)
    src_dir = os.path.join(run_dir, fmt)
    files = sorted(glob.glob(os.path.join(src_dir, f"step_*.{EXT[fmt]}")))
    nbytes = sum(os.path.getsize(p) for p in files)
    known = FORMAT_TOOLS[fmt] + EXTRA_TOOLS[fmt]
    tools = [t for t in (a.tools.split(",") if a.tools else FORMAT_TOOLS[fmt]) if t in known]
    print(f"{fmt}, {steps} steps: {nbytes / 1e6:,.0f} MB, {truth['samples']:,} samples; tools {','.join(tools)}; "
          f"{a.reps} rep(s) round-robin" + (f" + {a.pss_reps} PSS rep(s)" if a.pss_reps else ""),
          file=sys.stderr, flush=True)
    out_root = os.path.join(a.data_dir, f"whole-out-{fmt}-{steps}")
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    checks: dict[str, dict] = {}
    if a.replace:
        # each timed run replaces the output of the run before it (the removal inside the wall
        # time, as a run that converts again does): one untimed run first leaves an output
        for tool in tools:
            out = os.path.join(out_root, tool)
            run_convert.clear_dir(out)
            cmd, extra = tool_cmd(tool, fmt, src_dir, files, out, exe, a.subject_args)
            subprocess.run(cmd, env=dict(os.environ, **extra) if extra else None, check=True,
                           stdout=subprocess.DEVNULL)
    for rep in range(a.reps + a.pss_reps):
        timed = rep < a.reps
        order = tools[rep % len(tools):] + tools[:rep % len(tools)]
        for tool in order:
            out = os.path.join(out_root, tool)
            cmd, extra = tool_cmd(tool, fmt, src_dir, files, out, exe, a.subject_args)
            env = dict(os.environ, **extra) if extra else None
            prepare = (lambda: warm(files)) if a.replace else (lambda: (run_convert.clear_dir(out), warm(files)))
            r = procmon.measure_quiet(cmd, prepare, retries=a.retries,
                                      idle_wait=a.idle_wait, noisy_frac=a.noisy_frac,
                                      interval=a.interval_ms / 1000, pss=not timed, env=env, all_descendants=True)
            r.update(rep=rep, timed=timed)
            output = r.pop("output")
            if r["rc"] != 0:
                r["error_tail"] = output[-2000:]
                print(f"  {tool}: FAILED rc={r['rc']}\n{output[-2000:]}", file=sys.stderr)
            else:
                if a.then_load and tool in SUBJECTS and timed:
                    lr = procmon.measure([sys.executable, "-c", FIRST_LOAD, out, str(truth["tokens"])],
                                         interval=a.interval_ms / 1000, pss=False, all_descendants=True)
                    lr.pop("output")
                    r["load"] = {k: lr[k] for k in ("rc", "wall_s", "cpu_s", "user_s", "sys_s", "peak_rss_tree_mib")}
                if tool not in checks and tool != "torch":
                    checks[tool] = run_convert.verify(out, truth)
            runs[tool].append(r)
            load = f"  first load {r['load']['wall_s']:.2f} s" if r.get("load") else ""
            mem = f"PSS {r['peak_pss_mib']:,.0f}" if r["peak_pss_mib"] is not None else f"RSS sum {r['peak_rss_tree_mib']:,.0f}"
            print(f"  {'rep %d' % rep if timed else 'pss  '} {tool:20s} {r['wall_s']:7.2f} s  cpu {r['cpu_s']:6.2f} s "
                  f"(sys {r['sys_s']:5.2f})  {mem} MiB{load}"
                  f"{'  (noisy: %.2f cpu s of other processes)' % r['foreign_cpu_s'] if r['noisy'] else ''}",
                  file=sys.stderr, flush=True)

    rows = [summarise(t, runs[t], nbytes, steps) for t in tools]
    base = next((r for r in rows if r["tool"] == "polars" and not r.get("failed")), None)
    by = {r["tool"]: r for r in rows}
    for r in rows:
        r["verify"] = checks.get(r["tool"], {})
        if base and not r.get("failed"):
            r["wall_vs_polars"] = r["wall_s"] / base["wall_s"]
            r["cpu_vs_polars"] = r["cpu_s"] / base["cpu_s"]
    w1, w2 = by.get("rollout-cli-w1"), by.get("rollout-cli")
    speedup = w1["wall_s"] / w2["wall_s"] if w1 and w2 and not w1.get("failed") and not w2.get("failed") else None
    print_table(rows, f"{fmt} run of {steps} steps -> Parquet (zstd-1): {nbytes / 1e6:,.0f} MB in, "
                      f"{truth['samples']:,} samples, median of {a.reps}, warm cache, {os.cpu_count()} CPUs; "
                      f"CPU = user+sys of every process; peak PSS from {a.pss_reps} untimed rep(s), "
                      f"peak RSS sum from the timed ones" + (f"; 2 workers / 1: {speedup:.2f}x" if speedup else ""))
    os.makedirs(a.results_dir, exist_ok=True)
    path = os.path.join(a.results_dir, f"whole-{fmt}-{steps}{'-quick' if a.quick else ''}.json")
    with open(path, "w") as f:
        json.dump({"benchmark": "whole-run convert", "measured_with": "bench/run_whole.py",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "machine": platform.machine()},
                   "versions": run_convert.versions(),
                   "input": {"format": fmt, "steps": steps, "bytes": nbytes, "step_jsonl_mib": truth["step_mib"],
                             "samples": truth["samples"], "tokens": truth["tokens"],
                             "parquet_rows_per_group": ROWS_PER_GROUP if fmt == "parquet" else None,
                             "generator": os.path.relpath(generator(), os.path.dirname(HERE)), "seed": a.seed},
                   "settings": {k: getattr(a, k) for k in ("reps", "pss_reps", "interval_ms", "idle_wait",
                                                           "noisy_frac", "retries", "then_load", "quick",
                                                           "replace", "subject_args")},
                   "commands": {t: tool_cmd(t, fmt, "RUN", ["FILE..."], "OUT", "rollout-cli", a.subject_args)[0]
                                for t in tools},
                   "workers_2_over_1": speedup, "summary": rows, "runs": runs}, f, indent=1)
    print(f"wrote {os.path.relpath(path)}", file=sys.stderr)
    return all(not r.get("failed") and (r["verify"].get("ok") or r["tool"] == "torch") for r in rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="16", help="comma list of run lengths (default 16; the request's are 16,64,256)")
    ap.add_argument("--formats", default="jsonl,parquet", help="comma list of jsonl, parquet, pt")
    ap.add_argument("--tools", default=None, help="comma list (default per format: rollout-cli, rollout-cli-w1, "
                                                  "polars, duckdb; torch for pt); also polars-proc")
    ap.add_argument("--reps", type=int, default=3, help="timed reps per tool")
    ap.add_argument("--pss-reps", type=int, default=1, help="extra untimed rep(s) per tool that sample PSS")
    ap.add_argument("--then-load", action="store_true",
                    help="after each timed rollout-cli run, time a fresh process's first load of every shard")
    ap.add_argument("--quick", action="store_true", help="4 steps of 10-20 MiB, 1 rep, no PSS rep")
    ap.add_argument("--replace", action=argparse.BooleanOptionalAction, default=True,
                    help="each run replaces the previous run's output, the removal inside the wall time "
                         "(default; --no-replace: the output folder emptied before each run, untimed)")
    ap.add_argument("--subject-args", default=SUBJECT_ARGS,
                    help=f"rollout-cli convert's options after RUN OUT (default: {SUBJECT_ARGS!r})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interval-ms", type=float, default=50, help="memory sampling period")
    ap.add_argument("--idle-wait", type=float, default=10, help="wait up to this long for an idle machine")
    ap.add_argument("--noisy-frac", type=float, default=0.15,
                    help="a run is noisy if other processes used more than this fraction of a core")
    ap.add_argument("--retries", type=int, default=1, help="re-runs allowed for a noisy rep")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    if a.quick:
        a.steps, a.reps, a.pss_reps = "4", 1, 0
    fmts = [x.strip() for x in a.formats.split(",") if x.strip()]
    bad = [x for x in fmts if x not in FORMAT_TOOLS]
    if bad:
        ap.error(f"unknown format(s) {bad}")
    exe = find_subject()
    if exe is None:
        sys.exit("error: rollout-cli is not installed (pip install -e . in the repo root)")
    run_convert.compile_subject()
    ok = True
    for steps in (int(s) for s in a.steps.split(",")):
        for fmt in fmts:
            ok &= bench_one(a, fmt, steps, exe)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
