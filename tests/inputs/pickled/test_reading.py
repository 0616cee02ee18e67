"""read_pickled (rollout_cli.inputs.pickled.reading), what a pickled format's reader calls: its
failures are the tool's errors (exit 3 naming the file and the global, --trust-pickle offered),
and --trust-pickle does run what the file names."""
from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
from pickled_dumps import write_verl

from rollout_cli.core.errors import ExitCode, InvalidInputError
from rollout_cli.inputs.pickled import read_pickled


def test_a_framework_file_reads(tmp_path):
    path = write_verl(tmp_path, 1, {"ids": np.arange(6).reshape(2, 3)}, gbs=1, n=2, prompt_length=1, response_length=2)
    out = read_pickled(str(path), "gen_batch.dp")
    assert out.class_name == "verl.protocol.DataProto" and out["batch"]["ids"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_a_global_off_the_list(tmp_path):
    path = tmp_path / "step_000001.pkl"
    marker = tmp_path / "ran"
    path.write_bytes(pickle.dumps({"c": collections.Counter("aab")}, protocol=5))
    with pytest.raises(InvalidInputError) as ei:
        read_pickled(str(path), "run/train/step_000001.pkl")
    msg = str(ei.value)
    assert ei.value.exit_code == ExitCode.INVALID_INPUT == 3
    assert msg.startswith("run/train/step_000001.pkl: needs full unpickling (it references collections.Counter)")
    assert "--trust-pickle" in msg
    # --trust-pickle: the global is imported and called, as pickle.load would
    assert read_pickled(str(path), "x", trust_pickle=True) == {"c": collections.Counter("aab")}
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c" + bytes([len(f"touch {marker}")]) + f"touch {marker}".encode() + b"\x85R.")
    with pytest.raises(InvalidInputError):
        read_pickled(str(evil), "evil.pkl")
    assert not marker.exists()
    read_pickled(str(evil), "evil.pkl", trust_pickle=True)
    assert marker.exists()  # the fixture is real: trusted, it runs


def test_corrupt_and_missing(tmp_path):
    bad = tmp_path / "gen_batch.dp"
    bad.write_bytes(pickle.dumps({"a": 1}, protocol=4)[:-3])
    with pytest.raises(InvalidInputError, match=r"^gen_batch.dp: not a readable pickle: corrupt pickle stream"):
        read_pickled(str(bad), "gen_batch.dp")
    with pytest.raises(InvalidInputError, match="cannot open"):
        read_pickled(str(tmp_path / "missing.pkl"), "missing.pkl")
    with pytest.raises(InvalidInputError, match="not a readable torch dump"):
        read_pickled(str(bad), "x.pt", torch_archive=True)
