"""ROLL's mock dumps told by their path and the class their first bytes name; `val/` is eval."""
from __future__ import annotations

import pickle

import pytest

from conftest import SAMPLE_DATA, copts
from rollout_cli.inputs.discover import discover
from rollout_cli.inputs.roll import detect

DUMP = SAMPLE_DATA / "roll" / "rollout_mock"


@pytest.mark.parametrize("path, placed", [
    ("mock/train/step_000012.pkl", (12, "train")), ("/abs/mock/val/step_000003.pkl", (3, "eval")),
    ("s3://b/mock/train/step_000001.pkl", (1, "train")), ("mock/step_000001.pkl", None),
    ("mock/train/step_1.pt", None), ("mock/eval/step_000001.pkl", None),
])
def test_step_and_split_from_the_path(path, placed):
    assert detect.step_and_split(path) == placed


def test_claimed_by_path_and_the_class_its_first_bytes_name(tmp_path):
    assert detect.claims(str(DUMP / "train" / "step_000001.pkl"))
    other = tmp_path / "train" / "step_000001.pkl"
    other.parent.mkdir()
    other.write_bytes(pickle.dumps({"a": 1}))
    assert not detect.claims(str(other))  # a pickle at ROLL's path that is not ROLL's DataProto
    named = tmp_path / "elsewhere.pkl"
    named.write_bytes((DUMP / "train" / "step_000001.pkl").read_bytes())
    assert not detect.claims(str(named))
    assert detect.claims("s3://bucket/mock/val/step_000002.pkl")  # a remote file by its path


def test_a_dump_folder_as_the_writer_leaves_it():
    files, skipped, notes = discover([str(SAMPLE_DATA / "roll")], options=copts())
    assert [(f.display.split("roll/")[-1], f.format, f.step, f.split) for f in files] == [
        ("rollout_mock/train/step_000001.pkl", "roll", 1, "train"),
        ("rollout_mock/train/step_000002.pkl", "roll", 2, "train"),
        ("rollout_mock/val/step_000002.pkl", "roll", 2, "eval")]
    assert not notes
