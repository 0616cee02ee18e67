"""bench/loader.py: its consumer reads every byte, its balance figures are what they say, and
its quick mode runs end to end (generation, conversion, the three methods, the balance against
slime's partitioner) and writes the JSON summary (keys checked, not timings)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import loader as bench  # noqa: E402


def test_touch_is_the_xor_of_every_byte():
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 13, 1000):
        a = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
        want = 0
        for byte in a.tobytes():
            want ^= byte
        folded = bench.touch(a)
        got = 0
        for k in range(8):  # the uint64 word's bytes and the tail's, folded to one byte
            got ^= (folded >> (8 * k)) & 0xFF
        assert got == want
        if n:  # a changed byte anywhere changes it
            b = a.copy()
            b.view(np.uint8)[-1] ^= 0x5A
            assert bench.touch(b) != folded


def test_imbalance_and_the_bound_of_the_largest_unit():
    assert bench.imbalance([10, 10, 10]) == 1.0
    assert bench.imbalance([30, 0, 0]) == pytest.approx(3.0)
    assert bench.imbalance([0, 0]) == 1.0
    # one rollout of 60 tokens out of 100, 4 ranks: no whole split goes under 60 / 25
    assert bench.unit_bound([60, 10, 10, 10, 10], 4) == pytest.approx(2.4)
    assert bench.unit_bound([10] * 8, 4) == 1.0


def test_slime_partitioner_pads_to_equal_counts():
    imb, pad = bench.slime_imbalance([5, 5, 5, 5], 2)
    assert (imb, pad) == (1.0, 0)
    imb, pad = bench.slime_imbalance([9, 1, 1], 2)  # 3 samples on 2 ranks: one zero-length entry
    assert pad == 1 and imb == pytest.approx(9 / 5.5)


def test_quick_mode_writes_the_summary(tmp_path):
    results = tmp_path / "loader.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "loader.py"), "--quick", "--no-gpu",
                        "--data-dir", str(tmp_path / "data"), "--results", str(results)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(results.read_text())
    assert {"config", "served", "same_samples", "throughput", "balance", "gpu", "ratio_iter_torch",
            "ratio_iter_numpy", "ratio_iter_per_rank", "target_ratio", "meets"} <= set(res)
    assert set(res["meets"]) == {"throughput_torch", "throughput_numpy", "throughput_per_rank", "balance", "gpu"}
    assert res["meets"]["gpu"] is None
    assert res["same_samples"] is True and res["gpu"] is None
    c = res["config"]
    assert (c["steps"], c["shards"], c["world_size"], c["max_tokens"], c["quick"]) == (3, 2, 3, 2048, True)
    assert set(res["throughput"]) == set(bench.METHODS)
    for r in res["throughput"].values():
        assert {"wall_s", "cpu_s", "tokens", "bytes", "batches", "tokens_per_s", "ratio_to_load"} <= set(r)
        assert r["tokens"] == res["served"]["load"]["tokens"] > 0
    b = res["balance"]
    assert b["steps_total"] == 3 and len(b["steps"]) == 3
    for s in b["steps"]:
        assert {"imbalance", "slime_imbalance", "bound", "limit", "ok", "tokens_per_rank"} <= set(s)
        assert len(s["tokens_per_rank"]) == 3 and sum(s["tokens_per_rank"]) == s["tokens"]
        assert s["imbalance"] >= s["bound"] - 1e-9  # nothing keeps rollouts whole below the bound
    assert "loader: 3 steps, 2 shards -> world size 3" in p.stdout
