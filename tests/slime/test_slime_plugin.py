"""rollout_cli.slime: the hooks give what `convert` writes, in slime's key names and types."""
from __future__ import annotations

import copy
import inspect
import logging
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
import slime_reference
from conftest import SAMPLE_DATA, copts, make_sample, read_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from slime_sample import Sample

from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.core.schema import SLIME_KEYS
from rollout_cli.inputs.discover import discover
from rollout_cli.inputs.registry import read_input
from rollout_cli.run.convert import convert
from rollout_cli.slime import convert_samples_to_train_data, post_process_rewards

FORMATS = ("jsonl", "parquet", "pt")
# slime-spec section 6: the per-sample keys the DP split slices, and the whole-batch raw_reward
SPLIT_KEYS = {
    "tokens", "multimodal_train_inputs", "response_lengths", "rewards", "truncated", "loss_masks", "round_number",
    "sample_indices", "rollout_ids", "rollout_mask_sums", "rollout_log_probs", "rollout_top_p_token_ids",
    "rollout_top_p_token_offsets", "rollout_routed_experts", "source_names", "prompt", "teacher_log_probs", "raw_reward",
}
ALWAYS = {"tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "rollout_ids",
          "loss_masks", "rollout_mask_sums", "source_names"}
# slime-spec section 3b: the insertion order of slime's own converter
SLIME_ORDER = ["tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "rollout_ids",
               "loss_masks", "rollout_mask_sums", "round_number", "rollout_log_probs", "rollout_top_p_token_ids",
               "rollout_top_p_token_offsets", "rollout_routed_experts", "metadata", "multimodal_train_inputs",
               "teacher_log_probs", "source_names"]


def slime_args(**kw):
    d = dict(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
             n_samples_per_prompt=4, reward_key=None, rollout_batch_size=4, rollout_top_p=1.0)
    d.update(kw)
    return SimpleNamespace(**d)


def batch(fmt: str, step: int, root=None) -> list[Sample]:
    inputs, _, _ = discover([str(root or SAMPLE_DATA / fmt / "rollout_data")])
    inp = next(i for i in inputs if i.split == "train" and i.step == step)
    return [Sample.from_dict(r) for c in read_input(inp) for r in _records(c)]


def _records(chunk) -> list[dict]:
    """The chunk's samples as dicts, from either reader form (Parquet chunks are columnar)."""
    if chunk.records is not None:
        return chunk.records
    cols = {name: chunk.values(name) for name in chunk.columns}
    return [{name: vals[i] for name, vals in cols.items()} for i in range(len(chunk))]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    outs = {}
    for fmt in FORMATS:
        out = tmp_path_factory.mktemp("plugin") / fmt
        convert([str(SAMPLE_DATA / fmt / "rollout_data")], str(out), copts())
        outs[fmt] = out
    return outs


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("step", [1, 2, 3])
def test_dict_equals_convert_rows(converted, fmt, step):
    samples = batch(fmt, step)
    d = convert_samples_to_train_data(slime_args(), samples)
    rows = read_rows(converted[fmt], step=step)
    assert len(rows) == len(samples)
    compared = set()
    for col, key in SLIME_KEYS.items():
        if key not in d:
            continue
        got = d[key]
        want = [r[col] for r in rows]
        if col == "truncated":
            want = [int(v) for v in want]
        if col == "rollout_routed_experts":
            want = [np.asarray(r[col], dtype=np.int32).reshape(r["rollout_routed_experts_shape"]) for r in rows]
            got = [t.numpy() for t in got]
            assert all(g.dtype == np.int32 and (g == w).all() for g, w in zip(got, want))
        elif col == "train_metadata":
            assert got == [orjson.loads(w) if w is not None else None for w in want]
        else:
            assert got == want, key
        compared.add(key)
    # every optional column convert filled for this step is in the dict, and no other
    filled = {SLIME_KEYS[c] for c in SLIME_KEYS if c in rows[0] and any(r[c] is not None for r in rows)}
    assert filled - {"total_lengths"} == set(d), (filled, set(d))
    assert compared == set(d)


