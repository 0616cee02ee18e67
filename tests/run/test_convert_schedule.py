"""convert --schedule slime end to end: each rank's shard and to_slime_train_data() payload equal
slime's (the conversion reference sliced by the schedule reference), dropped rollouts listed."""
from __future__ import annotations

import json

import pytest
import torch

import slime_cases
import slime_reference as ref
from conftest import copts, read_rows, write_jsonl
from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.loader.load import open_dataset
from rollout_cli.run.convert import convert
from rollout_cli.verification.check import verify_output
from slime_schedule_reference import reference_schedule

_SLICED = ("tokens", "response_lengths", "rewards", "truncated", "sample_indices", "rollout_ids", "loss_masks",
           "rollout_mask_sums", "rollout_log_probs", "teacher_log_probs", "round_number", "source_names")

CASES = [  # (case, schedule options)
    ("mixed_ids", dict(global_batch_size=4, shards=1, micro_batch_size=2)),
    ("mixed_ids", dict(global_batch_size=2, shards=2, use_dynamic_batch_size=True, max_tokens_per_gpu=12)),
    ("mixed_ids", dict(global_batch_size=3, shards=2, use_dynamic_batch_size=True, max_tokens_per_gpu=8, cp_size=2,
                       balance_data=True)),
    ("compact_explicit", dict(global_batch_size=2, shards=2, micro_batch_size=1)),
    ("compact_explicit", dict(global_batch_size=4, shards=4, use_dynamic_batch_size=True, max_tokens_per_gpu=30)),
    ("compact_explicit", dict(global_batch_size=4, shards=2, use_dynamic_batch_size=True, max_tokens_per_gpu=10,
                              vpp_size=2, microbatch_group_size_per_vp_stage=2)),
    ("grpo_default", dict(global_batch_size=4, shards=2, micro_batch_size=2)),
    ("grpo_default", dict(global_batch_size=3, shards=2, use_dynamic_batch_size=True, max_tokens_per_gpu=20,
                          keep_trailing=True)),
    ("removed_sibling", dict(global_batch_size=1, shards=1, micro_batch_size=1)),
]


def _convert_case(name, sched, tmp_path):
    case = slime_cases.fresh_case(name)
    a = case["args"]
    write_jsonl(tmp_path / "in" / "1.jsonl", case["samples"])
    res = convert([str(tmp_path / "in" / "1.jsonl")], str(tmp_path / "out"),
                  copts(n_samples_per_prompt=a["n_samples_per_prompt"], reward_key=a["reward_key"],
                        advantage_estimator=a["advantage_estimator"], schedule="slime", mmap=True, **sched))
    return case, res


