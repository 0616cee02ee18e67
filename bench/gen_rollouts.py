#!/usr/bin/env python3
"""Deterministic generator of synthetic RL rollout dumps (JSONL, one sample per line).

Each line is a subset of what slime's ``Sample.to_dict()`` dumps:

    group_index        int          prompt group; ``--group-size`` (default 8) samples each
    index              int          global sample index
    rollout_id         int | null   null, or (in ~30% of groups) an explicit id shared by
                                    runs of 2-4 consecutive siblings
    tokens             list[int]    prompt (shared within the group) + response token ids
    response_length    int
    reward             float
    loss_mask          list[0|1]    one per response token; 0-spans in multi-turn samples
    rollout_log_probs  list[float]  one per response token; float32 values widened to
                                    float64 (long reprs, the bulk of the bytes); 0.0 where
                                    the mask is 0
    status             str          completed | truncated | aborted
    metadata           dict         small; the ``tool_calls`` key is present only on
                                    multi-turn samples, so keys vary between lines

Total tokens per sample are lognormal (mean ``--mean-tokens``, default 2000) clipped to
500..8000; token ids are log-uniform in [100, 151936).

The output is a pure function of the arguments: a seeded ``numpy.random.Generator`` draws
everything block by block, and orjson serialises it, so the same arguments give the same
bytes.  A sidecar ``<out>.meta.json`` holds counts and checksums that the benchmarks use
to check converter outputs.

Examples:
    python bench/gen_rollouts.py --target-mb 200 --out /tmp/step_000001.jsonl
    python bench/gen_rollouts.py --num-samples 1000 --seed 3 --out /tmp/small.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import orjson

GEN_VERSION = 1

STATUSES = ("completed", "truncated", "aborted")
STATUS_P = (0.85, 0.12, 0.03)
FINISH_REASON = ("stop", "length", "abort")
SOURCES = ("dapo-math", "gsm8k", "livecodebench", "swe-gym", "aime24")
BLOCK_GROUPS = 128  # groups drawn per vectorised block
OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Sizes are MiB (2**20 bytes). Output is written to OUT.tmp and renamed.",
    )
    p.add_argument("--out", required=True, help="output .jsonl path")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--target-mb", type=float,
                      help="stop after the first whole group that brings the file to >= this many MiB")
    size.add_argument("--num-samples", type=int, help="exact number of samples (default 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--group-size", type=int, default=8, help="samples per prompt group")
    p.add_argument("--mean-tokens", type=float, default=2000.0)
    p.add_argument("--min-tokens", type=int, default=500)
    p.add_argument("--max-tokens", type=int, default=8000)
    p.add_argument("--vocab-size", type=int, default=151_936)
    p.add_argument("--rollout-id-frac", type=float, default=0.3,
                   help="fraction of groups that carry explicit rollout_ids")
    p.add_argument("--multi-turn-frac", type=float, default=0.3,
                   help="fraction of samples with 0-spans in loss_mask")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)
    if a.num_samples is None and a.target_mb is None:
        a.num_samples = 10_000
    if a.min_tokens < 64 or a.max_tokens < a.min_tokens:
        p.error("need 64 <= --min-tokens <= --max-tokens")
    return a


class Generator:
    SIGMA = 0.6  # lognormal shape of the total length

    def __init__(self, a):
        self.a = a
        self.rng = np.random.default_rng(a.seed)
        self.mu = math.log(a.mean_tokens) - self.SIGMA ** 2 / 2  # so that E[total] = mean
        self.lo = math.log(100.0)
        self.hi = math.log(float(a.vocab_size))
        self.next_id = 10_000_000 + 1000 * a.seed

    def _ids(self, k: int) -> np.ndarray:
        ids = np.exp(self.rng.uniform(self.lo, self.hi, size=k)).astype(np.int32)
        np.minimum(ids, self.a.vocab_size - 1, out=ids)  # exp() may round up to the bound
        return ids

    def block(self, g0: int, n_groups: int):
        """Draw n_groups groups at once; return a list of per-group lists of records."""
        a, rng = self.a, self.rng
        n = a.group_size
        ns = n_groups * n
        total = np.clip(np.exp(rng.normal(self.mu, self.SIGMA, ns)), a.min_tokens, a.max_tokens).astype(np.int64)
        plen = np.clip(np.exp(rng.normal(math.log(0.15 * a.mean_tokens), 0.5, n_groups)),
                       32, a.min_tokens - 32).astype(np.int64)
        resp = np.maximum(total - np.repeat(plen, n), 1)
        p_off = np.concatenate(([0], np.cumsum(plen)))
        r_off = np.concatenate(([0], np.cumsum(resp)))
        prompt_ids = self._ids(int(p_off[-1]))
        resp_ids = self._ids(int(r_off[-1]))

        # loss mask: 1 everywhere, 1..4 zero spans (tool output) in multi-turn samples
        multi = rng.random(ns) < a.multi_turn_frac
        n_calls = rng.integers(1, 5, ns)
        u_start = rng.random((ns, 4))
        u_len = rng.random((ns, 4))
        mask = np.ones(int(r_off[-1]), dtype=np.int8)
        for s in np.flatnonzero(multi & (resp > 16)):
            L = int(resp[s])
            base = int(r_off[s])
            max_len = max(5, L // 8)
            for k in range(int(n_calls[s])):
                st = int(u_start[s, k] * (L - 8))
                ln = 4 + int(u_len[s, k] * (max_len - 4))
                mask[base + st: base + min(L, st + ln)] = 0
        lp32 = -rng.exponential(0.35, int(r_off[-1])).astype(np.float32)
        lp32[mask == 0] = 0.0
        logprobs = lp32.astype(np.float64)  # float32 values, float64 reprs

        binary = rng.random(ns) < 0.7
        reward = np.where(binary, rng.integers(0, 2, ns).astype(np.float64),
                          rng.uniform(-1.0, 1.0, ns).astype(np.float32).astype(np.float64))
        status = rng.choice(len(STATUSES), size=ns, p=STATUS_P)
        source = rng.integers(0, len(SOURCES), ns)
        difficulty = rng.integers(1, 6, ns)

        # rollout ids: per group, runs of 2..4 siblings share one explicit id
        explicit = rng.random(n_groups) < a.rollout_id_frac
        run_len = rng.integers(2, 5, (n_groups, n))
        groups = []
        for gi in range(n_groups):
            g = g0 + gi
            ids = [None] * n
            if explicit[gi]:
                i = r = 0
                while i < n:
                    k = int(run_len[gi, r])
                    r += 1
                    if n - (i + k) < 2:  # a run of 1 would be left over: absorb it
                        k = n - i
                    for j in range(i, i + k):
                        ids[j] = self.next_id
                    self.next_id += 1
                    i += k
            prompt = prompt_ids[p_off[gi]:p_off[gi + 1]]
            recs = []
            for j in range(n):
                s = gi * n + j
                lo, hi = int(r_off[s]), int(r_off[s + 1])
                st = int(status[s])
                md = {
                    "source": SOURCES[int(source[s])],
                    "difficulty": int(difficulty[s]),
                    "turns": int(n_calls[s]) + 1 if multi[s] else 1,
                    "finish_reason": FINISH_REASON[st],
                    "weight_version": g // 50,
                }
                if multi[s]:
                    md["tool_calls"] = int(n_calls[s])
                recs.append({
                    "group_index": g,
                    "index": g * n + j,
                    "rollout_id": ids[j],
                    "tokens": np.concatenate((prompt, resp_ids[lo:hi])),
                    "response_length": hi - lo,
                    "reward": float(reward[s]),
                    "loss_mask": mask[lo:hi],
                    "rollout_log_probs": logprobs[lo:hi],
                    "status": STATUSES[st],
                    "metadata": md,
                })
            groups.append(recs)
        return groups


class Stats:
    def __init__(self):
        self.samples = self.groups = self.tokens = self.response_tokens = 0
        self.token_sum = self.mask_sum = self.explicit_ids = self.tool_calls_key = 0
        self.logprob_sum = 0.0
        self.jsonl_bytes = 0

    def add(self, r, nbytes):
        self.samples += 1
        self.tokens += len(r["tokens"])
        self.token_sum += int(r["tokens"].sum(dtype=np.int64))
        self.response_tokens += r["response_length"]
        self.mask_sum += int(r["loss_mask"].sum(dtype=np.int64))
        self.logprob_sum += float(r["rollout_log_probs"].sum())
        self.explicit_ids += r["rollout_id"] is not None
        self.tool_calls_key += "tool_calls" in r["metadata"]
        self.jsonl_bytes += nbytes


def generate(a) -> Stats:
    gen = Generator(a)
    st = Stats()
    tmp = a.out + ".tmp"
    target = None if a.target_mb is None else a.target_mb * 2 ** 20
    done = False
    g = 0
    with open(tmp, "wb") as f:
        while not done:
            lines = []
            for recs in gen.block(g, BLOCK_GROUPS):
                for r in recs:
                    if a.num_samples is not None and st.samples >= a.num_samples:
                        done = True
                        break
                    line = orjson.dumps(r, option=OPTS)
                    lines.append(line)
                    st.add(r, len(line))
                if done:
                    break
                st.groups += 1
                g += 1
                if (target is not None and st.jsonl_bytes >= target) or \
                        (a.num_samples is not None and st.samples >= a.num_samples):
                    done = True
                    break
            f.write(b"".join(lines))
    if a.num_samples is not None and st.samples % a.group_size:
        st.groups += 1  # the last, partial group
    os.replace(tmp, a.out)
    return st


def main(argv=None):
    a = parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    t0 = time.perf_counter()
    st = generate(a)
    dt = time.perf_counter() - t0
    meta = dict(vars(st), generator_version=GEN_VERSION,
                args={k: v for k, v in vars(a).items() if k not in ("out", "quiet")})
    with open(a.out + ".meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    if not a.quiet:
        print(f"{a.out}: {st.samples} samples, {st.tokens} tokens, {st.jsonl_bytes / 2**20:.1f} MiB, "
              f"{st.explicit_ids} explicit rollout_ids, {dt:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
