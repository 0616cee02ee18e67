"""inspect on dumps (rollout_cli.inspection.dumps): the rows, ids, rewards and mask sums are the ones convert writes."""
from __future__ import annotations

import orjson
import pytest

from inspect_samples import DATA, FORMATS, assert_rows_equal, converted_rows, do_convert, rows_of, sample, write_jsonl
from rollout_cli.core.errors import InvalidInputError
from rollout_cli.inspection import inspect_paths


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
    # each carries the id of the rule it breaks
    assert lm["rule"] == "loss_mask.length"
    assert next(a for a in r["anomalies"] if a["kind"] == "invalid_sample")["rule"] == "status.unknown"
    # the same anomalies come back from the converted output's rejects.jsonl
    r2 = inspect_paths([str(out)])
    assert sorted(a["kind"] for a in r2["anomalies"] if a["kind"] in ("loss_mask_length", "invalid_sample", "rejected_sibling")) == \
        ["invalid_sample", "loss_mask_length", "rejected_sibling"]
    assert (r2["summary"]["samples"], r2["summary"]["rows"], r2["summary"]["rejected"]) == (7, 4, 3)


# ------------------------------------------------------ the same stage functions as convert, sample by sample


def _per_sample(t) -> dict:
    """(step, sample_index) -> (rollout_id, reward bits, rollout_mask_sum)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    bits = pc.cast(t.column("reward"), pa.float32()).to_numpy(zero_copy_only=False).view(np.uint32).tolist()
    keys = zip(t.column("step").to_pylist(), t.column("sample_index").to_pylist())
    vals = zip(t.column("rollout_id").to_pylist(), bits, t.column("rollout_mask_sum").to_pylist())
    return dict(zip(keys, vals))


@pytest.mark.parametrize("scope", ["strict", "step", "group"])
def test_every_sample_agrees_with_a_sharded_convert(tmp_path, scope):
    # 700 samples: several of inspect's 256-record chunks; explicit, missing and reused ids; an
    # invalid sample; rows reordered across 3 shards
    from conftest import make_sample, write_pt

    rows = []
    for i in range(700):
        g = i // 5
        rid = None if i % 7 == 0 else (g * 3 + i % 2 if i % 11 else 9)  # id 9 is reused by many groups
        rows.append(sample(i, g, rid, float((i * 37) % 5) / 4, rl=1 + i % 4))
    rows[301]["loss_mask"] = [1]  # wrong length: rejected with its rollout
    write_jsonl(tmp_path / "in" / "4.jsonl", rows)
    write_pt(tmp_path / "in" / "dump_9.pt", [make_sample(index=1000 + k, group_index=k // 3, reward=float(k % 2),
                                                              response_length=1 + k % 3) for k in range(30)], 6)
    opts = {"rollout_id_scope": scope}
    out = do_convert([tmp_path / "in"], tmp_path / "out", shards=3, on_error="skip", workers=1, **opts)
    inspected = _per_sample(rows_of([tmp_path / "in"], **opts))
    written = _per_sample(converted_rows(out))
    assert {s for s, _ in inspected} == {4, 6}
    assert len(inspected) > 600 and inspected == written


def test_record_step_field_is_checked_as_convert_does(tmp_path):
    f = write_jsonl(tmp_path / "5.jsonl", [sample(0, 0, None, 1.0), sample(1, 0, None, 0.0, step=6), sample(2, 1, None, 1.0)])
    with pytest.raises(InvalidInputError):
        do_convert([f], tmp_path / "fail")
    out = do_convert([f], tmp_path / "out", on_error="skip")
    assert_rows_equal(rows_of([f]), converted_rows(out))
    bad = [a for a in inspect_paths([str(f)])["anomalies"] if a["kind"] == "invalid_sample"]
    assert [(a["field"], a["where"]) for a in bad] == [("step", [{"file": str(f), "line": 2}])]


def test_pt_payload_step_rules_match_convert(tmp_path):
    from conftest import make_sample, write_pt

    from rollout_cli.inspection import InspectOptions, iter_steps

    def samples():
        return [make_sample(index=i, group_index=0, reward=float(i % 2)) for i in range(2)]

    # the payload's step wins over the name: --steps selects by it, in both
    write_jsonl(tmp_path / "a" / "1.jsonl", [sample(0, 0), sample(1, 0, reward=0.0)])
    write_pt(tmp_path / "a" / "dump_2.pt", samples(), 5)
    for steps in ("1:2", "5", None):
        out = do_convert([tmp_path / "a"], tmp_path / f"out-{steps}", steps=steps)
        assert [sd.step for sd in iter_steps([str(tmp_path / "a")], InspectOptions(steps=steps))] == \
            sorted({s["step"] for s in orjson.loads((out / "manifest.json").read_bytes())["steps"]})
    # a step given twice (once by a payload) is refused by the same rule (convert names the two
    # inputs in the order its workers finish them)
    write_pt(tmp_path / "b" / "latest.pt", samples(), 1)
    write_jsonl(tmp_path / "b" / "1.jsonl", [sample(0, 0)])
    with pytest.raises(InvalidInputError) as by_convert:
        do_convert([tmp_path / "b"], tmp_path / "out-b")
    with pytest.raises(InvalidInputError) as by_inspect:
        inspect_paths([str(tmp_path / "b")])
    for e in (by_convert, by_inspect):
        msg = str(e.value)
        assert msg.startswith("two inputs give train step 1: ") and "latest.pt" in msg and "1.jsonl" in msg


def test_train_side_pt_dump_skipped_as_convert_does(tmp_path):
    import torch

    write_jsonl(tmp_path / "1.jsonl", [sample(0, 0), sample(1, 0, reward=0.0)])
    torch.save({"format_version": 2, "rollout_id": 2, "rank": 0, "samples": [], "dp_shards": [], "raw_reward": []},
               str(tmp_path / "2.pt"))
    res = do_convert_result(tmp_path, tmp_path / "out")
    s = inspect_paths([str(tmp_path)])["summary"]
    assert s["steps"] == 1 and res["counts"]["steps"] == 1
    note = next(n for n in res["notes"] if "train-side" in n)
    assert note in s["notes"]


def do_convert_result(inp, out) -> dict:
    from rollout_cli.run.convert import ConvertOptions, convert

    return convert([str(inp)], str(out), ConvertOptions(overwrite=True, mmap=False, workers=1))
