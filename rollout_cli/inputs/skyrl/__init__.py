"""SkyRL's training-batch dumps (`trainer.dump_data_batch=true`):
`{export_path}/dumped_data/global_step_{N}_training_input.pkl`, one pickled `TrainingInputBatch`
per train step (NovaSky-AI/SkyRL@a9564572eb8e: skyrl/train/trainer.py:421-446, 1236-1242;
skyrl/backends/skyrl_train/training_batch.py:244-300, 395-398).

Told by detect.py from the name (or a `.pkl`'s first bytes), read by reader.py through the
restricted unpickler (no SkyRL, no torch: the batch's classes and tensors as plain data), and
mapped row by row by mapping.py: left-padded sequences stripped by the attention mask (the pad
id may be the end-of-sequence id), the right-aligned response tensors cut to the response,
`policy_prompt_boundaries` as the prompt groups, each row one rollout, the `pad_size` trailing
copies of row 0 left out with a note. The rewards are popped before the dump, so the rows'
reward is not recorded (null). The step is the file name's N. docs/frameworks.md (SkyRL) has
the mapping."""
from ..format import Format

FORMAT = Format(
    name="skyrl",
    reader="rollout_cli.inputs.skyrl.reader:read",
    detector="rollout_cli.inputs.skyrl.detect",
    rewards_recorded=False,  # popped before the dump (trainer.py:433-439)
    whole="rollout_cli.inputs.completeness:pickle_missing",
    no_train_side="SkyRL's dump holds the trainer's batch itself, read here as the rollout side (its trainer's "
                  "log-probs, action_log_probs, are in the same file); SkyRL writes no separate trainer dump to pair "
                  "it with"
)
