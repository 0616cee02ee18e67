"""ROLL's rollout mock dumps (`rollout_mock: {enable: true, mode: dump}`:
`{dump_dir}/{train,val}/step_{NNNNNN}.pkl`, the agentic pipeline's pickled `DataProto`): told
by detect.py from the path and the class the first bytes name, loaded as plain data by the
restricted unpickler (no pickle code runs) and mapped one sample per row (reader.py,
mapping.py); `val/` is the eval split. Sources and mapping: docs/frameworks.md (ROLL)."""
from ..format import Format

FORMAT = Format(
    name="roll",
    reader="rollout_cli.inputs.roll.reader:read",
    detector="rollout_cli.inputs.roll.detect",
    preload=("rollout_cli.inputs.roll.mapping",),
    no_train_side="ROLL writes no trainer dump rollout-cli reads (its mock dumps are the rollout side, before "
                  "advantages and the trainer's log-probs); auditing a ROLL run takes a trainer that dumps each "
                  "step's batch as slime's train dump",
)