@pytest.mark.parametrize("name,sched", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_rank_payloads_equal_slime(name, sched, tmp_path):
    case, res = _convert_case(name, sched, tmp_path)
    a = case["args"]
    slime = ref.tensorize(ref.convert_samples_to_train_data(case["samples"], **a))
    want = reference_schedule(slime["rollout_ids"], [len(t) for t in slime["tokens"]], gbs=sched["global_batch_size"],
                              dp=sched["shards"], mbs=sched.get("micro_batch_size", 1),
                              dynamic=sched.get("use_dynamic_batch_size", False),
                              max_tokens=sched.get("max_tokens_per_gpu"), balance=sched.get("balance_data", False),
                              cp=sched.get("cp_size", 1), vpp=sched.get("vpp_size", 1),
                              mb_group=sched.get("microbatch_group_size_per_vp_stage") or 1,
                              keep_trailing=sched.get("keep_trailing", False))
    ds = open_dataset(tmp_path / "out")
    n_steps = len(want["num_microbatches"])
    for r in range(sched["shards"]):
        part = want["partitions"][r]
        d = ds.load(1, r).to_slime_train_data()
        assert d["partition"] == part
        assert d["micro_batch_indices"] == want["micro_batch_indices"][r]
        assert d["num_microbatches"] == want["num_microbatches"] and len(d["num_microbatches"]) == n_steps
        assert d["global_batch_sizes"] == want["global_batch_sizes"]
        assert d["total_lengths"] == [len(t) for t in slime["tokens"]]  # whole batch, dropped included
        raw = [v[a["reward_key"]] if isinstance(v, dict) else v for v in slime["raw_reward"]]
        assert d["raw_reward"] == raw
        for key in _SLICED:
            if key not in slime:
                continue
            w = slime[key]
            if key == "rollout_mask_sums":
                assert d[key].dtype == torch.float32 and torch.equal(d[key], w[part])
            elif isinstance(w, list) and w and isinstance(w[0], torch.Tensor):
                assert [t.dtype for t in d[key]] == [w[p].dtype for p in part], key
                assert all(torch.equal(x, w[p]) for x, p in zip(d[key], part)), key
            elif key != "rewards":
                assert d[key] == [w[p] for p in part], key
        b = ds.load(1, r)
        assert [m.num_samples for m in b.micro_batches()] == [len(x) for x in want["micro_batch_indices"][r]]
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    sc = m["steps"][0]["schedule"]
    assert {d["rollout_id"]: d["positions"] for d in sc["dropped"]} == want["trailing"]
    assert m["steps"][0]["dropped"] == sum(len(p) for p in want["trailing"].values())
    assert bool(want["trailing"]) == any("slime drops the trailing" in w for w in res["warnings"])
    assert verify_output(str(tmp_path / "out"))["failures"] == []


def test_static_batch_that_does_not_divide_is_exit_3(tmp_path):
    with pytest.raises(InvalidInputError, match=r"step 1, optimizer step 0: 3 samples .* not a multiple of 2") as e:
        _convert_case("mixed_ids", dict(global_batch_size=2, shards=2, micro_batch_size=1), tmp_path)
    assert e.value.exit_code == 3


def test_fewer_rollouts_than_gbs_is_exit_3(tmp_path):
    with pytest.raises(InvalidInputError, match=r"6 rollouts, fewer than the global batch size 9") as e:
        _convert_case("mixed_ids", dict(global_batch_size=9, shards=1), tmp_path)
    assert e.value.exit_code == 3


@pytest.mark.parametrize("kw,msg", [
    (dict(schedule="slime"), "needs --global-batch-size"),
    (dict(global_batch_size=2), "--global-batch-size needs --schedule slime"),
    (dict(schedule="slime", global_batch_size=2, use_dynamic_batch_size=True), "needs --max-tokens-per-gpu"),
    (dict(schedule="slime", num_steps_per_rollout=2), "needs --rollout-batch-size"),
    (dict(schedule="slime", num_steps_per_rollout=2, rollout_batch_size=4, n_samples_per_prompt=2,
          global_batch_size=3), "disagrees"),
    (dict(schedule="slime", global_batch_size=2, vpp_size=2), "microbatch-group-size"),
])
def test_option_checks(kw, msg):
    with pytest.raises(UsageError, match=msg):
        copts(**kw).check()


def test_num_steps_per_rollout_gives_gbs():
    o = copts(schedule="slime", num_steps_per_rollout=2, rollout_batch_size=3, n_samples_per_prompt=2)
    o.check()
    assert o.effective_global_batch_size() == 3


def test_balanced_leaves_the_schedule_columns_null(tmp_path):
    case = slime_cases.fresh_case("mixed_ids")
    write_jsonl(tmp_path / "in" / "1.jsonl", case["samples"])
    convert([str(tmp_path / "in" / "1.jsonl")], str(tmp_path / "out"), copts(n_samples_per_prompt=2, shards=2))
    rows = read_rows(tmp_path / "out")
    assert len(rows) == 8
    assert all(r["optimizer_step"] is None and r["micro_batch"] is None for r in rows)
    assert sorted(r["rollout_position"] for r in rows) == list(range(8))  # input order, kept rows
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "schedule" not in m["options"] and "schedule" not in m["steps"][0] and "dropped" not in m["counts"]
    b = open_dataset(tmp_path / "out").load(1, 0)
    with pytest.raises(UsageError, match="no micro-batch layout"):
        list(b.micro_batches())
    assert "partition" not in b.to_slime_train_data()
