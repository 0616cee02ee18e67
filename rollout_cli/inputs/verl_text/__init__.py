"""verl's rollout text dump (`trainer.rollout_data_dir`): `{rollout_data_dir}/{global_step}.jsonl`,
one object per sample with the decoded prompt (`input`), response (`output`), `score`, `step`,
`gts` and the reward's extra keys. No token ids: read only through --tokenizer
(inputs/textdump.py), into rows that are not token-exact; detect.py has the writer's facts."""
from ..format import Format

FORMAT = Format(
    name="verl_text",
    reader="rollout_cli.inputs.verl_text.detect:read",
    detector="rollout_cli.inputs.verl_text.detect",
    step_field="rollout_cli.inputs.textdump:peek_step",
    content_groups=True,
    text_dump="verl rollout_data_dir text dump",
    no_train_side="verl's rollout_data_dir holds decoded text only; its token-level batches are in the "
                  "rollout-skip cache (`verl` format), and no trainer dump is written",
    cut_off="rollout_cli.inputs.completeness:line_cut",
)