@pytest.mark.parametrize("step", [1, 2, 3])
def test_dict_has_every_key_the_split_reads_in_slime_types(step):
    samples = batch("pt", step)
    d = convert_samples_to_train_data(slime_args(), samples)
    assert ALWAYS <= set(d)
    assert set(d) - {"metadata"} <= SPLIT_KEYS
    assert list(d) == [k for k in SLIME_ORDER if k in d]
    n = len(samples)
    assert all(len(v) == n for v in d.values())
    assert all(type(t) is list and all(type(x) is int for x in t) for t in d["tokens"])
    assert all(type(x) is float for x in d["rewards"] + d["raw_reward"])
    assert all(type(x) is int for x in d["rollout_mask_sums"] + d["rollout_ids"] + d["response_lengths"])
    assert set(d["truncated"]) <= {0, 1}
    assert all(len(m) == rl for m, rl in zip(d["loss_masks"], d["response_lengths"]))
    assert not any(np.isnan(d["rewards"]))
    # mask sums: per rollout, over its samples' masks
    for i, rid in enumerate(d["rollout_ids"]):
        assert d["rollout_mask_sums"][i] == sum(sum(m) for m, r in zip(d["loss_masks"], d["rollout_ids"]) if r == rid)


def test_samples_with_tensors_give_the_same_dict():
    import torch
    plain = batch("jsonl", 3)
    tensors = copy.deepcopy(plain)
    for s in tensors:
        s.tokens = torch.tensor(s.tokens)
        s.rollout_log_probs = torch.tensor(s.rollout_log_probs, dtype=torch.bfloat16).float()
        s.rollout_top_p_token_ids = torch.tensor(s.rollout_top_p_token_ids, dtype=torch.int32)
        s.rollout_routed_experts = torch.tensor(s.rollout_routed_experts, dtype=torch.int32)
    a, b = convert_samples_to_train_data(slime_args(), plain), convert_samples_to_train_data(slime_args(), tensors)
    assert a["tokens"] == b["tokens"] and a["rollout_ids"] == b["rollout_ids"]
    assert a["rollout_top_p_token_ids"] == b["rollout_top_p_token_ids"]
    assert all((x == y).all() for x, y in zip(a["rollout_routed_experts"], b["rollout_routed_experts"]))
    assert b["rollout_log_probs"] == [s.rollout_log_probs.tolist() for s in tensors]


def test_a_field_on_some_samples_only_fails_naming_field_and_samples():
    samples = batch("jsonl", 1)
    for k in (3, 7):
        samples[k].rollout_log_probs = None
    with pytest.raises(InvalidInputError) as e:
        convert_samples_to_train_data(slime_args(), samples)
    msg = str(e.value)
    assert "rollout_log_probs: set on 14 of 16 samples" in msg
    assert "missing on batch positions 3 (index 3), 7 (index 7)" in msg
    samples = batch("jsonl", 2)
    del samples[0].metadata["round_number"]
    with pytest.raises(InvalidInputError, match=r"metadata.round_number: set on 14 of 15 samples, missing on batch positions 0 \(index 16\)"):
        convert_samples_to_train_data(slime_args(), samples)


def test_top_p_replay_needs_the_top_p_fields():
    with pytest.raises(InvalidInputError, match="rollout_top_p_token_ids: --rollout-top-p 0.9 needs it on every sample"):
        convert_samples_to_train_data(slime_args(rollout_top_p=0.9), batch("jsonl", 1))
    assert "rollout_top_p_token_ids" in convert_samples_to_train_data(slime_args(rollout_top_p=0.9), batch("jsonl", 3))


def test_invalid_sample_names_position_and_field():
    samples = batch("jsonl", 1)
    samples[5].loss_mask = samples[5].loss_mask[:-1]
    with pytest.raises(InvalidInputError, match=r"slime batch:sample 5: loss_mask: expected length"):
        convert_samples_to_train_data(slime_args(), samples)
    samples = batch("jsonl", 1)
    samples[2].reward = float("nan")
    with pytest.raises(InvalidInputError, match=r"slime batch:sample 2: reward: expected a finite number"):
        post_process_rewards(slime_args(), samples)


