"""verl's rollout text dump: `RayPPOTrainer._log_rollout_data` decodes the batch's `prompts` and
`responses` with `skip_special_tokens=True`, sums `token_level_scores` per sample, and
`_dump_generations` writes `{rollout_data_dir}/{global_steps}.jsonl`, one
`json.dumps(entry, ensure_ascii=False)` per sample with keys `input`, `output`, `gts`, `score`,
`step` in that order, then each reward-extra list of the batch's length
(volcengine/verl@b178a3cd: verl/trainer/ppo/ray_trainer.py:396-455). The newer V1 trainer adds
a `uid` (the prompt group) to the same keys.

A file is claimed by its first record: an object holding `input` and `output` text and `score`,
without `tokens`. The step is each line's `step` (the file name's number where absent); a prompt
group is `uid` where present, else the lines of the step with the same `input`."""
from __future__ import annotations

from ..textdump import TextRecord, first_record, group_key, number_field, text_field

_OWN = ("input", "output", "score", "step", "uid")


def claims(path: str) -> bool:
    rec = first_record(path)
    return (rec is not None and isinstance(rec.get("input"), str) and isinstance(rec.get("output"), str)
            and "score" in rec and "tokens" not in rec)


def step_and_split(path: str) -> tuple[int, str] | None:
    """None: the step is the lines' `step` (else the file name's number)."""
    return None


def record(rec: dict) -> TextRecord:
    md = {k: v for k, v in rec.items() if k not in _OWN}
    return TextRecord(text_field(rec, "input"), text_field(rec, "output"), number_field(rec, "score"),
                      rec.get("step"), group_key(rec.get("uid"), "uid"), md or None)


def read(inp, request, info):
    from ..textdump import read as read_text

    return read_text(inp, request, info, record, "verl_text.record")
