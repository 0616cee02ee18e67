"""`audit`: a run's rollout dumps joined to what its trainer computed (slime's train-side
dumps, or any reader's payload shaped like them). One job per module: `options`
(AuditOptions), `train_side` (the train inputs, one step held at a time), `diff` (what a
rollout sample determines against what the trainer holds: divergence records), `mismatch`
(train-inference log-prob figures over trained tokens), `step` (one step through convert's
stages and both comparisons) and `api` (`audit_paths`, the entry point exported here)."""
from .api import audit_paths
from .options import AuditOptions

__all__ = ["AuditOptions", "audit_paths"]
