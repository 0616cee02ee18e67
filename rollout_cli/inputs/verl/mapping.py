"""A verl DataProto from the rollout-skip cache, as plain data, to slime's sample fields.

The DataProto (verl-project/verl@1dda039b9c63: verl/protocol.py:377-434) is the agent loop's
output (verl/experimental/agent_loop/agent_loop.py:700-830, 1026-1118):

- `prompts` [B, P], **left-padded**; `responses` [B, R], **right-padded**; `attention_mask`
  [B, P+R] marks the real tokens of both (agent_loop.py:704-721, 749-751). Tokens are the
  prompt's real tokens then the response's, told by the mask, never by a pad id.
- `response_mask` [B, R]: 1 on LLM-generated tokens, 0 on tool/observation tokens and padding
  (agent_loop.py:548-556): the loss mask.
- `rollout_log_probs` [B, R] (with `calculate_log_probs`): the inference engine's log-prob of
  each response token, 0 on padding (agent_loop.py:744-747).
- `rm_scores` [B, R] (when the agent loop scores): the score on the last response token
  (agent_loop.py:1064-1068); the reward is its sum. Without it the reward is not recorded (null).
- non-tensor `uid`: the prompt's uuid, present only when no reward-loop workers run
  (agent_loop.py:1073-1074); rows of one prompt are consecutive (`repeat(n, interleave=True)`,
  verl/trainer/ppo/ray_trainer.py:1481-1491). Without it the prompt groups are consecutive
  blocks of N rows, N from the `GBS{gbs}_N{n}_in{P}_out{R}` folder.
- non-tensor `global_steps` / `min_global_steps` / `max_global_steps`: the version of the
  weights that generated the row (the rollout server's, verl/workers/rollout/llm_server.py:284-286,
  455-460), which is the step the trainer last finished: step - 1 in a synchronous run.
  `weight_versions` holds the versions from min to max (one when they agree).
- non-tensor `multi_modal_inputs` (a vision-language run): an object array, one entry per row,
  the processor's output for the row's images less input_ids and attention_mask (`pixel_values`,
  `image_grid_thw`, ...: a dict of tensors), None for a row without (agent_loop.py
  `_postprocess`: `np.array([input.multi_modal_inputs ...], dtype=object)`, present when any row
  has one; verl@6c923f3b724a). The tensors are pickled as torch pickles a lone tensor (a storage
  in torch.save's legacy form, inputs/pickled/legacy.py). Each becomes the sample's
  `multimodal_train_inputs`, kept as slime's are.
- non-tensor `multi_modal_data` (the raw media): an object array, one dict per row,
  `{"image": [PIL images], "video": [...]}` as verl's RLHFDataset built it (verl@6c923f3b724a
  verl/utils/dataset/rl_dataset.py:238-267; the agent loop's own spelling is `images`/`videos`).
  It reaches the dump with the rest of the input batch's non-tensor columns
  (`AgentLoopWorker._postprocess`: `non_tensor_batch.update(input_non_tensor_batch)` without
  reward-loop workers; verl-project/verl@1dda039b9c63 agent_loop.py:1073-1074). Its images become
  the sample's `multimodal_inputs["images"]`, its other media `multimodal_inputs["videos"]` (counted,
  not stored). Without it, the images of non-tensor `raw_prompt` (the chat messages, always in the
  output: agent_loop.py:700; `{"type": "image", "image": PIL image | path | {"bytes", ...}}`
  content items, rl_dataset.py:299-385 `_build_messages`, verl@1dda039b9c63) are used the same way.

verl records no stop reason in the batch: a response that fills the R width is `truncated` (what
verl's own clip-ratio metric counts), any other `completed`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..unmapped import Bad, first_failures, kind as _kind

STATUS = "completed"
TRUNCATED = "truncated"
REQUIRED = ("prompts", "responses", "attention_mask", "response_mask")
MM_KEY = "multi_modal_inputs"
MEDIA_KEY = "multi_modal_data"
PROMPT_KEY = "raw_prompt"
_IMAGE_KEYS = ("image", "images")  # RLHFDataset's spelling (vLLM's), the agent loop's


def _blocks(mask: np.ndarray, trailing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a [rows, width] 0/1 mask: the count of ones, and whether the row is that many
    ones at its end after zeros (`trailing`) or at its start before zeros."""
    n = np.count_nonzero(mask, axis=1)
    cols = np.arange(mask.shape[1])[None, :]
    want = cols >= (mask.shape[1] - n)[:, None] if trailing else cols < n[:, None]
    return n, (mask == want).all(axis=1)


