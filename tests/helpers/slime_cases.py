"""Hand-built rollout batches (``Sample.to_dict()``-style dicts) for comparing against slime.

``CASES[name]`` is a dict with:

* ``samples``: list of sample dicts, every ``Sample`` field present in declaration
  order (tensors given as plain lists, ``status`` as its string value);
* ``args``: keyword arguments for ``slime_reference.post_process_rewards`` /
  ``convert_samples_to_train_data`` (advantage_estimator, n_samples_per_prompt,
  rollout_batch_size, reward_key, ...);
* ``slime_groups_correctly``: True when len(samples) == n * rbs AND the consecutive
  chunks of n samples are exactly the group_index groups AND slime's normalisation
  yields no NaN -- i.e. where slime's rewards can serve as expected values for a
  converter that groups by group_index;
* ``description``: one line.

Every call to ``make_cases()`` returns fresh objects, so tests may mutate them; the
module-level ``CASES`` is built once.
"""

from __future__ import annotations

import copy
from typing import Any


def _sample(
    *,
    position: int,
    group_index: int | None,
    index: int | None,
    reward: Any,
    loss_mask: list[int] | None,
    response_length: int | None = None,
    rollout_id: Any = None,
    status: str = "completed",
    remove_sample: bool = False,
    metadata: dict | None = None,
    with_log_probs: bool = True,
    teacher: bool = False,
    prompt_len: int = 3,
    extra: dict | None = None,
) -> dict:
    """One to_dict()-style sample. Tokens are deterministic: prompt ids depend on the
    group, response ids on the batch position."""
    if response_length is None:
        response_length = len(loss_mask)
    g = 0 if group_index is None else group_index
    prompt_tokens = [100 + 10 * g + i for i in range(prompt_len)]
    response_tokens = [1000 + 20 * position + j for j in range(response_length)]
    mask_for_lp = loss_mask if loss_mask is not None else [1] * response_length
    log_probs = [(-0.125 * (j + 1) if m else 0.0) for j, m in enumerate(mask_for_lp)]
    d = {
        "group_index": group_index,
        "index": index,
        "rollout_id": rollout_id,
        "prompt": f"prompt {g}",
        "tokens": prompt_tokens + response_tokens,
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "multimodal_train_input_id": None,
        "apply_chat_template_kwargs": {},
        "response": f"response {position}",
        "response_length": response_length,
        "label": f"label {g}",
        "reward": reward,
        "loss_mask": None if loss_mask is None else list(loss_mask),
        "weight_versions": ["1"],
        "rollout_log_probs": log_probs if with_log_probs else None,
        "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None,
        "rollout_routed_experts": None,
        "remove_sample": remove_sample,
        "teacher_log_probs": ([-0.5 - 0.25 * j for j in range(response_length)] if teacher else None),
        "status": status,
        "metadata": {} if metadata is None else dict(metadata),
        "generate_function_path": None,
        "custom_rm_path": None,
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": 0,
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
    }
    if extra:
        d.update(extra)
    return d


def _args(estimator="grpo", n=1, rbs=1, reward_key=None, **more) -> dict:
    a = {
        "advantage_estimator": estimator,
        "n_samples_per_prompt": n,
        "rollout_batch_size": rbs,
        "reward_key": reward_key,
    }
    a.update(more)
    return a


def _case(samples, args, slime_groups_correctly, description) -> dict:
    return {
        "samples": samples,
        "args": args,
        "slime_groups_correctly": slime_groups_correctly,
        "description": description,
    }


