"""The training rows of selected rollouts and pairs, as Arrow tables (docs/derive.md): token
columns cut from each sample's `tokens` (prompt = the tokens before the response), text columns
where the output holds text or a tokenizer decodes it, and the provenance that leads every row
back to its output row."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PROVENANCE = ("step", "group_index", "rollout_id", "rollout_position", "sample_index", "raw_reward",
              "weight_versions", "source_name")
PAIR_SIDE = ("rollout_id", "rollout_position", "sample_index", "raw_reward", "weight_versions", "source_name")
IDS = pa.list_(pa.int32())
MASK = pa.list_(pa.uint8())
MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_PROV_TYPES = {"step": pa.int64(), "group_index": pa.int64(), "rollout_id": pa.int64(),
               "rollout_position": pa.int64(), "sample_index": pa.int64(), "raw_reward": pa.float64(),
               "weight_versions": pa.list_(pa.string()), "source_name": pa.string()}


class Text:
    """Where text columns come from: the output's own `prompt`/`response` (convert --keep-text),
    a tokenizer decoding the tokens, or nowhere (mode None). `messages` once the first prompt
    seen is a message list (then every prompt is written as one)."""

    def __init__(self, keep_text: bool, tokenizer=None):
        self.mode = "text" if keep_text else "tokens" if tokenizer is not None else None
        self.tok = tokenizer
        self.messages: bool | None = None

    def of(self, t: pa.Table, prompt_ids: pa.Array, response_ids: pa.Array) -> tuple[list, list] | None:
        """(prompts, responses) for the rows of `t` (prompts as message lists in messages mode)."""
        if self.mode is None:
            return None
        if self.mode == "tokens":
            return ([self.tok.decode(x) for x in prompt_ids.to_pylist()],
                    [self.tok.decode(x) for x in response_ids.to_pylist()])
        prompts = [_messages(p) for p in t["prompt"].to_pylist()]
        if self.messages is None and prompts:
            self.messages = prompts[0] is not None
        if self.messages:
            prompts = [m if m is not None else [{"role": "user", "content": p}]
                       for m, p in zip(prompts, t["prompt"].to_pylist())]
        else:
            prompts = t["prompt"].to_pylist()
        return prompts, t["response"].to_pylist()


def _messages(prompt):
    """A prompt stored as a JSON message list, as [{role, content}] (content as text); else None."""
    if not isinstance(prompt, str) or not prompt.startswith("["):
        return None
    try:
        v = json.loads(prompt)
    except ValueError:
        return None
    if not (isinstance(v, list) and v and all(isinstance(m, dict) and "role" in m for m in v)):
        return None
    return [{"role": str(m["role"]),
             "content": m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))}
            for m in v]


def _slices(lists: pa.Array, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Each list's elements [starts[i], ends[i]) (both relative to the list), one gather."""
    off = lists.offsets.to_numpy().astype(np.int64)
    lengths = (ends - starts).astype(np.int64)
    new_off = np.concatenate([[0], np.cumsum(lengths)])
    idx = np.repeat(off[:-1] + starts - new_off[:-1], lengths) + np.arange(new_off[-1], dtype=np.int64)
    return pa.ListArray.from_arrays(pa.array(new_off, pa.int32()), lists.values.take(pa.array(idx)))


def _masked_prompt(mask: pa.Array, prompt_len: np.ndarray) -> pa.Array:
    """0 over each prompt, then the loss mask: the completion mask of a whole sequence."""
    moff = mask.offsets.to_numpy().astype(np.int64)
    rl = np.diff(moff)
    lengths = prompt_len + rl
    new_off = np.concatenate([[0], np.cumsum(lengths)])
    values = np.zeros(int(new_off[-1]), np.uint8)
    pos = np.repeat(new_off[:-1] + prompt_len - moff[:-1], rl) + np.arange(int(moff[-1]), dtype=np.int64)
    values[pos] = pc.cast(mask.values, pa.uint8()).to_numpy(zero_copy_only=False)[:int(moff[-1])]
    return pa.ListArray.from_arrays(pa.array(new_off, pa.int32()), pa.array(values, pa.uint8()))


