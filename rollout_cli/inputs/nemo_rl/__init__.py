"""NeMo-RL's per-step train logs (`train_data_step{N}.jsonl`): told by detect.py from the path
and first line, read through the JSONL reader and cut to slime's sample fields (reader.py,
mapping.py). Their group_index is a key of the prompt's tokens, renumbered per step; the same
logs carry the trainer's log-probs, so they are a train-side input too."""
from ..format import Format

FORMAT = Format(
    name="nemo_rl",
    reader="rollout_cli.inputs.nemo_rl.reader:read",
    detector="rollout_cli.inputs.nemo_rl.detect",
    splitter="rollout_cli.inputs.nemo_rl.reader:split",
    content_groups=True,
    train_reader="rollout_cli.inputs.nemo_rl.reader:read_train",
    cut_off="rollout_cli.inputs.completeness:line_cut",
    fingerprint_on_read="rollout_cli.inputs.jsonl.reader:hashes_whole",
)