def _groups(non_tensor: dict, rows: int, n: int | None) -> np.ndarray:
    """Each row's prompt group: by `uid` (numbered in order of first appearance), else by
    consecutive blocks of N rows."""
    uid = non_tensor.get("uid")
    if uid is not None:
        if len(uid) != rows:
            raise Bad("uid", f"expected one per row ({rows}), got {len(uid)}")
        seen: dict = {}
        out = np.empty(rows, dtype=np.int64)
        for i, u in enumerate(uid):
            if not isinstance(u, (str, int, np.integer, np.str_)):
                raise Bad("uid", f"expected a string, got {_kind(u)}", i)
            out[i] = seen.setdefault(u if isinstance(u, str) else str(u), len(seen))
        return out
    if n is None:
        raise Bad("uid", "missing, and the file is not in a `GBS{gbs}_N{n}_in{P}_out{R}` folder that says "
                         "how many rollouts each prompt has: the prompt groups cannot be told")
    if n <= 0 or rows % n:
        raise Bad("uid", f"missing, and the {rows} rows are not whole groups of N={n} (the folder's N) rollouts")
    return np.arange(rows, dtype=np.int64) // n


def _versions(non_tensor: dict, i: int) -> list[str] | None:
    lo = non_tensor.get("min_global_steps")
    hi = non_tensor.get("max_global_steps")
    one = non_tensor.get("global_steps")
    a = lo[i] if lo is not None else (one[i] if one is not None else None)
    b = hi[i] if hi is not None else a
    if a is None:
        return None
    for name, v in (("min_global_steps", a), ("max_global_steps", b)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise Bad(name, f"expected a weight version (an integer >= 0) or None, got {v!r}", i)
    a, b = int(a), int(b)
    if b < a:
        raise Bad("max_global_steps", f"expected a version >= min_global_steps ({a}), got {b}", i)
    return [str(a)] if a == b else [str(a), str(b)]


def _media(entry: Any, i: int) -> dict | None:
    """A row's `multi_modal_data` as slime's `multimodal_inputs`: its images under `images`, every
    other medium (video, audio) under `videos`, which the images column counts as not kept."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise Bad(MEDIA_KEY, f"expected a dict of media lists (image, video) or None, got {_kind(entry)}", i)
    images, others = [], []
    for key, v in entry.items():
        if v is None:
            continue
        items = list(v) if isinstance(v, (list, tuple, np.ndarray)) else [v]
        (images if key in _IMAGE_KEYS else others).extend(items)
    return {"images": images, "videos": others} if images or others else None


def _prompt_media(messages: Any) -> dict | None:
    """The images (and other media) of a row's `raw_prompt` messages' content items, in order;
    None where the messages hold none. Anything not shaped as chat messages holds none: the
    messages are not otherwise read."""
    if isinstance(messages, np.ndarray):
        messages = messages.tolist()
    if not isinstance(messages, list):
        return None
    images, others = [], []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for item in content:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "image":
                v = item.get("image")
                if v is None:  # no decoded image: the dataset's encoded file or its path
                    v = item.get("image_url") or {k: item[k] for k in ("bytes", "path") if k in item} or None
                images.append(v)
            elif kind in ("video", "audio"):
                others.append(item)
    return {"images": images, "videos": others} if images or others else None


class Plan(NamedTuple):
    """The checked batch in whole-batch arrays: row i's tokens are the trailing p[i] of its
    prompt then the leading r[i] of its response; `bad` maps a row that cannot be mapped to its
    Bad, `versions` a row to its weight versions (None: not recorded)."""

    prompts: np.ndarray
    responses: np.ndarray
    rmask: np.ndarray
    lp: np.ndarray | None
    reward: np.ndarray | None
    group: np.ndarray
    p: np.ndarray
    r: np.ndarray
    bad: dict
    versions: list
    mm: Any = None  # the rows' multimodal_train_inputs (dict or None each), or None: no such key
    media: Any = None  # the rows' multimodal_inputs (dict or None each), or None: no raw media


def plan(tensors: Any, non_tensor: Any, n: int | None) -> Plan:
    """The batch checked and laid out (see Plan). `tensors` is the TensorDict's {key: array},
    `non_tensor` the non-tensor batch's {key: array} and `n` the rollouts per prompt from the
    folder's name. Raises Bad for the whole batch."""
    if not isinstance(tensors, dict):
        raise Bad("batch", f"expected the DataProto's TensorDict of tensors, got {_kind(tensors)}")
    if not isinstance(non_tensor, dict):
        raise Bad("non_tensor_batch", f"expected a dict of per-row arrays, got {_kind(non_tensor)}")
    t = {}
    for key in REQUIRED:
        v = tensors.get(key)
        if v is None:
            raise Bad(key, "missing (the agent loop's output always holds it)")
        if not isinstance(v, np.ndarray) or v.ndim != 2:
            raise Bad(key, f"expected a [batch, length] tensor, got {getattr(v, 'shape', _kind(v))}")
        t[key] = v
    prompts, responses, am, rmask = t["prompts"], t["responses"], t["attention_mask"], t["response_mask"]
    rows, pw = prompts.shape
    rw = responses.shape[1]
    for key, arr, width in (("responses", responses, rw), ("attention_mask", am, pw + rw), ("response_mask", rmask, rw)):
        if arr.shape != (rows, width):
            raise Bad(key, f"expected shape ({rows}, {width}), got {arr.shape}")
    for key in ("prompts", "responses"):
        if t[key].dtype.kind not in "iu":
            raise Bad(key, f"expected integer token ids, got {t[key].dtype}")
    optional = {}
    for key in ("rollout_log_probs", "rm_scores"):
        v = tensors.get(key)
        if v is None:
            continue
        if not isinstance(v, np.ndarray) or v.shape != (rows, rw):
            raise Bad(key, f"expected shape ({rows}, {rw}), got {getattr(v, 'shape', _kind(v))}")
        optional[key] = v
    for key, v in non_tensor.items():
        if key in ("uid", "global_steps", "min_global_steps", "max_global_steps") and len(v) != rows:
            raise Bad(key, f"expected one value per row ({rows}), got {len(v)}")
    group = _groups(non_tensor, rows, n)
    mm = non_tensor.get(MM_KEY)
    if mm is not None and (not isinstance(mm, np.ndarray) or mm.ndim != 1 or len(mm) != rows):
        raise Bad(MM_KEY, f"expected an object array of one dict (or None) per row ({rows}), got "
                          f"{getattr(mm, 'shape', _kind(mm))}")
    data = non_tensor.get(MEDIA_KEY)
    if data is not None and (not isinstance(data, np.ndarray) or data.ndim != 1 or len(data) != rows):
        raise Bad(MEDIA_KEY, f"expected an object array of one dict (or None) per row ({rows}), got "
                             f"{getattr(data, 'shape', _kind(data))}")
    raw = non_tensor.get(PROMPT_KEY) if data is None else None
    if raw is not None and (not isinstance(raw, np.ndarray) or len(raw) != rows):
        raw = None  # not the messages of each row: no media read from it
    media: list | None = [None] * rows if data is not None or raw is not None else None
    lp, scores = optional.get("rollout_log_probs"), optional.get("rm_scores")
    p, prompt_ok = _blocks(am[:, :pw], trailing=True)
    r, resp_ok = _blocks(am[:, pw:], trailing=False)
    on_response = np.arange(rw)[None, :] < r[:, None]
    mask_bad = on_response & (rmask != 0) & (rmask != 1)
    # a row's first failing check, in this order, is its Bad
    checks = (
        (~prompt_ok, lambda i: Bad("attention_mask", "expected a left-padded prompt: 0s, then the prompt's 1s", i)),
        (~resp_ok, lambda i: Bad("attention_mask", "expected a right-padded response: the response's 1s, then 0s", i)),
        (r == 0, lambda i: Bad("attention_mask", "expected a response of at least one token, got none", i)),
        (mask_bad.any(axis=1), lambda i: Bad("response_mask", f"expected 0/1, got {rmask[i][mask_bad[i]][0].item()!r}", i)),
    )
    bad = first_failures(np, checks)
    versions: list = [None] * rows
    for i in range(rows):
        if i not in bad:
            try:
                versions[i] = _versions(non_tensor, i)
                if mm is not None and mm[i] is not None and not isinstance(mm[i], dict):
                    raise Bad(MM_KEY, f"expected a dict of tensors or None, got {_kind(mm[i])}", i)
                if data is not None:
                    media[i] = _media(data[i], i)
                elif raw is not None:
                    media[i] = _prompt_media(raw[i])
            except Bad as e:
                bad[i] = e
    if media is not None and all(m is None for m in media):
        media = None
    reward = None if scores is None else scores.sum(axis=1, dtype=np.float64)
    return Plan(prompts, responses, rmask, lp, reward, group, p, r, bad, versions, None if mm is None else mm.tolist(),
                media)


def columns(pl: Plan, a: int, b: int) -> dict:
    """Rows a..b-1 as the reader contract's columns (inputs/base.py; a Bad row's entries null):
    each list field one Arrow list array cut from the 2-D tensors in whole-batch numpy."""
    from ..columns import spans

    valid = np.array([i not in pl.bad for i in range(a, b)], dtype=bool)
    if not valid.any():
        return {}
    ok = valid.tolist()
    p, r = pl.p[a:b], pl.r[a:b]
    pw, rw = pl.prompts.shape[1], pl.responses.shape[1]

    def col(values):
        return [v if k else None for v, k in zip(values, ok)]

    ids = col(range(a, b))
    # the prompt's trailing tokens and the response's leading ones are one span of the two side by side
    both = np.concatenate([pl.prompts[a:b], pl.responses[a:b]], axis=1)
    out = {
        "rollout_id": ids, "index": ids, "group_index": col(pl.group[a:b].tolist()),
        "tokens": spans(both, pw - p, p + r, np.int64, valid),
        "response_length": col(r.tolist()), "loss_mask": spans(pl.rmask[a:b], np.zeros_like(r), r, np.uint8, valid),
        "reward": [None] * (b - a) if pl.reward is None else col(pl.reward[a:b].tolist()),
        "status": col([TRUNCATED if x == rw else STATUS for x in r.tolist()]),
    }
    if pl.lp is not None:
        out["rollout_log_probs"] = spans(pl.lp[a:b], np.zeros_like(r), r, np.float32 if pl.lp.dtype == np.float32 else np.float64, valid)
    versions = pl.versions[a:b]
    if any(v is not None for v in versions):
        out["weight_versions"] = versions
    if pl.mm is not None:
        out["multimodal_train_inputs"] = col(pl.mm[a:b])
    if pl.media is not None:
        out["multimodal_inputs"] = col(pl.media[a:b])
    return out


def samples(tensors: Any, non_tensor: Any, n: int | None) -> list:
    """The batch's rows as sample dicts (a row that cannot be mapped is its Bad instead); the
    arguments as plan's. Raises Bad for the whole batch."""
    pl = plan(tensors, non_tensor, n)
    pw, rw = pl.prompts.shape[1], pl.responses.shape[1]
    out: list = []
    for i in range(len(pl.p)):
        if i in pl.bad:
            out.append(pl.bad[i])
            continue
        pi, ri = int(pl.p[i]), int(pl.r[i])
        s = {
            "rollout_id": i, "index": i, "group_index": int(pl.group[i]),
            "tokens": np.concatenate([pl.prompts[i, pw - pi:], pl.responses[i, :ri]]).astype(np.int64, copy=False),
            "response_length": ri, "loss_mask": pl.rmask[i, :ri].astype(np.int64),
            "reward": None if pl.reward is None else float(pl.reward[i]),
            "status": TRUNCATED if ri == rw else STATUS,
        }
        if pl.lp is not None:
            s["rollout_log_probs"] = pl.lp[i, :ri].astype(np.float64)
        if pl.versions[i] is not None:
            s["weight_versions"] = pl.versions[i]
        if pl.mm is not None:
            s["multimodal_train_inputs"] = pl.mm[i]
        if pl.media is not None and pl.media[i] is not None:
            s["multimodal_inputs"] = pl.media[i]
        out.append(s)
    return out
