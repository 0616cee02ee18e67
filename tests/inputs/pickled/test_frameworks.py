"""SkyRL's, verl's and ROLL's batch files read as plain data by the restricted unpickler
(rollout_cli.inputs.pickled.frameworks), compared with what the frameworks' own way back
(``pickle.load`` with stand-in classes, ``torch.load`` of the embedded TensorDict) gives."""
from __future__ import annotations

import io
import json
import pickle
import pickletools

import numpy as np
import pytest
import torch
from pickled_dumps import load_with_standins, write_roll, write_skyrl, write_verl, writers

from rollout_cli.inputs.pickled import (BytesIOData, PickleFormatError, PlainData, TensorDictData, UnsafePickleError,
                                        load_pickle, loads_pickle)

B, S, R = 4, 7, 3


def _globals(path) -> set[str]:
    """Every global a pickle file names (GLOBAL and STACK_GLOBAL, memo followed)."""
    raw = open(path, "rb").read()
    memo, stack, out = {}, [], set()
    for op, arg, _ in pickletools.genops(raw):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            stack.append(arg)
        elif op.name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else None
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo.get(arg))
        elif op.name == "STACK_GLOBAL":
            out.add(f"{stack[-2]}.{stack[-1]}")
            stack.append(None)
        elif op.name == "GLOBAL":
            out.add(arg.replace(" ", "."))
        else:
            stack.append(None)
    return out


def _skyrl_batch():
    rng = np.random.default_rng(0)
    return {
        "sequences": rng.integers(0, 1000, (B, S)),
        "attention_mask": np.ones((B, S), np.int64),
        "response_mask": np.ones((B, R), np.int64),
        "loss_mask": np.ones((B, R), np.float32),
        "rollout_logprobs": None,
        "action_log_probs": rng.standard_normal((B, R)).astype(np.float32),
        "advantages": rng.standard_normal((B, R)).astype(np.float32),
        "rollout_expert_indices": rng.integers(0, 8, (B, S, 2, 2)).astype(np.int32),
        "pixel_values": [np.full((i + 1, 3), i, np.float32) for i in range(B)],
    }


def test_skyrl_training_input(tmp_path):
    batch = _skyrl_batch()
    meta = {"policy_prompt_boundaries": [(0, 2), (2, 4)], "pad_size": 0, "response_length": R, "avg_response_length": 3.0}
    path = write_skyrl(tmp_path, 7, batch, meta, bf16=["advantages"])
    assert path == tmp_path / "dumped_data" / "global_step_7_training_input.pkl"
    assert _globals(path) == {"skyrl.backends.skyrl_train.training_batch._rebuild_tensor_batch",
                              "skyrl.backends.skyrl_train.training_batch.TrainingInputBatch", "torch.device"}
    out = load_pickle(path)
    assert isinstance(out, PlainData) and out.class_name == "skyrl.backends.skyrl_train.training_batch.TrainingInputBatch"
    assert set(out) == {"batch_dict", "batch_size", "device", "metadata"}
    assert out["batch_size"] == B and out["device"] == "cpu" and out["metadata"] == meta
    got = out["batch_dict"]
    assert got["rollout_logprobs"] is None
    for key in ("sequences", "attention_mask", "loss_mask", "action_log_probs", "rollout_expert_indices"):
        assert got[key].dtype == batch[key].dtype and got[key].shape == batch[key].shape, key
        np.testing.assert_array_equal(got[key], batch[key])
    # bf16 comes back exactly as torch's bf16 -> float32 widening gives it
    expect = torch.from_numpy(batch["advantages"]).to(torch.bfloat16).float().numpy()
    assert got["advantages"].dtype == np.float32
    np.testing.assert_array_equal(got["advantages"], expect)
    assert isinstance(got["pixel_values"], list) and [a.shape for a in got["pixel_values"]] == [(i + 1, 3) for i in range(B)]
    base = load_with_standins(path)  # the framework's own way back agrees
    for key in ("sequences", "rollout_expert_indices"):
        np.testing.assert_array_equal(base[key].numpy(), got[key])


def test_skyrl_refuses_what_its_writer_never_writes(tmp_path):
    path = write_skyrl(tmp_path, 1, {"sequences": np.zeros((2, 3), np.int64)})
    raw = open(path, "rb").read()
    cases = [
        raw.replace(b"int64", b"objec"),  # a dtype that is not a plain number type (same length)
        raw.replace(b"\x8c\x05numpy", b"\x8c\x05nump_"),  # an unknown format
    ]
    for i, bad in enumerate(cases):
        with pytest.raises(PickleFormatError):
            loads_pickle(bad, f"case {i}")
    # BUILD on the class directly (not through _rebuild_tensor_batch) is refused
    head = b"\x80\x04\x8c)skyrl.backends.skyrl_train.training_batch\x8c\x12TrainingInputBatch\x93)\x81}b."
    with pytest.raises(PickleFormatError, match="_rebuild_tensor_batch"):
        loads_pickle(head, "direct")


