"""miles dumps: its `.pt` (slime's payload plus `metadata`, with miles' dataclasses read as plain
data), its side files, and the rows slime's reader gives for the same samples."""
from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, copts, make_sample, read_rows, write_jsonl, write_pt
from framework_dumps import miles_types, plain
from rollout_cli.cli.app import app
from rollout_cli.inputs.pickled import allow
from rollout_cli.inputs.slime_pt.pt_pickle import PlainData, PtFormatError, UnsafePickleError, load_pt
from rollout_cli.run.convert import convert

MILES = SAMPLE_DATA / "miles"
SLIME_KEYS = ("group_index", "index", "rollout_id", "tokens", "response_length", "reward", "loss_mask",
              "rollout_log_probs", "remove_sample", "status", "metadata", "weight_versions")


def _zip(path: Path, pkl: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/version", b"3\n")
    return path


def test_dataclasses_come_back_as_plain_dicts():
    payload = load_pt(MILES / "rollout_data" / "2.pt")
    assert set(payload) == {"rollout_id", "metadata", "samples"} and payload["metadata"] == {"num_samples": 9}
    s = payload["samples"][0]
    assert isinstance(s["adapter"], PlainData) and dict(s["adapter"]) == {"name": "lora-a", "slot": 0}
    assert dict(s["reward_spec"]) == {"rm_type": "math", "custom_rm_path": None}
    miles_types()
    ref = torch.load(MILES / "rollout_data" / "2.pt", weights_only=False)
    assert plain(payload) == plain(ref)


@pytest.mark.parametrize("make", [
    lambda mt: mt.AdapterRef("a", 1),
    lambda mt: {"x": [mt.RewardSpec("math"), mt.AdapterRef("b", 2)]},
])
def test_each_protocol_torch_uses_reads_them(tmp_path, make):
    mt = miles_types()
    obj = make(mt)
    torch.save(obj, tmp_path / "d.pt")
    assert plain(load_pt(tmp_path / "d.pt")) == plain(obj)


def test_everything_else_is_still_refused(tmp_path):
    head = b"\x80\x02cmiles.utils.types\nAdapterRef\n"
    cases = {
        "a class not allowlisted": (b"\x80\x02cmiles.utils.types\nSample\n)\x81.", UnsafePickleError),
        "NEWOBJ with arguments": (head + b"K\x01\x85\x81.", PtFormatError),
        "BUILD from a list": (head + b")\x81]b.", PtFormatError),
        "BUILD with a non-str key": (head + b")\x81}K\x01K\x02sb.", PtFormatError),
        "BUILD twice": (head + b")\x81}X\x01\x00\x00\x00aK\x01sb}X\x01\x00\x00\x00bK\x02sb.", PtFormatError),
        "BUILD on the class": (head + b"}X\x01\x00\x00\x00aK\x01sb.", PtFormatError),
        "REDUCE of os.system": (b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00idq\x85R.", UnsafePickleError),
    }
    for name, (pkl, err) in cases.items():
        with pytest.raises(err):
            load_pt(_zip(tmp_path / "x.pt", pkl))
    assert not hasattr(allow._PLAIN_TYPES["miles.utils.types.AdapterRef"], "a"), "the class was changed"


def test_a_hand_written_pickle_reads(tmp_path):
    pkl = b"\x80\x02cmiles.utils.types\nRewardSpec\n)\x81}(X\x07\x00\x00\x00rm_typeX\x04\x00\x00\x00mathub."
    got = load_pt(_zip(tmp_path / "r.pt", pkl))
    assert type(got).__name__ == "RewardSpec" and got == {"rm_type": "math"}
    with pytest.raises(TypeError):
        pickle.dumps(got)  # never written back as if it were miles' class


def test_dump_folder_converts_as_slime_samples(tmp_path):
    res = convert([str(MILES)], str(tmp_path / "out"), copts())
    assert [(s["split"], s["step"], s["rows"]) for s in res["steps"]] == [("train", 1, 9), ("train", 2, 9), ("eval", 2, 2)]
    assert sum("dashboard mirror" in n for n in res["notes"]) == 3
    # the same samples, without miles' own fields, through slime's reader: the same rows
    for stem, split in (("1", "train"), ("2", "train"), ("eval_2", "eval")):
        payload = load_pt(MILES / "rollout_data" / f"{stem}.pt")
        slim = [{k: s[k] for k in SLIME_KEYS} for s in payload["samples"]]
        sub = "eval_" if split == "eval" else ""
        write_pt(tmp_path / "slime" / "rollout_data" / f"{sub}{payload['rollout_id']}.pt", slim, payload["rollout_id"])
    convert([str(tmp_path / "slime")], str(tmp_path / "ref"), copts())
    for split in ("train", "eval"):
        assert read_rows(tmp_path / "out", split) == read_rows(tmp_path / "ref", split)
    rows = read_rows(tmp_path / "out", step=2)
    want = load_pt(MILES / "rollout_data" / "2.pt")["samples"]
    assert [r["group_index"] for r in rows] == [s["group_index"] for s in want]
    assert [r["status"] for r in rows] == [s["status"] for s in want]
    # miles' weight_versions (slime's field) are carried: one entry per generation call
    assert [r["weight_versions"] for r in rows] == [s["weight_versions"] or None for s in want]
    assert any(r["weight_versions"] for r in rows)


def test_inspect_and_verify_on_the_dump_and_its_output(tmp_path):
    r = CliRunner().invoke(app, ["inspect", str(MILES), "--json"])
    assert r.exit_code == 0, r.output
    convert([str(MILES)], str(tmp_path / "out"), copts())
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["report", str(MILES), "-o", str(tmp_path / "r.html"), "-q"])
    assert r.exit_code == 0 and (tmp_path / "r.html").stat().st_size > 1000, r.output


# ------------------------------------------------------------------------------ the same rows as slime's JSONL

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None)