def make_cases() -> dict[str, dict]:
    cases: dict[str, dict] = {}

    # -- mixed_ids: spec 3c example. 3 prompts x 2 executions (n=2, rbs=3); the second
    # execution of each prompt is compact (explicit id), two of them with 2 siblings.
    # 8 samples != n*rbs = 6 -> slime normalises the whole batch as one row.
    spec = [
        # (group_index, index, rollout_id, reward, loss_mask)
        (0, 0, None, 1.0, [1, 1, 1, 1]),
        (0, 1, 2, 0.0, [1, 0, 1]),
        (0, 1, 2, 0.0, [1, 1]),
        (1, 2, None, 0.0, [1, 1, 1]),
        (1, 3, 0, 1.0, [1, 1, 0, 0, 1]),
        (1, 3, 0, 1.0, [1, 1]),
        (2, 4, None, 0.5, [1, 1]),
        (2, 5, 7, 1.0, [1, 1, 1]),
    ]
    cases["mixed_ids"] = _case(
        [
            _sample(position=p, group_index=g, index=i, rollout_id=r, reward=rw, loss_mask=m)
            for p, (g, i, r, rw, m) in enumerate(spec)
        ],
        _args(n=2, rbs=3),
        False,
        "explicit ids [None,2,2,None,0,0,None,7] -> filled [1,2,2,3,0,0,4,7]; whole-batch normalisation",
    )

    # -- grpo_default: default pipeline, n=4, rbs=2, no rollout ids; positional grouping is right.
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    masks = [[1, 1, 1], [1, 1], [1, 0, 1, 1], [1], [1, 1], [1, 1, 1, 1], [1, 0, 1], [1, 1]]
    statuses = ["completed", "truncated", "completed", "aborted", "completed", "completed", "truncated", "failed"]
    samples = []
    for p in range(8):
        meta, extra = {}, None
        if p == 1:
            extra = {"source": "math"}  # non-field attribute, wins over metadata
        if p == 2:
            meta = {"source_name": "code"}
        if p == 3:
            meta = {"source_name": ""}  # empty -> "unknown"
        samples.append(
            _sample(
                position=p, group_index=p // 4, index=p, reward=rewards[p], loss_mask=masks[p],
                status=statuses[p], metadata=meta, extra=extra,
            )
        )
    cases["grpo_default"] = _case(
        samples, _args(n=4, rbs=2), True, "default GRPO: 2 prompts x 4 samples, rewards [1,0,0,0],[1,1,0,0]"
    )

    # -- compact_explicit: n=2, rbs=2; every execution is split into 2 siblings stamped with
    # rollout_id = parent's index (compact_generate style), full reward on each sibling.
    samples = []
    sib_rewards = [1.0, 0.0, 1.0, 1.0]  # per execution
    p = 0
    for execution in range(4):
        for sib in range(2):
            samples.append(
                _sample(
                    position=p, group_index=execution // 2, index=execution, rollout_id=execution,
                    reward=sib_rewards[execution], loss_mask=[1] * (2 + sib) + [0],
                )
            )
            p += 1
    cases["compact_explicit"] = _case(
        samples, _args(n=2, rbs=2), False,
        "compact fan-out: 4 executions x 2 siblings, explicit ids 0..3; 8 != n*rbs -> whole-batch row",
    )

    # -- remove_sample: n=4, rbs=1; sample 2 filtered out (still normalised), sample 3 from a
    # custom generator with loss_mask None; every sample carries round_number.
    samples = [
        _sample(position=0, group_index=0, index=0, reward=1.0, loss_mask=[1, 1, 1], metadata={"round_number": 0}),
        _sample(position=1, group_index=0, index=1, reward=0.0, loss_mask=[1, 0, 1], metadata={"round_number": 0}),
        _sample(position=2, group_index=0, index=2, reward=1.0, loss_mask=[1, 1], remove_sample=True,
                metadata={"round_number": 1}),
        _sample(position=3, group_index=0, index=3, reward=0.0, loss_mask=None, response_length=4,
                metadata={"round_number": 1}),
    ]
    cases["remove_sample"] = _case(
        samples, _args(n=4, rbs=1), True, "remove_sample zeroes the mask but still takes part in normalisation"
    )

    # -- removed_sibling: a compact rollout (id 1) with one removed sibling: its mask sum
    # only counts the other sibling. 3 samples != n*rbs = 2.
    samples = [
        _sample(position=0, group_index=0, index=0, reward=1.0, loss_mask=[1, 1, 1]),
        _sample(position=1, group_index=0, index=1, rollout_id=1, reward=0.0, loss_mask=[1, 1], remove_sample=True),
        _sample(position=2, group_index=0, index=1, rollout_id=1, reward=0.0, loss_mask=[1, 0, 1]),
    ]
    cases["removed_sibling"] = _case(
        samples, _args(n=2, rbs=1), False, "compact sibling removed: rollout_mask_sums [3,2,2]"
    )

    # -- metadata_raw_reward: dict rewards under reward_key "score"; two samples carry
    # metadata["raw_reward"], so raw_reward mixes those floats with the other samples' raw dicts.
    scores = [1.0, 0.0, 0.0, 1.0]
    samples = []
    for p in range(4):
        meta = {"raw_reward": 0.25 * (p + 1)} if p in (0, 2) else {}
        samples.append(
            _sample(
                position=p, group_index=p // 2, index=p, reward={"score": scores[p], "format": 0.5},
                loss_mask=[1, 1], metadata=meta,
            )
        )
    cases["metadata_raw_reward"] = _case(
        samples, _args(n=2, rbs=2, reward_key="score"), True,
        "metadata raw_reward on samples 0 and 2 -> raw_reward [0.25, {dict}, 0.75, {dict}]",
    )

    # -- dict_reward_key: dict rewards, reward_key "acc" selects the normalised value.
    accs = [1.0, 0.0, 0.5, 0.25]
    samples = [
        _sample(position=p, group_index=p // 2, index=p, reward={"acc": accs[p], "len_penalty": -0.1 * p},
                loss_mask=[1, 1, 1])
        for p in range(4)
    ]
    cases["dict_reward_key"] = _case(
        samples, _args(n=2, rbs=2, reward_key="acc"), True, "dict reward selected by reward_key"
    )

    # -- one_sample_group: a subsampled dump left one sample of n=4 -> one-sample row -> NaN.
    cases["one_sample_group"] = _case(
        [_sample(position=0, group_index=0, index=0, reward=1.0, loss_mask=[1, 1])],
        _args(n=4, rbs=1), False, "one-sample row: unbiased std is NaN, so slime's reward is NaN",
    )

    # -- identical_rewards: all rewards equal -> 0.0 (no NaN); also carries teacher log-probs.
    cases["identical_rewards"] = _case(
        [
            _sample(position=p, group_index=0, index=p, reward=1.0, loss_mask=[1] * (p + 1), teacher=True)
            for p in range(4)
        ],
        _args(n=4, rbs=1), True, "identical rewards normalise to 0.0",
    )

    # -- interleaved_groups: len == n*rbs but batch order interleaves the groups, so slime's
    # consecutive chunks are not the group_index groups.
    gis = [0, 1, 0, 1]
    rewards = [1.0, 1.0, 0.0, 0.0]
    cases["interleaved_groups"] = _case(
        [_sample(position=p, group_index=gis[p], index=p, reward=rewards[p], loss_mask=[1, 1]) for p in range(4)],
        _args(n=2, rbs=2), False,
        "groups interleaved: slime rows [1,1],[0,0] give zeros; by group_index they would be +-0.707",
    )

    # -- ppo_passthrough: ppo skips normalisation; int rewards stay ints.
    cases["ppo_passthrough"] = _case(
        [_sample(position=p, group_index=0, index=p, reward=[1, 0, 0, 0][p], loss_mask=[1, 1]) for p in range(4)],
        _args(estimator="ppo", n=4, rbs=1), True, "ppo: rewards are the raw values (same list)",
    )

    # -- rpp_baseline: reinforce_plus_plus_baseline is mean-centred, never std-scaled.
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    cases["rpp_baseline"] = _case(
        [_sample(position=p, group_index=p // 4, index=p, reward=rewards[p], loss_mask=[1]) for p in range(8)],
        _args(estimator="reinforce_plus_plus_baseline", n=4, rbs=2), True,
        "reinforce_plus_plus_baseline: mean-centred only",
    )

    # -- n1_no_std: n=1 -> parse_args turns std normalisation off, rows of one sample -> 0.0.
    cases["n1_no_std"] = _case(
        [_sample(position=p, group_index=p, index=p, reward=[1.0, 0.0, 0.5, 0.0][p], loss_mask=[1, 1]) for p in range(4)],
        _args(n=1, rbs=4), True, "n=1: grpo_std_normalization forced off, single-sample rows give 0.0 (not NaN)",
    )

    return cases


CASES: dict[str, dict] = make_cases()


def fresh_case(name: str) -> dict:
    """A deep copy of CASES[name], safe to mutate."""
    return copy.deepcopy(CASES[name])
