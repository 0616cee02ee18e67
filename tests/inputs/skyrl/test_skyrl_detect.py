"""SkyRL's dumps are told by name, or by a `.pkl`'s first bytes; the step is the name's N."""
from __future__ import annotations

import pickle

from rollout_cli.inputs.skyrl import detect


def test_claims_the_dump_by_name_and_reads_its_step(tmp_path):
    p = tmp_path / "dumped_data" / "global_step_12_training_input.pkl"
    assert detect.claims(str(p))  # by name alone: its reader says what is wrong with its bytes
    assert detect.step_and_split(str(p)) == (12, "train")
    assert not detect.claims(str(tmp_path / "global_step_12_training_output.pkl"))
    assert detect.step_and_split(str(tmp_path / "global_step_12.pkl")) is None
    assert not detect.claims("-")


def test_claims_a_renamed_dump_by_its_first_bytes(tmp_path):
    other = tmp_path / "batch_3.pkl"
    other.write_bytes(pickle.dumps({"a": 1}, protocol=4))
    assert not detect.claims(str(other))
    # the opening of TensorBatch.__reduce__'s pickle: the module and function it names
    head = (b"\x80\x04\x95\x00\x01\x00\x00\x00\x00\x00\x00\x8c)skyrl.backends.skyrl_train.training_batch"
            b"\x94\x8c\x15_rebuild_tensor_batch\x94\x93\x94")
    dump = tmp_path / "batch_3.pkl"
    dump.write_bytes(head + b"\x00" * 16)
    assert detect.claims(str(dump))
    assert detect.step_and_split(str(dump)) is None  # its step: the number in its name (discovery's rule)
    txt = tmp_path / "notes.txt"
    txt.write_bytes(head)
    assert not detect.claims(str(txt))