@st.composite
def miles_steps(draw):
    mt = miles_types()
    samples = []
    for g in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 3))):
            i = len(samples)
            rl = draw(st.integers(0, 4))
            s = make_sample(index=i, group_index=g, response_length=rl, reward=draw(st.sampled_from([0.0, 0.5, 1.0])),
                            loss_mask=draw(st.lists(st.integers(0, 1), min_size=rl, max_size=rl)),
                            status=draw(st.sampled_from(["completed", "truncated", "aborted"])),
                            rollout_id=draw(st.sampled_from([None, None, 100 + i])), log_probs=draw(st.booleans()))
            samples.append(s)
    extras = []
    for s in samples:  # miles' own fields: not train-row fields
        extras.append({"adapter": draw(st.sampled_from([None, mt.AdapterRef("a", 0), mt.AdapterRef("b", 3)])),
                       "reward_spec": draw(st.sampled_from([None, mt.RewardSpec("math", None)])),
                       "routing_key": "k", "opd_reverse_kl": None, "rollout_indexer_topk": None})
    return samples, extras


@settings(max_examples=15, **SETTINGS)
@given(miles_steps())
def test_same_rows_as_slime_jsonl_of_the_same_samples(step):
    import tempfile

    samples, extras = step
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "miles" / "rollout_data").mkdir(parents=True)
        torch.save({"rollout_id": 4, "metadata": {"k": 1}, "samples": [dict(s, **e) for s, e in zip(samples, extras)]},
                   d / "miles" / "rollout_data" / "4.pt")
        write_jsonl(d / "slime" / "4.jsonl", samples)
        convert([str(d / "miles")], str(d / "a"), copts())
        convert([str(d / "slime")], str(d / "b"), copts())
        a, b = read_rows(d / "a"), read_rows(d / "b")
    assert a == b and len(a) == len(samples)


def test_r3_dump_converts_without_trust_pickle(tmp_path):
    """miles with rollout routing replay: `rollout_routed_experts` is a numpy int32 array
    (len(tokens)-1, layers, top-k) in each sample. It converts with no flag, and its rows hold
    what the same samples give in JSONL (nested lists) and as torch tensors."""
    import numpy as np

    rng = np.random.default_rng(3)
    samples = [make_sample(index=i, group_index=i // 2, response_length=3, reward=float(i % 2)) for i in range(4)]
    for s in samples:
        s["rollout_routed_experts"] = rng.integers(0, 8, (len(s["tokens"]) - 1, 2, 2)).astype(np.int32)
    (tmp_path / "miles" / "rollout_data").mkdir(parents=True)
    torch.save({"rollout_id": 5, "metadata": {}, "samples": samples}, tmp_path / "miles" / "rollout_data" / "5.pt")
    write_jsonl(tmp_path / "slime" / "5.jsonl", [dict(s, rollout_routed_experts=s["rollout_routed_experts"].tolist()) for s in samples])
    write_pt(tmp_path / "tensors" / "rollout_data" / "5.pt",
             [dict(s, rollout_routed_experts=torch.from_numpy(s["rollout_routed_experts"])) for s in samples], 5)
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "miles"), str(tmp_path / "a"), "-q"])
    assert r.exit_code == 0, r.output
    convert([str(tmp_path / "slime")], str(tmp_path / "b"), copts())
    convert([str(tmp_path / "tensors")], str(tmp_path / "c"), copts())
    a = read_rows(tmp_path / "a")
    assert a == read_rows(tmp_path / "b") == read_rows(tmp_path / "c") and len(a) == 4
    for row, s in zip(a, samples):
        assert row["rollout_routed_experts_shape"] == list(s["rollout_routed_experts"].shape)
        assert row["rollout_routed_experts"] == s["rollout_routed_experts"].ravel().tolist()
