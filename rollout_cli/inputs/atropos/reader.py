"""Reading Atropos' scored groups (`data_path_to_save_groups`): one `ScoredDataGroup` per line
(NousResearch/atropos@296a0bc5: atroposlib/envs/base.py:57-72, written at base.py:928-929).

The meaning is the example trainer's (example_trainer/data.py:71-150), which consumes the same
groups from the API: each sequence of a group is trained with `masks` as its labels (-100: not
trained; elsewhere the token id), its advantage is its score normalised within the group, and
`inference_logprobs` is aligned with the tokens (1.0 on untrained positions,
atroposlib/envs/server_handling/managed_server.py:358-368). So a line is a prompt group and a
sequence a rollout of one sample:

- tokens: `tokens[i]`, as written (an end-of-turn token re-rendered after a generated one at a
  turn boundary stays: the generated copy is trained, the re-rendered one is masked, as the
  trainer trains them);
- response: from the first trained position to the end; loss_mask: `masks[i] != -100` over it
  (a later turn's prompt and tool tokens are 0 there); a sequence with nothing trained has an
  empty response;
- rollout_log_probs: `inference_logprobs[i]` over the response, 0.0 where untrained (Atropos'
  1.0 there is a placeholder, not a log-prob); absent when the group has none;
- reward: `scores[i]`; status `completed` (Atropos writes no finish state); group_index: the
  line's index in the file (0-based); rollout ids filled in order (pipeline/ids.py);
- metadata: `overrides[i]`, `group_overrides` and `generation_params` where set.

Files are read whole (a step is one file, inputs/atropos/detect.py).
"""
from __future__ import annotations

from typing import Iterator

from ..unmapped import Bad, kind as _kind

_INT32_MAX = 2**31 - 1
IGNORE = -100  # the label value the trainer ignores


def _lists(rec: dict, key: str, n: int | None, required: bool = True) -> list | None:
    v = rec.get(key)
    if v is None:
        if required:
            raise Bad(key, "missing")
        return None
    if not isinstance(v, list):
        raise Bad(key, f"expected a list of lists, got {_kind(v)}")
    if n is not None and len(v) != n:
        raise Bad(key, f"expected {n} entries (one per sequence of tokens), got {len(v)}")
    return v


def _ints(np, v, where: str):
    if not isinstance(v, list):
        raise Bad(where, f"expected a list of integers, got {_kind(v)}")
    if not v:
        return np.zeros(0, np.int64)
    try:
        a = np.asarray(v)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in "iu":
        raise Bad(where, "expected a list of integers")
    return a.astype(np.int64, copy=False)


def group_samples(np, rec, line_index: int) -> list[dict]:
    """The samples of one group line, one per sequence, in order; raises Bad."""
    if not isinstance(rec, dict):
        raise Bad(None, f"expected a JSON object, got {_kind(rec)}")
    tokens = _lists(rec, "tokens", None)
    n = len(tokens)
    masks = _lists(rec, "masks", n)
    scores = rec.get("scores")
    if not isinstance(scores, list):
        raise Bad("scores", "missing" if scores is None else f"expected a list of numbers, got {_kind(scores)}")
    if len(scores) != n:
        raise Bad("scores", f"expected {n} entries (one per sequence of tokens), got {len(scores)}")
    lps = _lists(rec, "inference_logprobs", n, required=False)
    overrides = rec.get("overrides")
    if overrides is not None and (not isinstance(overrides, list) or len(overrides) != n):
        raise Bad("overrides", f"expected a list of {n} objects or null, got {_kind(overrides)}"
                  + (f" of {len(overrides)}" if isinstance(overrides, list) else ""))
    base = {k: rec[k] for k in ("group_overrides", "generation_params") if isinstance(rec.get(k), dict)}
    out = []
    for i in range(n):
        tok = _ints(np, tokens[i], f"tokens[{i}]")
        if len(tok) and (int(tok.min()) < 0 or int(tok.max()) > _INT32_MAX):
            raise Bad(f"tokens[{i}]", f"expected token ids in [0, {_INT32_MAX}]")
        mask = _ints(np, masks[i], f"masks[{i}]")
        if len(mask) != len(tok):
            raise Bad(f"masks[{i}]", f"expected {len(tok)} entries (one per token), got {len(mask)}")
        trained = mask != IGNORE
        wrong = np.flatnonzero(trained & (mask != tok))
        if len(wrong):
            j = int(wrong[0])
            raise Bad(f"masks[{i}]", f"position {j}: expected -100 or the token id {int(tok[j])}, got {int(mask[j])}")
        score = scores[i]
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise Bad(f"scores[{i}]", f"expected a number, got {_kind(score)}")
        hits = np.flatnonzero(trained)
        p0 = int(hits[0]) if len(hits) else len(tok)
        s = {"group_index": line_index, "tokens": tok, "response_length": len(tok) - p0,
             "loss_mask": trained[p0:].astype(np.int64), "reward": float(score), "status": "completed"}
        if lps is not None:
            v = lps[i]
            if not isinstance(v, list) or len(v) != len(tok):
                raise Bad(f"inference_logprobs[{i}]", f"expected {len(tok)} numbers (one per token), got "
                          + (f"{len(v)}" if isinstance(v, list) else _kind(v)))
            try:
                lp = np.asarray(v) if v else np.zeros(0)
            except (ValueError, TypeError, OverflowError):
                lp = None
            if lp is None or lp.ndim != 1 or lp.dtype.kind not in "fiu":
                raise Bad(f"inference_logprobs[{i}]", "expected a list of numbers")
            lp = lp.astype(np.float64, copy=False)
            s["rollout_log_probs"] = np.where(trained, lp, 0.0)[p0:]
        md = dict(base)
        if overrides is not None and overrides[i] is not None:
            if not isinstance(overrides[i], dict):
                raise Bad(f"overrides[{i}]", f"expected an object or null, got {_kind(overrides[i])}")
            md["overrides"] = overrides[i]
        if md:
            s["metadata"] = md
        out.append(s)
    return out


def read(inp, request, info) -> Iterator:
    """The registry's entry: the groups of a file, each line's samples with that line's number
    (an unmappable line is one record holding its problem; inputs/linesteps.chunks)."""
    import numpy as np
    import orjson

    from ..linesteps import chunks, file_lines

    # strict JSON: Atropos writes no NaN; a group's index is its line's among the non-blank ones
    yield from chunks(file_lines(inp.path, inp.display, info), lambda obj, i: group_samples(np, obj, i), Bad,
                      "atropos.record", request.chunk_records, orjson.loads)
