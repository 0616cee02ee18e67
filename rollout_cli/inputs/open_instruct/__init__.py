"""open-instruct's saved traces (`--save_traces`: `{run}_rollouts_{NNNNNN}.jsonl` shards, one record
per sample, and `{run}_metadata.jsonl`, left out with a note): each record names its step, a shard
holds many and a resumed run writes some again (detect.py decides which copy is read); the field
mapping, loss mask and what a `NaN` log-prob means are reader.py's, and docs/frameworks.md
(open-instruct) has them with their sources."""
from ..format import Format

FORMAT = Format(
    name="open_instruct",
    reader="rollout_cli.inputs.open_instruct.reader:read",
    detector="rollout_cli.inputs.open_instruct.detect",
    units="rollout_cli.inputs.open_instruct.detect:units",
    preload=("rollout_cli.inputs.open_instruct.reader",),
    no_train_side="open-instruct writes no trainer dump rollout-cli reads (its packed batches, with the tool mask "
                  "and the trainer's log-probs, live only in memory); auditing an open-instruct run takes a train "
                  "reader for a dump of them (docs/audit.md, 'Other readers of the train side') or a trainer that "
                  "dumps each step's batch as slime's train dump",
    cut_off="rollout_cli.inputs.completeness:line_cut",
)
