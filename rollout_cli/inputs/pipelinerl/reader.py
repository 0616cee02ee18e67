"""Reading PipelineRL's stream lines: each line one prompt group, a JSON list of
`TrainingText.model_dump()`s, one per LLM call of a rollout (pipelinerl/rollouts.py:13-56); a
sample per text.

The mapping is the trainer's (ServiceNow/PipelineRL@58d39345):

- `input_ids` are the tokens; `labels` are `MASKED_TOKEN_ID` (-100) on the prompt and the
  sampled token ids on the completion (pipelinerl/async_llm.py:319-324), and the trainer counts
  and trains the positions whose label is not -100 (pipelinerl/finetune/rl/__init__.py:557,
  582-593): the response starts at the first such position, the loss mask is `labels != -100`
  from there, and a label that is not its position's token is refused.
- `logprobs` hold one value per trained position (the trainer asserts it, rl/__init__.py:582-585)
  and are laid right-aligned on the sequence (`[0] * (len(labels) - len(old)) + old`,
  rl/__init__.py:589), zero before: the response span of that row is `rollout_log_probs`.
  orjson writes a NaN log-prob as `null`: such a value is refused, named by its position.
- `reward` is the text's reward (the rollout's, plus any length-penalty change made per text,
  actor.py:604-640); `finished` false is a truncated sample.
- the prompt group is `group_id` (`{scheduler}_{n}`, actor.py:212); the rollout is (`group_id`,
  `metadata.rollout_index`) (actor.py:214-219): several texts of a multi-call rollout share its
  rollout id. Both are the first 8 bytes of the BLAKE2b digest of the string (prime_rl's
  `string_id`), so any part of a stream read on any worker gives the same ids.
- `metadata.model_version` is the sample's `weight_versions` entry (one text is one generation
  call, so one entry, as a string as slime's); the step is detect.py's. The format has no
  `version_lag`: its step is the oldest version of the group, so no sample is ever behind it, and
  the lag that matters (the trainer's version when it consumed the sample) is not recorded;
  `convert --max-staleness` says so rather than keep every sample.
- `ref_logprobs` (empty in the actor stream; the preprocessor fills it later) and
  `visual_features` are not carried.
"""
from __future__ import annotations

from typing import Iterator

from ..prime_rl.reader import string_id
from ..unmapped import Bad, kind as _kind

MASKED = -100  # pipelinerl/finetune/data.py:29
_INT32_MAX = 2**31 - 1


def _int(v, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad(where, f"expected an integer, got {_kind(v)}")
    return v


def _ints(np, v, where: str):
    if not isinstance(v, list) or not v:
        raise Bad(where, f"expected a non-empty list of integers, got {_kind(v) if not isinstance(v, list) else '[]'}")
    try:
        a = np.asarray(v)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in "iu":
        raise Bad(where, "expected a flat list of integers")
    return a.astype(np.int64, copy=False)


def text_sample(np, t, where: str, keep_text: bool) -> dict:
    """One TrainingText dump as a slime sample (without its step); raises Bad."""
    if not isinstance(t, dict):
        raise Bad(where, f"expected an object, got {_kind(t)}")
    tokens = _ints(np, t.get("input_ids"), f"{where}.input_ids")
    n = len(tokens)
    if int(tokens.min()) < 0 or int(tokens.max()) > _INT32_MAX:
        raise Bad(f"{where}.input_ids", f"expected token ids in [0, {_INT32_MAX}]")
    labels = _ints(np, t.get("labels"), f"{where}.labels")
    if len(labels) != n:
        raise Bad(f"{where}.labels", f"expected {n} entries (one per input_ids), got {len(labels)}")
    trained = labels != MASKED
    hits = np.flatnonzero(trained)
    if not len(hits):
        raise Bad(f"{where}.labels", f"no trained position (every label is {MASKED})")
    wrong = np.flatnonzero(trained & (labels != tokens))
    if len(wrong):
        j = int(wrong[0])
        raise Bad(f"{where}.labels", f"label {int(labels[j])} at position {j} is not its token {int(tokens[j])}")
    p0 = int(hits[0])
    lp = t.get("logprobs")
    if not isinstance(lp, list):
        raise Bad(f"{where}.logprobs", f"expected a list of numbers, got {_kind(lp)}")
    if len(lp) != len(hits):
        raise Bad(f"{where}.logprobs", f"expected {len(hits)} values (one per trained label), got {len(lp)}")
    for k, v in enumerate(lp):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Bad(f"{where}.logprobs", f"expected numbers, got {_kind(v)} at position {k}"
                      + (" (orjson writes a non-finite log-prob as null)" if v is None else ""))
    aligned = np.zeros(n, np.float64)
    aligned[n - len(lp):] = lp
    reward = t.get("reward", 0.0)
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise Bad(f"{where}.reward", f"expected a number, got {_kind(reward)}")
    group = t.get("group_id")
    if not isinstance(group, str):
        raise Bad(f"{where}.group_id", f"expected a string, got {_kind(group)}")
    md = t.get("metadata")
    if not isinstance(md, dict):
        raise Bad(f"{where}.metadata", f"expected an object, got {_kind(md)}")
    rollout = _int(md.get("rollout_index"), f"{where}.metadata.rollout_index")
    version = _int(md.get("model_version"), f"{where}.metadata.model_version")
    finished = t.get("finished", False)
    if not isinstance(finished, bool):
        raise Bad(f"{where}.finished", f"expected true/false, got {_kind(finished)}")
    s = {
        "rollout_id": string_id(f"{group}/{rollout}"), "group_index": string_id(group), "tokens": tokens,
        "response_length": n - p0, "loss_mask": trained[p0:], "rollout_log_probs": aligned[p0:],
        "reward": float(reward), "status": "completed" if finished else "truncated",
        "metadata": dict(md, group_id=group), "weight_versions": [str(version)], "_version": version,
    }
    if keep_text:
        text, cut = t.get("text"), t.get("n_predicted")
        if isinstance(text, str) and isinstance(cut, int) and not isinstance(cut, bool) and 0 <= cut <= len(text):
            s["prompt"], s["response"] = text[: len(text) - cut], text[len(text) - cut:]
    return s


def group_samples(np, rec, step: int | None, keep_text: bool) -> list[dict]:
    """The samples of one group line, in the line's order; the oldest version in it must be the
    unit's step (detect.py placed the line by it). Raises Bad."""
    if not isinstance(rec, list):
        raise Bad(None, f"expected a JSON list of training texts (one prompt group), got {_kind(rec) if not isinstance(rec, dict) else 'an object'}")
    if not rec:
        raise Bad(None, "an empty group (no training text)")
    out = [text_sample(np, t, f"[{i}]", keep_text) for i, t in enumerate(rec)]
    oldest = min(s["_version"] for s in out)
    if step is not None and oldest != step:
        raise Bad("metadata.model_version", f"the group's oldest version is {oldest}, read as step {step} "
                  "(a `model_version` key elsewhere in the line?)")
    for s in out:
        s.pop("_version")
    return out


def read(inp, request, info) -> Iterator:
    """The registry's entry: the lines of one unit (a step of a stream, inputs/linesteps.py), each
    group's samples with its line's number and file (a line that cannot be mapped is one record
    holding its problem)."""
    import numpy as np

    from ..linesteps import read_chunks

    return read_chunks(inp, request, info, lambda rec: group_samples(np, rec, inp.step, request.keep_text),
                       Bad, "pipelinerl.record")
