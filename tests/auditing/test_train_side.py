"""The train side of an audit: each file read once, when its step is audited, its step taken
from its payload (not its name), a step's per-rank files merged."""
from __future__ import annotations

import pytest
from pathlib import Path

import train_dumps as T
from rollout_cli.auditing import AuditOptions, audit_paths, train_side
from rollout_cli.core.errors import InvalidInputError
from rollout_cli.auditing.train_side import TrainSide
from rollout_cli.inputs.discover import discover_train
from rollout_cli.inputs.train_pt.reader import peek_keys


def _dumps(tmp_path, steps=(0, 1, 2)):
    for s in steps:
        samples = T.rollout_samples(s)
        T.write_rollout(tmp_path / "r", samples, s, "pt")
        T.write_train(tmp_path / "t", samples, s, n=2, rbs=3)


def test_peek_reads_the_step_without_unpickling(tmp_path):
    (p,) = T.write_train(tmp_path, T.rollout_samples(0), 12345678901, n=2, rbs=3)
    assert peek_keys(str(p))["rollout_id"] == 12345678901
    p.write_bytes(b"not a zip")
    assert peek_keys(str(p)) is None


def test_swapped_names_pair_by_payload(tmp_path):
    _dumps(tmp_path)
    t = tmp_path / "t"
    (t / "0.pt").rename(t / "tmp.pt")
    (t / "2.pt").rename(t / "0.pt")
    (t / "tmp.pt").rename(t / "2.pt")
    r = audit_paths([str(tmp_path / "r")], [str(t)])
    assert r["divergences"] == [] and [s["train_file"].rsplit("/", 1)[1] for s in r["steps"]] == ["2.pt", "1.pt", "0.pt"]


def test_each_file_read_once_and_only_for_its_step(tmp_path, monkeypatch):
    _dumps(tmp_path)
    reads = []
    real = train_side.read_train

    def counting(f, trust_pickle=False):
        reads.append(f.display.rsplit("/", 1)[1])
        return real(f, trust_pickle=trust_pickle)

    monkeypatch.setattr(train_side, "read_train", counting)
    side = TrainSide(discover_train([str(tmp_path / "t")]), False, None)
    assert reads == []
    assert side.take(1).step == 1 and reads == ["1.pt"]
    assert side.take(7) is None and reads == ["1.pt"]
    assert side.rest() == {0: [str(tmp_path / "t" / "0.pt")], 2: [str(tmp_path / "t" / "2.pt")]}
    assert sorted(reads) == ["0.pt", "1.pt", "2.pt"]


def test_steps_option_applies_to_the_train_side(tmp_path):
    _dumps(tmp_path)
    r = audit_paths([str(tmp_path / "r" / "1.pt")], [str(tmp_path / "t")], AuditOptions(steps="1"))
    assert [s["step"] for s in r["steps"]] == [1] and r["divergences"] == []


def test_per_rank_files_of_one_step(tmp_path):
    samples = T.rollout_samples(3)
    T.write_rollout(tmp_path / "r", samples, 3, "jsonl")
    T.write_train(tmp_path / "t", samples, 3, n=2, rbs=3, dp=2, per_rank=True)
    side = TrainSide(discover_train([str(tmp_path / "t")]), False, None)
    td = side.take(3)
    assert td.positions.tolist() == list(range(6)) and " + " in td.display
    with pytest.raises(InvalidInputError, match="rollout_position: 0 is also in"):
        TrainSide(discover_train([str(tmp_path / "t" / "3_0.pt"), str(tmp_path / "t" / "3_0.pt")]), False, None).take(3)


def test_one_folder_for_both_sides(tmp_path):
    """`audit DIR --train DIR` on slime's --dump-details layout: each side takes its own dumps."""
    rollout, train = T.write_run(tmp_path / "run", steps=(0, 1), fmt="pt")
    r = audit_paths([str(tmp_path / "run")], [str(tmp_path / "run")])
    assert r["divergences"] == [] and r["summary"]["paired_steps"] == 2
    notes = r["summary"]["notes"]
    assert any("train_data" in n and "skipped" in n for n in notes)  # the rollout side skips train dumps
    assert sum("not a train dump: skipped on the train side" in n for n in notes) == 2
    # a rollout dump named as a train input is an error
    with pytest.raises(InvalidInputError, match="format_version: missing"):
        audit_paths([str(rollout)], [str(rollout / "0.pt")])


