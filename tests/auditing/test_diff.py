"""Field comparisons and divergence records: exact lists (NaN equals NaN), the first
difference located, rewards within float32 tolerance, one line per record for people."""
from __future__ import annotations

import numpy as np

from rollout_cli.auditing import diff


def test_array_diff():
    a = np.array([1, 2, 3], dtype=np.int32)
    assert diff.array_diff(a, np.array([1, 2, 3], dtype=np.int64)) is None
    assert diff.array_diff(a, np.array([1, 5, 7])) == {"index": 1, "expected": 2, "got": 5, "differing": 2}
    assert diff.array_diff(a, np.array([1, 2])) == {"expected": {"length": 3}, "got": {"length": 2}}
    assert diff.array_diff(a, None) == {"expected": {"length": 3}, "got": None}
    f = np.array([np.nan, -1.0], dtype=np.float32)
    assert diff.array_diff(f, np.array([np.nan, -1.0])) is None
    assert diff.array_diff(f, np.array([0.0, -1.0]))["index"] == 0
    # a float64 copy of float32 values (a JSON log) equals them at float32
    assert diff.array_diff(np.array([-0.1], dtype=np.float32), np.array([-0.1])) is None
    assert diff.array_diff(np.array([-0.1], dtype=np.float32), np.array([-0.1001])) is not None


def test_reward_tolerance_is_float32():
    x = np.float32(0.70710546)
    assert diff.reward_diff(float(x), float(np.nextafter(x, np.float32(1)))) is None  # one float32 step
    assert diff.reward_diff(0.7071, 0.7072) == {"expected": 0.7071, "got": 0.7072}
    assert diff.reward_diff(0.0, 5e-7) is None and diff.reward_diff(0.0, 5e-6) is not None
    assert diff.reward_diff(float("nan"), float("nan")) is None
    assert diff.reward_diff(1.0, {"score": 1.0}) == {"expected": 1.0, "got": {"score": 1.0}}
    assert diff.reward_diff(1.0, True) is not None


def test_exact_diff_and_json_values():
    assert diff.exact_diff(3, 3) is None and diff.exact_diff(3, np.int64(3)) is None
    assert diff.exact_diff(3, "3") == {"expected": 3, "got": "3"}
    assert diff.exact_diff(3, float("inf")) == {"expected": 3, "got": None}


def test_record_and_line():
    r = diff.record(2, 5, "loss_mask", "d/2.pt:sample 5", "t/2.pt", {"index": 3, "expected": 1, "got": 0, "differing": 4})
    assert r == {"step": 2, "rollout_position": 5, "rollout_id": None, "field": "loss_mask", "train_field": "loss_masks",
                 "rollout": "d/2.pt:sample 5", "train": "t/2.pt", "expected": 1, "got": 0, "index": 3, "differing": 4}
    assert diff.describe(r) == "d/2.pt:sample 5: loss_mask[3]: expected 1, got 0 (4 positions differ) (train t/2.pt)"
    m = diff.record(2, None, "missing", "d/2.pt", None, {"expected": "step 2", "got": None})
    assert diff.describe(m) == "d/2.pt: missing: no train dump of this step"
    e = diff.record(2, 9, "extra", None, "t/2.pt", {"got": "a training sample"})
    assert diff.describe(e) == "step 2: extra: the trainer has a sample at position 9, the rollout dump none (train t/2.pt)"
