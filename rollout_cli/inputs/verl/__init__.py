"""verl's rollout-skip cache (`skip.rollout.enable=true`, `skip.rollout.steps=[...]`):
`{dump_dir}/{experiment}_{project}/GBS{gbs}_N{n}_in{P}_out{R}/{step}/gen_batch.dp` + `meta.json`,
one pickled `DataProto` of the agent loop's output per listed step (verl-project/verl@1dda039b9c63:
verl/utils/skip/rollout_skip.py:95-122; verl/protocol.py:377-434).

Told by detect.py from the path (`meta.json` and the TransferQueue trainer's `tq_batch.pt`
beside it are left out with a note), read by reader.py through the restricted unpickler (no
verl, tensordict or torch: the DataProto's state, the consolidated TensorDict's torch.save bytes
and the non-tensor numpy arrays as plain data) and mapped row by row by mapping.py. The step is
the `{step}` folder; the prompt groups are the `uid`s where the batch has them, else consecutive
blocks of the folder's N rows; `global_steps` (the generating weights' version, step - 1 in a
synchronous run) is `weight_versions`. docs/frameworks.md (verl) has the mapping."""
from ..format import Format

FORMAT = Format(
    name="verl",
    reader="rollout_cli.inputs.verl.reader:read",
    detector="rollout_cli.inputs.verl.detect",
    rewards_recorded=False,  # no rm_scores with reward-loop workers (the default)
    version_lag="rollout_cli.inputs.verl.detect:version_lag",  # global_steps: step - 1 is the step's own
    whole="rollout_cli.inputs.completeness:pickle_missing",
    no_train_side="the rollout-skip cache holds the agent loop's output only; verl writes no per-step dump of "
                  "its trainer's batch (old log-probs, advantages) that a train reader could read",
)
