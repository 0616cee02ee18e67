"""The library leaves its caller's process as it was: `convert` (with a worker pool) and the
loader change no process-wide setting, and the caller's own multiprocessing still works."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import SAMPLE_DATA

_CALLER = r'''
import gc, json, multiprocessing as mp, os, sys
import concurrent.futures as cf

def state():
    main = sys.modules["__main__"]
    return {
        "gc": [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count()],
        "environ": dict(os.environ),
        "meta_path": [type(f).__qualname__ for f in sys.meta_path],
        "main": [main.__dict__.get("__spec__") is None, sorted(k for k in vars(main) if k.startswith("__"))],
        "start_method": mp.get_start_method(allow_none=True),
    }

def square(x):
    return x * x

if __name__ == "__main__":
    import numpy, pyarrow, torch  # what a trainer has imported already
    from rollout_cli import ConvertOptions, convert, open_dataset

    before = state()
    result = convert([sys.argv[1]], sys.argv[2], ConvertOptions(workers=2, shards=2))
    ds = open_dataset(sys.argv[2])
    batch = ds.load(ds.steps[0], 0)
    after = state()
    mp.set_start_method("spawn")  # would raise "context has already been set" had it been fixed
    with cf.ProcessPoolExecutor(2) as pool:
        squares = list(pool.map(square, range(4)))
    print(json.dumps({"before": before, "after": after, "rows": result.counts["rows"],
                      "tokens": int(batch.tokens.numel()), "squares": squares}))
'''


def test_convert_and_load_leave_the_callers_process_as_it_was(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(_CALLER)
    run = subprocess.run([sys.executable, str(script), str(SAMPLE_DATA / "jsonl"), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["before"]["start_method"] is None
    for key in got["before"]:
        assert got["after"][key] == got["before"][key], key
    assert got["rows"] > 0 and got["tokens"] > 0
    assert got["squares"] == [0, 1, 4, 9]