def test_another_frameworks_train_reader_plugs_in(tmp_path, monkeypatch):
    """A train reader named in a format's descriptor that returns a payload shaped like slime's."""
    import dataclasses

    from rollout_cli.inputs import registry

    jsonl = dataclasses.replace(registry.FORMATS["jsonl"], train_reader="train_dumps:read_train")
    monkeypatch.setitem(registry.FORMATS, "jsonl", jsonl)
    samples = T.rollout_samples(3)
    T.write_rollout(tmp_path / "r", samples, 3, "parquet")
    (pt,) = T.write_train(tmp_path / "pt", samples, 3, n=2, rbs=3, dp=2)
    T.write_train_jsonl(tmp_path / "other" / "step3.jsonl", pt)
    r = audit_paths([str(tmp_path / "r")], [str(tmp_path / "other")])
    assert r["divergences"] == [] and r["steps"][0]["mismatch"]["tokens"] == 18


NEMO = Path(__file__).resolve().parents[2] / "sample_data" / "nemo_rl"


def test_nemo_rl_step_logs_carry_both_sides():
    """NeMo-RL's train logs as both inputs: no divergence, and the mismatch is its trainer's
    prev_logprobs against generation_logprobs over the trained tokens."""
    import numpy as np

    from rollout_cli.inputs.nemo_rl import reader as nemo_rl

    r = audit_paths([str(NEMO)], [str(NEMO)])
    assert r["divergences"] == [] and [s["step"] for s in r["steps"]] == [1, 2]
    assert any("val_data_step2.jsonl" in n for n in r["summary"]["notes"])
    for st in r["steps"]:
        (path,) = (NEMO / "exp_001").glob(f"train_data_step{st['step']}.jsonl")
        td = nemo_rl.read_train(discover_train([str(path)])[0])
        d = np.concatenate([s["log_probs"][s["loss_masks"] != 0] - s["rollout_log_probs"][s["loss_masks"] != 0]
                            for s in td.samples])
        assert st["mismatch"]["tokens"] == len(d)
        assert st["mismatch"]["mean_abs_diff"] == pytest.approx(np.abs(d).mean())
        assert st["mismatch"]["k1"] == pytest.approx(np.mean(-d))


def test_nemo_rl_fault_is_found(tmp_path):
    import orjson

    src = NEMO / "exp_001" / "train_data_step1.jsonl"
    lines = src.read_bytes().splitlines()
    rec = orjson.loads(lines[2])
    rec["token_ids"][0][1] += 1
    lines[2] = orjson.dumps(rec)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "train_data_step1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    r = audit_paths([str(src)], [str(tmp_path / "t")])
    assert [(d["step"], d["rollout_position"], d["field"], d["index"]) for d in r["divergences"]] == [(1, 2, "tokens", 1)]


def test_multimodal_tensors_compared_by_digest(tmp_path):
    """Each sample's multimodal tensors, where both dumps hold them: equal ones pass (bfloat16
    read widened on the train side included), a changed pixel is a divergence naming the key."""
    import torch

    samples = T.rollout_samples(3)
    for k, s in enumerate(samples):
        s["multimodal_train_inputs"] = {"pixel_values": torch.randn(4, 6).to(torch.bfloat16),
                                        "image_grid_thw": torch.tensor([[1, 2, 2]])}

    def same(p):
        for s in p["samples"]:
            s["multimodal_train_inputs"] = {k: v.clone() for k, v in samples[s["rollout_position"]]["multimodal_train_inputs"].items()}

    def changed(p):
        same(p)
        p["samples"][2]["multimodal_train_inputs"]["pixel_values"][0, 0] += 1

    T.write_rollout(tmp_path / "r", samples, 3, "pt")
    T.write_train(tmp_path / "t", samples, 3, n=2, rbs=3, edit=same)
    r = audit_paths([str(tmp_path / "r")], [str(tmp_path / "t")])
    assert r["divergences"] == []
    T.write_train(tmp_path / "t2", samples, 3, n=2, rbs=3, edit=changed)
    r = audit_paths([str(tmp_path / "r")], [str(tmp_path / "t2")])
    [d] = r["divergences"]
    assert d["field"] == "multimodal_train_inputs" and d["rollout_position"] == 2
    assert list(d["expected"]) == ["pixel_values"] and d["expected"]["pixel_values"].startswith("bfloat16[4, 6] ")
    assert d["expected"] != d["got"]
