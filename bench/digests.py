#!/usr/bin/env python3
"""Shard digests of a fixed set of conversions, to show that a change leaves every byte as it was.

Converts, with the rollout-cli under test (this checkout's package, run as `python -m
rollout_cli`), every folder of the shipped sample data (each input format, with and without
the rule options that change the rows) and a whole run of S steps (bench/run_whole.py's run, in
JSONL, Parquet and `.pt`), then prints, per conversion, the BLAKE3 digest of every shard and
Arrow copy as the manifest records them (the writer checksums each file as it writes it).

    python bench/digests.py --save bench/results/digests.json     # record
    python bench/digests.py --check bench/results/digests.json    # compare; exit 1 on a change

The digests depend on pyarrow's Parquet writer: compare runs made with the same pyarrow.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

SAMPLE = os.path.join(ROOT, "sample_data")
# (name, input folder under sample_data, extra convert options)
SAMPLE_CASES = [
    ("jsonl", "jsonl/rollout_data", []),
    ("jsonl-shards4-keep-groups", "jsonl/rollout_data", ["--shards", "4", "--keep-groups"]),
    ("jsonl-slime-compat", "jsonl/rollout_data", ["--slime-compat", "--n-samples-per-prompt", "4", "--rollout-batch-size", "4"]),
    ("jsonl-baseline-rollout", "jsonl/rollout_data", ["--reward-baseline", "rollout"]),
    ("jsonl-schedule-slime", "jsonl/rollout_data", ["--schedule", "slime", "--global-batch-size", "2"]),
    ("parquet", "parquet/rollout_data", []),
    ("parquet_json", "parquet_json/rollout_data", []),
    ("pt", "pt/rollout_data", []),
    ("reward_dict-jsonl", "reward_dict/jsonl", ["--reward-key", "accuracy"]),
    ("reward_dict-pt", "reward_dict/pt", ["--reward-key", "accuracy"]),
    ("nemo_rl", "nemo_rl", []),
    ("prime_rl", "prime_rl", []),
    ("miles", "miles", []),
    ("atropos", "atropos", []),
    ("roll", "roll", []),
    ("pipelinerl", "pipelinerl", []),
    ("open_instruct", "open_instruct", []),
    ("skyrl", "skyrl", []),
    ("verl", "verl", []),
    ("verl_text", "verl_text", ["--tokenizer", os.path.join(SAMPLE, "tokenizer")]),
    ("trl", "trl", ["--tokenizer", os.path.join(SAMPLE, "tokenizer")]),
    ("chat_drift", "chat_drift", []),
]


def convert(inputs: list[str], out: str, extra: list[str]) -> dict:
    """Shard and Arrow-copy digests of one conversion, keyed by their path in OUT."""
    cmd = [sys.executable, "-m", "rollout_cli", "convert", *inputs, out, "--overwrite", "-q", *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    if res.returncode != 0:
        return {"error": f"exit {res.returncode}: {res.stderr.strip()[-500:]}"}
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    found = {}
    for st in m["steps"]:
        for sh in st["shards"]:
            found[sh["path"]] = sh.get("blake3")
            if sh.get("mmap"):
                found[sh["mmap"]["path"]] = sh["mmap"].get("blake3")
    if m.get("rejects"):
        found[m["rejects"]["path"]] = m["rejects"].get("blake3")
    return found


def collect(steps: int, seed: int, data_dir: str) -> dict:
    results = {}
    with tempfile.TemporaryDirectory(prefix="rollout-cli-digests-") as tmp:
        for name, rel, extra in SAMPLE_CASES:
            src = os.path.join(SAMPLE, rel)
            if not os.path.exists(src):
                results[f"sample/{name}"] = {"error": f"missing input {rel}"}
                continue
            results[f"sample/{name}"] = convert([src], os.path.join(tmp, name), extra)
            print(f"sample/{name}: {len(results[f'sample/{name}'])} files", file=sys.stderr, flush=True)
        if steps:
            import run_whole

            # Parquet as pyarrow.json types it (the recorded form), not the generator's own
            fmts = ("jsonl", "parquet-readjson", "pt")
            run_dir, _ = run_whole.ensure_run(data_dir, steps, seed, fmts, quick=False)
            for fmt in fmts:
                key = f"whole-{steps}/{fmt.split('-')[0]}"
                results[key] = convert([os.path.join(run_dir, fmt)], os.path.join(tmp, f"whole-{fmt}"),
                                       ["--compression", "zstd"])
                print(f"{key}: {len(results[key])} files", file=sys.stderr, flush=True)
    return results


def compare(old: dict, new: dict) -> list[str]:
    diffs = []
    for case in sorted(set(old) | set(new)):
        a, b = old.get(case), new.get(case)
        if a == b:
            continue
        if a is None or b is None:
            diffs.append(f"{case}: only in the {'new' if a is None else 'recorded'} digests")
            continue
        for path in sorted(set(a) | set(b)):
            if a.get(path) != b.get(path):
                diffs.append(f"{case}: {path}: {a.get(path)} -> {b.get(path)}")
    return diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=16, help="steps of the whole run (0: sample data only)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="FILE", help="record the digests in FILE")
    g.add_argument("--check", metavar="FILE", help="compare with the digests recorded in FILE")
    a = p.parse_args(argv)
    import pyarrow

    results = {"pyarrow": pyarrow.__version__, "steps": a.steps, "seed": a.seed,
               "cases": collect(a.steps, a.seed, a.data_dir)}
    if a.save:
        with open(a.save, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write("\n")
        errors = [k for k, v in results["cases"].items() if "error" in v]
        print(f"{len(results['cases'])} conversions recorded in {a.save}"
              + (f"; {len(errors)} failed: {', '.join(errors)}" if errors else ""))
        return 1 if errors else 0
    with open(a.check) as f:
        old = json.load(f)
    if (old.get("pyarrow"), old.get("steps"), old.get("seed")) != (results["pyarrow"], a.steps, a.seed):
        print(f"note: recorded with pyarrow {old.get('pyarrow')}, {old.get('steps')} steps, seed {old.get('seed')}; "
              f"now pyarrow {results['pyarrow']}, {a.steps} steps, seed {a.seed}", file=sys.stderr)
    diffs = compare(old["cases"], results["cases"])
    for d in diffs:
        print(d)
    print(f"{len(results['cases'])} conversions: " + ("identical" if not diffs else f"{len(diffs)} difference(s)"))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
