"""TRL's GRPO completion logs (`log_completions=True`): `{output_dir}/completions/completions_{step:05d}.parquet`,
one row per completion with `step`, `prompt`, `completion`, one column per reward function, the
extra logged columns and `advantage` (the same table as JSONL or CSV reads too). No token ids:
read only through --tokenizer (inputs/textdump.py); detect.py has the writer's facts."""
from ..format import Format

FORMAT = Format(
    name="trl",
    reader="rollout_cli.inputs.trl.detect:read",
    detector="rollout_cli.inputs.trl.detect",
    step_field="rollout_cli.inputs.textdump:peek_step",
    content_groups=True,
    text_dump="TRL completions table",
    no_train_side="TRL writes no trainer dump: its completion logs hold decoded text and rewards only",
    cut_off="rollout_cli.inputs.textdump:cut_off",
    whole="rollout_cli.inputs.textdump:whole",
)