def _verl_args():
    rng = np.random.default_rng(1)
    batch = {"prompts": rng.integers(0, 100, (B, 5)), "responses": rng.integers(0, 100, (B, R)),
             "response_mask": np.ones((B, R), np.int64), "rollout_log_probs": rng.standard_normal((B, R)).astype(np.float32),
             "rm_scores": np.zeros((B, R), np.float32)}
    non_tensor = {"data_source": ["gsm8k"] * B, "reward_model": [{"ground_truth": str(i)} for i in range(B)],
                  "raw_prompt": [[{"role": "user", "content": f"q{i}"}] for i in range(B)], "index": np.arange(B)}
    return batch, non_tensor, {"global_steps": 2, "temperature": 1.0}


def test_verl_gen_batch(tmp_path):
    batch, non_tensor, meta = _verl_args()
    path = write_verl(tmp_path, 3, batch, non_tensor, meta, gbs=2, n=2, prompt_length=5, response_length=R)
    assert path.parent.as_posix().endswith("default_experiment_name_default_project_name/GBS2_N2_in5_out3/3")
    assert json.loads((path.parent / "meta.json").read_text()) == {"global_steps": 3}
    assert _globals(path) == {"verl.protocol.DataProto", "numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"}
    out = load_pickle(path)
    assert out.class_name == "verl.protocol.DataProto" and set(out) == {"batch", "non_tensor_batch", "meta_info"}
    td = out["batch"]
    assert isinstance(td, TensorDictData) and td.batch_size == (B,) and set(td) == set(batch)
    for key, value in batch.items():
        assert td[key].dtype == value.dtype
        np.testing.assert_array_equal(td[key], value)
    # consolidated: every leaf a view of the one storage, no copy
    assert len({id(_root(a)) for a in td.values()}) == 1
    nt = out["non_tensor_batch"]
    assert nt["data_source"].dtype == object and nt["data_source"].tolist() == ["gsm8k"] * B
    assert nt["reward_model"][2] == {"ground_truth": "2"} and nt["raw_prompt"][1] == [{"role": "user", "content": "q1"}]
    assert nt["index"].dtype == np.int64 and nt["index"].tolist() == list(range(B))
    assert out["meta_info"] == meta
    base = load_with_standins(path)
    for key in batch:
        np.testing.assert_array_equal(base.batch[key].numpy(), td[key])


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def test_roll_step_pickle(tmp_path):
    rng = np.random.default_rng(2)
    batch = {"input_ids": rng.integers(0, 100, (B, S)), "attention_mask": np.ones((B, S), np.int64),
             "response_mask": np.ones((B, S), np.int64), "infer_logprobs": rng.standard_normal((B, S)).astype(np.float32),
             "scores": rng.standard_normal((B, S)).astype(np.float32)}
    nested = [np.array([np.array([1, 2]), np.array(["a"], dtype=object)], dtype=object) for _ in range(B)]
    non_tensor = {"traj_group_id": ["g0", "g0", "g1", "g1"], "traj_id": ["t0", "t1", "t2", "t3"],
                  "messages": nested, "env_ids": np.arange(B, dtype=np.int32)}
    path = write_roll(tmp_path, 12, batch, non_tensor, {"global_step": 12}, mode="val")
    assert path == tmp_path / "val" / "step_000012.pkl"
    names = _globals(path)
    assert {"roll.distributed.scheduler.protocol.DataProto", "_io.BytesIO", "numpy.core.multiarray._reconstruct",
            "numpy.core.numeric._frombuffer"} <= names and not any(n.startswith("numpy._core") for n in names)
    out = load_pickle(path)
    assert out.class_name == "roll.distributed.scheduler.protocol.DataProto"
    td = out["batch"]
    assert isinstance(td, TensorDictData) and td.batch_size == (B,)
    for key, value in batch.items():
        np.testing.assert_array_equal(td[key], value)
    nt = out["non_tensor_batch"]
    assert nt["traj_group_id"].tolist() == ["g0", "g0", "g1", "g1"]
    inner = nt["messages"][3]
    assert inner.dtype == object and inner[0].tolist() == [1, 2] and inner[1].dtype == object and inner[1].tolist() == ["a"]
    assert nt["env_ids"].dtype == np.int32 and nt["env_ids"].tolist() == list(range(B))
    assert len({id(_root(a)) for a in td.values()}) == len(batch)  # not consolidated: a storage per key
    base = load_with_standins(path)
    np.testing.assert_array_equal(base._batch["input_ids"].numpy(), td["input_ids"])