def _parts(t: pa.Table) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(prompt tokens, response tokens, prompt lengths) of each row of `t` (taken rows: offset 0)."""
    toks = t["tokens"].combine_chunks()
    total = np.diff(toks.offsets.to_numpy()).astype(np.int64)
    rl = t["response_length"].to_numpy().astype(np.int64)
    plen = total - rl
    zero = np.zeros(len(total), np.int64)
    return _slices(toks, zero, plen), _slices(toks, plen, total), plen


def _provenance(t: pa.Table, names=PROVENANCE, prefix: str = "") -> dict:
    cols = {}
    for n in names:
        col = t[n] if n in t.schema.names else pa.nulls(t.num_rows, _PROV_TYPES[n])
        cols[prefix + n] = pc.cast(col, _PROV_TYPES[n])
    return cols


def _token_exact(t: pa.Table) -> pa.Array:
    return t["token_exact"] if "token_exact" in t.schema.names else pa.array(np.ones(t.num_rows, bool))


def _media(t: pa.Table) -> dict:
    """The columns a vision-language output's rows carry besides text: its `images` (a list of
    Hugging Face Image structs a row, as TRL's VLM trainers read them), when any row has one."""
    if "images" in t.schema.names and pc.sum(pc.list_value_length(t["images"])).as_py():
        return {"images": t["images"]}
    return {}


def samples(t: pa.Table, text: Text, kind: str, min_reward: float | None = None) -> pa.Table:
    """The rows of every sample of `t` (the selected rollouts' rows, in order): `sft` the whole
    sequence with its completion mask; `kto` and `rm` (pointwise) prompt and completion with
    `label` (reward >= min_reward) or `score` (the rollout's reward)."""
    prompt, response, plen = _parts(t)
    cols = {}
    texts = text.of(t, prompt, response)
    if kind == "sft":
        cols["input_ids"] = t["tokens"].combine_chunks()
        cols["completion_mask"] = _masked_prompt(t["loss_mask"].combine_chunks(), plen)
        if texts is not None:
            if text.messages:
                cols["messages"] = pa.array([p + [{"role": "assistant", "content": r}] for p, r in zip(*texts)], MESSAGES)
            else:
                cols["prompt"], cols["completion"] = pa.array(texts[0], pa.string()), pa.array(texts[1], pa.string())
    else:
        cols["prompt_input_ids"], cols["completion_input_ids"] = prompt, response
        cols["completion_mask"] = pc.cast(t["loss_mask"].combine_chunks(), MASK)
        if texts is not None:
            _text_pair(cols, text, texts[0], texts[1], "completion")
        if kind == "kto":
            cols["label"] = pc.greater_equal(t["raw_reward"], min_reward)
        else:
            cols["score"] = pc.cast(t["raw_reward"], pa.float64())
    cols.update(_media(t))
    cols["token_exact"] = _token_exact(t)
    cols.update(_provenance(t))
    return pa.table(cols)


def _text_pair(cols: dict, text: Text, prompts: list, responses: list, name: str) -> None:
    if text.messages:
        cols["prompt"] = pa.array(prompts, MESSAGES)
        cols[name] = pa.array([[{"role": "assistant", "content": r}] for r in responses], MESSAGES)
    else:
        cols["prompt"], cols[name] = pa.array(prompts, pa.string()), pa.array(responses, pa.string())


def pair_rows(chosen: pa.Table, rejected: pa.Table, text: Text) -> pa.Table:
    """DPO rows: one per (chosen, rejected) pair of one-sample rollouts, row i of `chosen` with row
    i of `rejected` (their prompt tokens are equal)."""
    cp, cr, _ = _parts(chosen)
    _, rr, _ = _parts(rejected)
    cols = {"step": pc.cast(chosen["step"], pa.int64()), "group_index": pc.cast(chosen["group_index"], pa.int64()),
            "prompt_input_ids": cp, "chosen_input_ids": cr, "rejected_input_ids": rr,
            "chosen_completion_mask": pc.cast(chosen["loss_mask"].combine_chunks(), MASK),
            "rejected_completion_mask": pc.cast(rejected["loss_mask"].combine_chunks(), MASK)}
    ct, rt = text.of(chosen, cp, cr), text.of(rejected, cp, rr)
    if ct is not None:
        _text_pair(cols, text, ct[0], ct[1], "chosen")
        cols["rejected"] = pa.array([[{"role": "assistant", "content": r}] for r in rt[1]], MESSAGES) \
            if text.messages else pa.array(rt[1], pa.string())
    cols.update(_media(chosen))
    cols["token_exact"] = pc.and_(_token_exact(chosen), _token_exact(rejected))
    cols.update(_provenance(chosen, PAIR_SIDE, "chosen_"))
    cols.update(_provenance(rejected, PAIR_SIDE, "rejected_"))
    return pa.table(cols)
