"""Reading NeMo-RL's step logs: the rollout side (`read`, `split`: newline-aligned byte ranges
through the JSONL reader, each line cut to slime's sample fields by mapping.py) and the
trainer's side (`read_train`: the logged batch as slime's train dump). No numpy at import:
part planning imports `split`."""
from __future__ import annotations

from typing import Iterator


def read(inp, request, info) -> Iterator:
    """The registry's entry: a step log, or its byte range [request.start, request.end)."""
    from ..jsonl.reader import read_jsonl
    from .mapping import parser, shape_chunk

    from ..jsonl.reader import CHUNK_BYTES

    stats: dict = {}
    extra = {} if request.chunk_records is None else {"chunk_records": request.chunk_records}
    # a record keeps its unpadded rows only (a fraction of its line): chunks may span more JSON
    yield from read_jsonl(inp.path, inp.display, start=request.start, end=request.end, stats=stats,
                          parser=parser(), shape=shape_chunk,
                          chunk_bytes=CHUNK_BYTES * 8, fingerprint=request.fingerprint, **extra)
    info.lines = stats.get("lines", 0)
    info.fingerprint = stats.get("fingerprint")


def split(inp, parts: int) -> list[tuple[int, int | None]]:
    """Newline-aligned byte ranges, as for any JSONL file."""
    from ..jsonl.reader import split as split_jsonl

    return split_jsonl(inp, parts)


def train_payload(inp) -> dict:
    """The step as slime's train-side dump payload (`{"format_version": 2, "rollout_id": step,
    "rank": 0, "samples": [...]}`, numpy arrays), with NeMo-RL's trainer log-probs
    (`prev_logprobs`) as `log_probs` and its `advantages`, both over the response span.
    `inp`: an InputFile or a path. Bad input raises InvalidInputError naming file, line, field."""
    from .mapping import train_payload as payload

    return payload(inp)


def read_train(inp, trust_pickle: bool = False):
    """The registry's train entry (`audit --train`): train_payload as the trainer used it,
    checked as slime's train dumps are (inputs/train_pt/reader.py). The mask it trained on is the
    token mask times the sample mask (NVIDIA-NeMo/RL@7ea279ab: nemo_rl/algorithms/grpo.py:2545),
    and the logged rewards are the raw ones (the trainer computes its advantages from them), so
    they are the payload's `raw_reward`, not post-processed `rewards`."""
    import numpy as np

    from ..train_pt.reader import from_payload

    from ...core import slime_keys as K

    p = train_payload(inp)
    raw = []
    for s in p[K.SAMPLES]:
        if s.pop("sample_mask", 1) == 0 and s.get(K.LOSS_MASKS) is not None:
            s[K.LOSS_MASKS] = np.zeros_like(s[K.LOSS_MASKS])
        raw.append(s.pop(K.REWARDS, None))
    p[K.RAW_REWARD] = raw  # by rollout_position: the lines in order
    return from_payload(p, inp.display)
