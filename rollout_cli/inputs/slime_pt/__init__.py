"""slime's `.pt` rollout dumps (`{"rollout_id": step, "samples": [...]}`), read without torch
by a restricted unpickler: reader.py hands on the samples; the unpickler is pt_pickle.py (what
it loads) over the restricted unpickler of inputs/pickled (the globals it allows, the zip and its storages).
The dump names its own step (`rollout_id`), which wins over the file's name. Its trainer's
side, slime's train dumps, is read by inputs/train_pt."""
from ..format import Format

FORMAT = Format(
    name="pt",
    reader="rollout_cli.inputs.slime_pt.reader:read",
    extensions=(".pt",),
    payload_step=True,
    train_reader="rollout_cli.inputs.train_pt.reader:read_train",
    train_peek="rollout_cli.inputs.train_pt.reader:peek_keys",
    whole="rollout_cli.inputs.completeness:zip_missing",
    version_lag="rollout_cli.inputs.slime_pt.versions:versions_behind",  # slime's weight_versions
)