def test_roll_state_is_checked(tmp_path):
    """io.BytesIO takes only its own state; a ROLL DataProto with a remote batch, or without its
    BytesIO, is refused."""
    bio = b"\x80\x04\x8c\x03_io\x8c\x07BytesIO\x93)\x81"
    ok = loads_pickle(bio + b"C\x03abcK\x00N\x87b.", "bytesio")
    assert isinstance(ok, BytesIOData) and ok.data == b"abc"
    for bad in (b"K\x01b.", b"C\x03abcK\x00N\x87bC\x03abcK\x00N\x87b.", b"X\x01\x00\x00\x00aK\x00N\x87b."):
        with pytest.raises(PickleFormatError, match="BytesIO"):
            loads_pickle(bio + bad, "bytesio")
    proto = writers.RollDataProto(batch=None, non_tensor_batch={}, meta_info={})
    proto._remote_batch = {"keys": ["x"]}
    with writers.standins():
        raw = pickle.dumps(proto, protocol=5)
    with pytest.raises(PickleFormatError, match="ROLL DataProto"):
        loads_pickle(raw, "roll")
    head = b"\x80\x04\x8c#roll.distributed.scheduler.protocol\x8c\tDataProto\x93)\x81"
    with pytest.raises(PickleFormatError, match="ROLL DataProto"):
        loads_pickle(head + b"(C\x00}N}tb.", "roll")  # bytes where its BytesIO belongs


def test_embedded_torch_bytes_are_restricted_too(tmp_path):
    """A verl file whose embedded torch.save bytes name a global off the list is refused, and
    the error names the outer file."""
    class Evil:
        def __reduce__(self):
            import os

            return (os.system, ("true",))

    buf = io.BytesIO()
    torch.save({"x": Evil()}, buf)
    state = (buf.getvalue(), {}, {})
    raw = (b"\x80\x04\x8c\rverl.protocol\x8c\tDataProto\x93)\x81" + pickle.dumps(state, protocol=4)[2:-1] + b"b.")
    path = tmp_path / "gen_batch.dp"
    path.write_bytes(raw)
    with pytest.raises(UnsafePickleError) as ei:
        load_pickle(path)
    assert ei.value.global_name in ("posix.system", "os.system") and str(path) in ei.value.path


def _verl(state: tuple) -> bytes:
    return b"\x80\x04\x8c\rverl.protocol\x8c\tDataProto\x93)\x81" + pickle.dumps(state, protocol=4)[2:-1] + b"b."


def test_verl_state_is_checked():
    """verl's DataProto takes only (torch.save bytes or None, a dict of arrays, a dict)."""
    ok = loads_pickle(_verl((None, {"a": np.arange(2)}, {"k": 1})), "ok")
    assert ok == {"batch": None, "non_tensor_batch": {"a": ok["non_tensor_batch"]["a"]}, "meta_info": {"k": 1}}
    for i, state in enumerate([
        (None, {}),  # two items
        (None, {}, {}, None),  # ROLL's four
        ("bytes?", {}, {}),  # not bytes
        (None, {"a": [1, 2]}, {}),  # a list, not an array
        (None, [], {}),
        (None, {}, []),
    ]):
        with pytest.raises(PickleFormatError, match="verl DataProto|non_tensor_batch|meta_info"):
            loads_pickle(_verl(state), f"case {i}")
    with pytest.raises(PickleFormatError, match="twice"):  # BUILD twice
        loads_pickle(_verl((None, {}, {}))[:-1] + pickle.dumps((None, {}, {}), protocol=4)[2:-1] + b"b.", "twice")


def test_skyrl_rebuild_takes_only_its_classes_and_state():
    head = b"\x80\x04\x8c)skyrl.backends.skyrl_train.training_batch\x8c\x15_rebuild_tensor_batch\x93"
    state = {"batch_dict": {}, "batch_size": None, "device": None, "metadata": None}
    ok = loads_pickle(head + b"\x8c)skyrl.backends.skyrl_train.training_batch\x8c\x13TrainingOutputBatch\x93"
                      + pickle.dumps(state, 4)[2:-1] + b"\x86R.", "ok")
    assert ok.class_name.endswith("TrainingOutputBatch") and ok == state
    for i, (cls, st) in enumerate([
        (b"\x8c\rverl.protocol\x8c\tDataProto\x93", state),  # another plain-data class
        (b"\x8c)skyrl.backends.skyrl_train.training_batch\x8c\x0bTensorBatch\x93", {**state, "extra": 1}),
        (b"\x8c)skyrl.backends.skyrl_train.training_batch\x8c\x0bTensorBatch\x93", {**state, "device": 0}),
        (b"\x8c)skyrl.backends.skyrl_train.training_batch\x8c\x0bTensorBatch\x93", {**state, "batch_dict": {"x": 1}}),
    ]):
        with pytest.raises(PickleFormatError):
            loads_pickle(head + cls + pickle.dumps(st, 4)[2:-1] + b"\x86R.", f"case {i}")