def reuse_batch() -> list[Sample]:
    # two executions of different prompt groups both stamp explicit id 0
    return [Sample.from_dict(make_sample(index=i, group_index=i // 2, rollout_id=0, reward=float(i % 2))) for i in range(4)]


def test_id_scope_from_the_environment(monkeypatch):
    with pytest.raises(InvalidInputError, match="explicit id 0 is used by samples of different prompt groups"):
        convert_samples_to_train_data(slime_args(n_samples_per_prompt=2), reuse_batch())
    monkeypatch.setenv("ROLLOUT_CLI_ROLLOUT_ID_SCOPE", "group")
    assert convert_samples_to_train_data(slime_args(n_samples_per_prompt=2), reuse_batch())["rollout_ids"] == [0, 0, 1, 1]
    monkeypatch.setenv("ROLLOUT_CLI_ROLLOUT_ID_SCOPE", "step")
    d = convert_samples_to_train_data(slime_args(n_samples_per_prompt=2), reuse_batch())
    assert d["rollout_ids"] == [0, 0, 0, 0] and d["rollout_mask_sums"] == [8] * 4
    monkeypatch.setenv("ROLLOUT_CLI_ROLLOUT_ID_SCOPE", "loose")
    with pytest.raises(UsageError, match="ROLLOUT_CLI_ROLLOUT_ID_SCOPE: expected one of strict, step, group, got 'loose'"):
        convert_samples_to_train_data(slime_args(), reuse_batch())


def test_slime_compat_from_the_environment(monkeypatch):
    import torch  # noqa: F401  (the test extra installs it)
    samples = batch("jsonl", 2)  # ragged groups: slime normalises the whole batch as one row
    own = post_process_rewards(slime_args(), samples)[1]
    monkeypatch.setenv("ROLLOUT_CLI_SLIME_COMPAT", "1")
    compat = post_process_rewards(slime_args(), samples)[1]
    x = np.asarray([s.reward for s in samples], dtype=np.float32)
    want = (x - x.mean()) / (x.std(ddof=1) + np.float32(1e-6))
    assert np.allclose(compat, want, atol=1e-6) and not np.allclose(own, want, atol=1e-3)
    monkeypatch.setenv("ROLLOUT_CLI_SLIME_COMPAT", "maybe")
    with pytest.raises(UsageError, match="ROLLOUT_CLI_SLIME_COMPAT: expected"):
        post_process_rewards(slime_args(), samples)


def test_slime_compat_logs_a_batch_normalised_as_one_group(caplog, monkeypatch):
    monkeypatch.setenv("ROLLOUT_CLI_SLIME_COMPAT", "1")
    samples = batch("jsonl", 1)
    with caplog.at_level(logging.INFO, logger="rollout_cli.slime"):
        post_process_rewards(slime_args(rollout_batch_size=len(samples)), samples)  # not 4 x size
        post_process_rewards(slime_args(n_samples_per_prompt=1, rollout_batch_size=len(samples)), samples)
    lines = [r.getMessage() for r in caplog.records if "normalised" in r.getMessage()]
    assert lines == [f"rollout_cli.slime: this batch: {len(samples)} samples, not 4 × {len(samples)}: "
                     "normalised as one group, as slime does"]


def test_settings_are_logged_once(caplog, monkeypatch):
    monkeypatch.setenv("ROLLOUT_CLI_ROLLOUT_ID_SCOPE", "group")  # a value no other test logs first
    monkeypatch.setattr("rollout_cli.slime.plugin._logged", set())
    with caplog.at_level(logging.INFO, logger="rollout_cli.slime"):
        for _ in range(3):
            convert_samples_to_train_data(slime_args(), batch("jsonl", 1))
    lines = [r.getMessage() for r in caplog.records if "settings" in r.getMessage()]
    assert len(lines) == 1 and '"rollout_id_scope": "group"' in lines[0] and '"n_samples_per_prompt": 4' in lines[0]


def test_post_process_rewards_matches_convert(converted):
    samples = batch("jsonl", 2)
    raw, rewards = post_process_rewards(slime_args(), samples)
    rows = read_rows(converted["jsonl"], step=2)
    assert rewards == [r["reward"] for r in rows]
    assert raw == [float(s.reward) for s in samples]
    assert len(raw) == len(rewards) == len(samples)


def test_post_process_rewards_one_sample_group_and_reward_key():
    samples = [Sample.from_dict(make_sample(index=0, group_index=0, reward={"acc": 1.0, "fmt": 0.5}))]
    samples += [Sample.from_dict(make_sample(index=i, group_index=1, reward={"acc": float(i % 2), "fmt": 0.0})) for i in (1, 2)]
    raw, rewards = post_process_rewards(slime_args(reward_key="acc", n_samples_per_prompt=2), samples)
    assert raw == [1.0, 1.0, 0.0]
    assert rewards[0] == 0.0 and rewards[1] == -rewards[2] and rewards[1] > 0
    with pytest.raises(InvalidInputError, match="pass --reward-key"):
        post_process_rewards(slime_args(), samples)


def test_disabled_normalisation_and_estimators():
    samples = batch("jsonl", 1)
    raw = [float(s.reward) for s in samples]
    assert post_process_rewards(slime_args(rewards_normalization=False), samples)[1] == raw
    assert post_process_rewards(slime_args(advantage_estimator="ppo"), samples)[1] == raw
    centred = post_process_rewards(slime_args(advantage_estimator="reinforce_plus_plus_baseline"), samples)[1]
    assert set(np.round(centred, 4)) <= {0.0, 0.75, -0.25, 0.25, -0.75, 0.5, -0.5}


def test_import_starts_nothing_heavy():
    code = "import sys, rollout_cli.slime; assert 'torch' not in sys.modules and 'typer' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def fanout_batch() -> list[Sample]:
    # group 0: rollout 10 emits three samples (reward 1), rollout 11 one (reward 0)
    rows = [make_sample(index=i, group_index=0, rollout_id=10, reward=1.0) for i in range(3)]
    rows.append(make_sample(index=3, group_index=0, rollout_id=11, reward=0.0))
    return [Sample.from_dict(r) for r in rows]


def test_reward_baseline_from_the_environment(monkeypatch):
    sample_rule = post_process_rewards(slime_args(), fanout_batch())[1]
    assert sample_rule == pytest.approx([0.499999] * 3 + [-1.499997], abs=2e-6)
    monkeypatch.setenv("ROLLOUT_CLI_REWARD_BASELINE", "rollout")
    d = convert_samples_to_train_data(slime_args(), fanout_batch())
    assert d["rewards"] == pytest.approx([0.7071057558059692] * 3 + [-0.7071057558059692], abs=2e-6)
    batch_ = fanout_batch()
    batch_[1].reward = 0.0
    with pytest.raises(InvalidInputError, match="rollout 10: its samples carry different rewards 1.0, 0.0, 1.0"):
        post_process_rewards(slime_args(), batch_)
    monkeypatch.setenv("ROLLOUT_CLI_SIBLING_REWARD", "mean")
    assert post_process_rewards(slime_args(), batch_)[1][0] == pytest.approx(0.7071057558059692, abs=2e-6)
    monkeypatch.setenv("ROLLOUT_CLI_REWARD_BASELINE", "prompt")
    with pytest.raises(UsageError, match="ROLLOUT_CLI_REWARD_BASELINE: expected one of sample, rollout"):
        post_process_rewards(slime_args(), fanout_batch())


# slime's runtime-hook contract (slime@624b824a:tests/plugin_contracts/
# test_plugin_runtime_hook_contracts.py): a bare args object and samples that carry only index,
# reward, tokens, response_length, status and loss_mask.
def bare_args():
    return type("Args", (), {})()


def contract_sample(index: int, reward: float = 1.0) -> Sample:
    return Sample(index=index, reward=reward, tokens=[index, index + 1], response_length=2,
                  status=Sample.Status.COMPLETED, loss_mask=[1, 1])


def contract_batch() -> list[Sample]:
    return [contract_sample(0, 0.5), contract_sample(1, 1.5)]


@pytest.mark.parametrize("hook", [post_process_rewards, convert_samples_to_train_data])
def test_hooks_have_slimes_signature(hook):
    assert tuple(inspect.signature(hook).parameters) == ("args", "samples")


def test_reward_hook_as_slimes_contract_calls_it():
    raw, rewards = post_process_rewards(bare_args(), contract_batch())
    # slime's defaults: n_samples_per_prompt 1 (so no std scaling), no rollout_batch_size, so
    # the batch is one row: mean-centred over both samples
    assert raw == [0.5, 1.5] and rewards == [-0.5, 0.5]
    assert all(type(x) is float for x in raw + rewards)
    assert (raw, rewards) == slime_reference.post_process_rewards([s.to_dict() for s in contract_batch()],
                                                                  rollout_batch_size=0)


def test_convert_hook_as_slimes_contract_calls_it():
    d = convert_samples_to_train_data(bare_args(), contract_batch())
    assert d == {
        "tokens": [[0, 1], [1, 2]], "response_lengths": [2, 2], "rewards": [-0.5, 0.5], "raw_reward": [0.5, 1.5],
        "truncated": [0, 0], "sample_indices": [0, 1], "rollout_ids": [0, 1], "loss_masks": [[1, 1], [1, 1]],
        "rollout_mask_sums": [2, 2], "source_names": ["unknown", "unknown"],
    }
    assert list(d) == [k for k in SLIME_ORDER if k in d]
    assert {"tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "loss_masks"} <= set(d)
    assert all(type(x) is int for x in d["response_lengths"] + d["truncated"] + d["sample_indices"] + d["rollout_ids"])
    assert all(type(x) is float for x in d["rewards"] + d["raw_reward"])
    assert d == slime_reference.convert_samples_to_train_data([s.to_dict() for s in contract_batch()],
                                                              rollout_batch_size=0)


def test_missing_args_take_slimes_defaults():
    # rollout_batch_size 2 and the default n 1: the batch is n x rbs, so each sample is its own row
    args = SimpleNamespace(rollout_batch_size=2)
    assert post_process_rewards(args, contract_batch())[1] == [0.0, 0.0]
    # given args win over the defaults; n 2 turns std scaling back on
    assert post_process_rewards(SimpleNamespace(n_samples_per_prompt=2), contract_batch())[1] == pytest.approx(
        [-0.7071057558059692, 0.7071057558059692], abs=2e-6)
    assert post_process_rewards(SimpleNamespace(rewards_normalization=False), contract_batch())[1] == [0.5, 1.5]
    with pytest.raises(InvalidInputError, match="rollout_top_p_token_ids: --rollout-top-p 0.9 needs it"):
        convert_samples_to_train_data(SimpleNamespace(rollout_top_p=0.9), contract_batch())


def ungrouped_batch(rewards: list[float]) -> list[Sample]:
    return [contract_sample(i, r) for i, r in enumerate(rewards)]


@pytest.mark.parametrize("n, rbs, want", [
    (2, 2, [-0.7071057, 0.7071057, -0.7071057, 0.7071057]),  # 4 == 2 x 2: rows of 2 consecutive samples
    (2, 3, [-0.9258193, 0.0, -0.4629096, 1.3887290]),  # 4 != 2 x 3: the whole batch is one row
    (2, None, [-0.9258193, 0.0, -0.4629096, 1.3887290]),  # no rbs: the whole batch
])
def test_samples_without_group_index_are_grouped_as_slime_does(n, rbs, want):
    args = SimpleNamespace(n_samples_per_prompt=n) if rbs is None else SimpleNamespace(n_samples_per_prompt=n,
                                                                                       rollout_batch_size=rbs)
    got = post_process_rewards(args, ungrouped_batch([0.0, 1.0, 0.5, 2.5]))[1]
    assert got == pytest.approx(want, abs=2e-6)
    assert convert_samples_to_train_data(args, ungrouped_batch([0.0, 1.0, 0.5, 2.5]))["rewards"] == got


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    rewards=st.lists(st.sampled_from([0.0, 0.25, 1.0, 3.0, -2.0]), min_size=2, max_size=12),
    n=st.integers(1, 4), rbs=st.one_of(st.none(), st.integers(1, 6)),
    estimator=st.sampled_from(["grpo", "gspo", "cispo", "reinforce_plus_plus_baseline", "ppo"]),
)
def test_ungrouped_rewards_equal_slimes_rule(rewards, n, rbs, estimator):
    """Without group_index, under any n and rollout_batch_size (missing: slime's defaults), the
    rewards are slime's own (its reference re-implementation), up to float32 rounding."""
    args = SimpleNamespace(n_samples_per_prompt=n, advantage_estimator=estimator)
    if rbs is not None:
        args.rollout_batch_size = rbs
    raw, got = post_process_rewards(args, ungrouped_batch(rewards))
    want_raw, want = slime_reference.post_process_rewards(
        [s.to_dict() for s in ungrouped_batch(rewards)], advantage_estimator=estimator, n_samples_per_prompt=n,
        rollout_batch_size=rbs or 0)
    assert raw == want_raw
    assert got == pytest.approx(want, abs=2e-6)


def test_a_field_slime_needs_fails_once_naming_field_and_positions():
    samples = ungrouped_batch([0.0, 1.0, 0.5, 2.5])
    samples[0].reward = samples[2].reward = None
    with pytest.raises(InvalidInputError) as e:
        post_process_rewards(bare_args(), samples)
    assert str(e.value) == ("2 invalid samples in the batch: reward: expected a number, got null "
                            "on batch positions 0 (index 0), 2 (index 2)")
    records = [s.to_dict() for s in ungrouped_batch([0.0, 1.0, 0.5])]
    del records[1]["response_length"], records[2]["response_length"]
    with pytest.raises(InvalidInputError, match=r"^2 invalid samples in the batch: response_length: missing "
                                                r"on batch positions 1 \(index 1\), 2 \(index 2\)$"):
        convert_samples_to_train_data(bare_args(), records)
