"""prime-rl's episode traces (`rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl`):
told from the path or the first bytes, each episode's branches read as slime samples
(reader.py); a file is cut into newline-aligned byte ranges, as any JSONL file."""
from ..format import Format

FORMAT = Format(
    name="prime_rl",
    reader="rollout_cli.inputs.prime_rl.reader:read",
    detector="rollout_cli.inputs.prime_rl.reader",
    splitter="rollout_cli.inputs.prime_rl.reader:split",
    preload=("rollout_cli.inputs.prime_rl.reader",),
    no_train_side="prime-rl writes no trainer dump rollout-cli reads (its trainer's packed micro-batches, "
                  "rollouts/step_N/rank_R.bin, and its opt-in token_exports are not train-side inputs); auditing a "
                  "prime-rl run takes a train reader for one of them (docs/audit.md, 'Other readers of the train "
                  "side') or a trainer that dumps each step's batch as slime's train dump",
    cut_off="rollout_cli.inputs.completeness:line_cut",
)
