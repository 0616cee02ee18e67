"""TRL's GRPO completion logs (`log_completions=True`): `{output_dir}/completions/completions_{step:05d}.parquet`,
one row per completion with `step`, `prompt`, `completion`, one column per reward function, the
extra logged columns and `advantage` (the same table as JSONL or CSV reads too). No token ids:
read only through --tokenizer (inputs/textdump.py); detect.py has the writer's facts."""
from ..format import TEXT_DUMP_HOOKS, Format

FORMAT = Format(
    name="trl",
    reader="rollout_cli.inputs.trl.detect:read",
    detector="rollout_cli.inputs.trl.detect",
    text_dump="TRL completions table",
    no_train_side="TRL writes no trainer dump: its completion logs hold decoded text and rewards only",
    **TEXT_DUMP_HOOKS,
)
