"""The framework dump generator of sample_data/ (make_framework_data.py), importable by tests,
and functions to compare what such dumps hold."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[2] / "sample_data" / "make_framework_data.py"
_spec = importlib.util.spec_from_file_location("make_framework_data", _SCRIPT)
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen  # dataclasses look their module up while they are made
_spec.loader.exec_module(gen)

miles_types = gen.miles_types
Conversation, Turn = gen.Conversation, gen.Turn
nemo_rl_batch, write_batched_jsonl = gen.nemo_rl_batch, gen.write_batched_jsonl


def plain(obj):
    """Dataclass instances and dict subclasses as plain dicts, recursively."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: plain(v) for k, v in vars(obj).items()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(plain(v) for v in obj)
    return obj
