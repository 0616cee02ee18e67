"""A generic text dump: JSONL, Parquet or CSV whose records hold `prompt` and `completion` text
and a `reward` (or `score`), optionally `step` and a `group` (or `group_index`). No token ids:
read only through --tokenizer (inputs/textdump.py), into rows that are not token-exact."""
from ..format import TEXT_DUMP_HOOKS, Format

FORMAT = Format(
    name="text",
    reader="rollout_cli.inputs.text.detect:read",
    detector="rollout_cli.inputs.text.detect",
    text_dump="text dump (prompt and completion text)",
    no_train_side="a text dump holds decoded text and rewards only: no trainer dump goes with it",
    **TEXT_DUMP_HOOKS,
)
