"""miles' side files of a `--dump-details` folder (its dashboard Parquet mirror and trajectory
JSONL, sidecars.py): claimed so they are left out with a note, the step's `.pt` being read by
the `pt` format; a mirror without its `.pt` is refused, naming what it lacks."""
from ..format import Format

FORMAT = Format(
    name="miles",
    reader="rollout_cli.inputs.miles.sidecars:read",
    detector="rollout_cli.inputs.miles.sidecars",
)
