"""Atropos' scored groups (`data_path_to_save_groups`: `{stem}.jsonl`, then `{stem}_1.jsonl`,
... when the path exists): told by detect.py from the first line, each line a prompt group and
each sequence a rollout (reader.py, the mapping); one file is one step, read whole. The viewer
page beside each file and an evaluation's text samples are skipped with a note."""
from ..format import Format

FORMAT = Format(
    name="atropos",
    reader="rollout_cli.inputs.atropos.reader:read",
    detector="rollout_cli.inputs.atropos.detect",
    preload=("rollout_cli.inputs.atropos.reader",),
    no_train_side="Atropos writes no trainer dump rollout-cli reads (its trainers take the scored groups from the "
                  "API and keep no per-step batch on disk); auditing an Atropos run takes a trainer that dumps each "
                  "step's batch as slime's train dump",
    cut_off="rollout_cli.inputs.completeness:line_cut",
)
