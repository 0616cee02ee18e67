"""`inspect`: aggregations of dumps (through the same stage functions as convert) or of a
converted output (through its manifest), returned as plain data.

One job per module: `options` (InspectOptions), `sources` (dumps or converted output),
`dumps` (a dump step through convert's stages), `outputs` (a converted step from its shards),
`rows` (the per-sample row), `anomalies`, `aggregate` (summary, histograms, groups), `show`
(`--show`), and `api`, the entry points exported here."""
from .anomalies import ANOMALY_KINDS
from .api import InspectOptions, StepData, inspect_paths, iter_steps, show_rollout, show_rollouts

__all__ = ["ANOMALY_KINDS", "InspectOptions", "StepData", "inspect_paths", "iter_steps", "show_rollout", "show_rollouts"]
