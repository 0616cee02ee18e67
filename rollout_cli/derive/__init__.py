"""Training data for the next run from a converted output: SFT, DPO, KTO and reward-model rows
by stated rules (rules.py), with provenance on every row (rows.py), written as a folder the
Hugging Face `datasets` library loads (run.py). docs/derive.md states the rules.

`rollout_cli.derive` is this package, and calling it calls `run.derive`: the package's name
and the library function's are one, so the call works however the package was first imported."""
from __future__ import annotations

import sys
import types


class _Package(types.ModuleType):
    def __call__(self, out, dest, as_: str = "sft", **options):
        from .run import derive

        return derive(out, dest, as_=as_, **options)


_Package.__call__.__doc__ = "derive(out, dest, as_=..., **options): see rollout_cli.derive.run.derive."
sys.modules[__name__].__class__ = _Package
