"""PipelineRL's file streams (`{output_dir}/streams/actor/{i}/{p}/0.jsonl`, `actor_test` for its
eval loop): each line one prompt group, a list of training texts, one sample per text (one text
per LLM call, so a multi-call rollout is several samples of one rollout). The writer records no
step: a group's step is the oldest weights version in it (detect.py), its lines read wherever
they are in the stream (inputs/linesteps.py); the field mapping is reader.py's, and
docs/frameworks.md (PipelineRL) has it with its sources."""
from ..format import Format

FORMAT = Format(
    name="pipelinerl",
    reader="rollout_cli.inputs.pipelinerl.reader:read",
    detector="rollout_cli.inputs.pipelinerl.detect",
    units="rollout_cli.inputs.pipelinerl.detect:units",
    preload=("rollout_cli.inputs.pipelinerl.reader",),
    no_train_side="PipelineRL writes no trainer dump rollout-cli reads (its preprocessor's output stream holds "
                  "the reference log-probs and the trainer's packed batches live only in memory); auditing a "
                  "PipelineRL run takes a train reader for a dump of them (docs/audit.md, 'Other readers of the "
                  "train side') or a trainer that dumps each step's batch as slime's train dump",
    cut_off="rollout_cli.inputs.completeness:line_cut",
)
