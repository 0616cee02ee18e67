"""sample_data/pickled_writers.py (the SkyRL, verl and ROLL batch writers), importable by tests
by its bare name: ``from pickled_dumps import writers`` (or the functions themselves)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[2] / "sample_data" / "pickled_writers.py"
if "pickled_writers" in sys.modules:
    writers = sys.modules["pickled_writers"]
else:
    _spec = importlib.util.spec_from_file_location("pickled_writers", _SCRIPT)
    writers = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = writers  # dataclasses look their module up while they are made
    _spec.loader.exec_module(writers)

write_skyrl, write_verl, write_roll = writers.write_skyrl, writers.write_verl, writers.write_roll
verl_step_dir, load_with_standins, standins = writers.verl_step_dir, writers.load_with_standins, writers.standins
