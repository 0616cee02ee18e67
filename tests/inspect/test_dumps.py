"""inspect on dumps (rollout_cli.inspect.dumps): the rows, ids, rewards and mask sums are the ones convert writes."""
from __future__ import annotations

import pytest

from inspect_samples import DATA, FORMATS, assert_rows_equal, converted_rows, do_convert, rows_of, sample, write_jsonl
from rollout_cli.core.errors import InvalidInputError
from rollout_cli.inspect import inspect_paths


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("split", ["train", "eval"])
def test_rows_match_convert(tmp_path, fmt, split):
    out = do_convert([DATA / fmt], tmp_path / "out")
    assert_rows_equal(rows_of([DATA / fmt], split=split), converted_rows(out, split))


@pytest.mark.parametrize(
    "opts",
    [
        {"advantage_estimator": "reinforce_plus_plus_baseline"},
        {"advantage_estimator": "ppo"},
        {"grpo_std_normalization": False},
        {"rewards_normalization": False},
        {"n_samples_per_prompt": 4},
        {"rollout_id_scope": "step"},
        {"rollout_id_scope": "group"},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_rows_match_convert_with_options(tmp_path, opts):
    out = do_convert([DATA / "jsonl"], tmp_path / "out", **opts)
    assert_rows_equal(rows_of([DATA / "jsonl"], **opts), converted_rows(out))


def test_rows_match_convert_reward_key(tmp_path):
    src = DATA / "reward_dict" / "jsonl"
    out = do_convert([src], tmp_path / "out", reward_key="accuracy")
    assert_rows_equal(rows_of([src], reward_key="accuracy"), converted_rows(out))


@pytest.mark.parametrize("scope", ["step", "group"])
def test_reused_ids_match_convert(tmp_path, scope):
    f = write_jsonl(tmp_path / "in" / "5.jsonl", [
        sample(0, 0, 7, 1.0), sample(1, 0, 7, 0.0), sample(2, 0, None, 1.0),
        sample(3, 1, 7, 0.0), sample(4, 1, None, 1.0), sample(5, 1, 0, 1.0),
    ])
    out = do_convert([f], tmp_path / "out", rollout_id_scope=scope)
    assert_rows_equal(rows_of([f], rollout_id_scope=scope), converted_rows(out))


def test_invalid_samples_are_left_out_as_convert_skip_does(tmp_path):
    f = write_jsonl(tmp_path / "in" / "2.jsonl", [
        sample(0, 0, None, 1.0), sample(1, 0, 4, 0.0, mask=[1, 1]), sample(2, 0, 4, 1.0), sample(3, 0, None, 0.0),
        sample(4, 1, None, 1.0, status="weird"), sample(5, 1, None, 0.0), sample(6, 1, None, 0.5),
    ])
    with pytest.raises(InvalidInputError):
        do_convert([f], tmp_path / "fail")
    out = do_convert([f], tmp_path / "out", on_error="skip")
    assert_rows_equal(rows_of([f]), converted_rows(out))
    r = inspect_paths([str(f)])
    s = r["summary"]
    assert (s["samples"], s["rows"], s["rejected"]) == (7, 4, 3)
    kinds = [a["kind"] for a in r["anomalies"]]
    assert kinds.count("loss_mask_length") == 1 and kinds.count("invalid_sample") == 1 and kinds.count("rejected_sibling") == 1
    lm = next(a for a in r["anomalies"] if a["kind"] == "loss_mask_length")
    assert lm["where"] == [{"file": str(f), "line": 2}] and lm["level"] == "error" and lm["rollout_id"] == 4
    # the same anomalies come back from the converted output's rejects.jsonl
    r2 = inspect_paths([str(out)])
    assert sorted(a["kind"] for a in r2["anomalies"] if a["kind"] in ("loss_mask_length", "invalid_sample", "rejected_sibling")) == \
        ["invalid_sample", "loss_mask_length", "rejected_sibling"]
    assert (r2["summary"]["samples"], r2["summary"]["rows"], r2["summary"]["rejected"]) == (7, 4, 3)
