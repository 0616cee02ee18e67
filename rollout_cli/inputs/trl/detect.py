"""TRL's GRPO completion logs. `GRPOTrainer.log` builds a table `{"step", "prompt", "completion",
*one column per reward function, *extra logged columns, "advantage"}` and writes it with pandas'
`to_parquet` to `{output_dir}/completions/completions_{global_step:05d}.parquet`
(huggingface/trl@f2cd5771: trl/trainer/grpo_trainer.py:3293-3327, folder made at 1173-1174); the
same table goes to wandb/trackio. `prompt` and `completion` are `batch_decode(...,
skip_special_tokens=True)` of the ids (2658-2659); the buffers hold the last generation batch
(1055-1061). The trainer's reward is the weighted `nansum` of the reward functions' columns,
weights 1 unless `reward_weights` is set (528-536, 2746): the weights are not logged, so the
reward read here is the plain sum of the numeric columns between `completion` and `advantage`
(a NaN, a function that did not apply, counts 0), each column kept in metadata with the advantage.

A file is claimed by its columns (a Parquet footer, a CSV header or a JSONL file's first record):
`prompt`, `completion` and `advantage`, no `tokens`. A prompt group is the rows of a step with
the same `prompt`."""
from __future__ import annotations

import math

from ..textdump import TextRecord, first_record, table_columns, text_field
from ..unmapped import Bad, kind

_OWN = ("step", "prompt", "completion", "advantage", "image")


def _keys(path: str) -> list[str] | None:
    rec = first_record(path)
    return list(rec) if rec is not None else table_columns(path)


def claims(path: str) -> bool:
    keys = _keys(path)
    return keys is not None and {"prompt", "completion", "advantage"} <= set(keys) and "tokens" not in keys


def step_and_split(path: str) -> tuple[int, str] | None:
    """None: the step is the rows' `step` (else the file name's number)."""
    return None


def record(rec: dict) -> TextRecord:
    keys = list(rec)
    lo = keys.index("completion") + 1 if "completion" in keys else 0
    hi = keys.index("advantage") if "advantage" in keys else len(keys)
    scores = {k: rec[k] for k in keys[lo:hi]
              if k not in _OWN and (rec[k] is None or isinstance(rec[k], (int, float)) and not isinstance(rec[k], bool))}
    if not scores:
        raise Bad("reward", "no reward column (a number column between `completion` and `advantage`)")
    total = sum(float(v) for v in scores.values() if v is not None and not math.isnan(float(v)))
    adv = rec.get("advantage")
    if adv is not None and (isinstance(adv, bool) or not isinstance(adv, (int, float))):
        raise Bad("advantage", f"expected a number, got {kind(adv)}")
    md = {"reward_columns": {k: (None if v is None or math.isnan(float(v)) else float(v)) for k, v in scores.items()},
          "advantage": adv}
    md.update({k: v for k, v in rec.items() if k not in _OWN and k not in scores})
    return TextRecord(text_field(rec, "prompt"), text_field(rec, "completion"), total, rec.get("step"), None, md)


def read(inp, request, info):
    from ..textdump import read as read_text

    return read_text(inp, request, info, record, "trl.record")
