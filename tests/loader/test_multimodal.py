"""A vision-language slime run end to end: .pt dumps with bfloat16 pixel values converted, the
tensors back exactly through the loader (per sample and slime's get_batch join for any world
size and budget), to_slime_train_data and export; reconverting the export gives the same shards."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from rollout_cli.exporting.slime_pt import export_slime_pt
from rollout_cli.loader import open_dataset
from rollout_cli.run.convert import convert

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _mm(i: int) -> dict | None:
    if i % 3 == 2:
        return None  # a sample without, between samples with
    g = torch.Generator().manual_seed(i)
    n = 4 * (i + 1)
    d = {"pixel_values": torch.randn(n, 12, generator=g).to(torch.bfloat16),
         "image_grid_thw": torch.tensor([[1, 2, 2 * (i + 1)]]), "second_per_grid_ts": [1.0]}
    if i == 4:  # a multi-turn sample: two turns' tensors joined per key
        d["pixel_values"] = torch.cat([d["pixel_values"], torch.randn(8, 12, generator=g).to(torch.bfloat16)])
        d["image_grid_thw"] = torch.cat([d["image_grid_thw"], torch.tensor([[1, 2, 4]])])
    if i == 1:
        d["pixel_values"] = d["pixel_values"].to(torch.float32)  # bf16 + f32 in one micro-batch -> f32
    return d


def _write_run(root, steps=(1, 2), n=8) -> dict:
    ref = {}
    (root / "rollout_data").mkdir(parents=True)
    for step in steps:
        samples = []
        for i in range(n):
            s = {"tokens": list(range(1, 11 + i)), "response_length": 4, "reward": float(i), "status": "completed",
                 "index": i, "group_index": i // 2, "loss_mask": [1] * 4, "multimodal_train_inputs": _mm(i)}
            if s["multimodal_train_inputs"] is not None:
                s["multimodal_train_input_id"] = f"img-{step}-{i}"
            samples.append(s)
        ref[step] = samples
        torch.save({"rollout_id": step, "samples": samples}, str(root / "rollout_data" / f"{step}.pt"))
    return ref


def _same(a: dict | None, b: dict | None) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    assert list(a) == list(b)
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            assert b[k].dtype == v.dtype and torch.equal(b[k].cpu(), v)
        else:
            assert b[k] == v


def _digests(out) -> list[str]:
    files = sorted(p for p in out.rglob("*") if p.suffix in (".parquet", ".arrow"))
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in files]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    ref = _write_run(root / "in")
    convert([str(root / "in")], str(root / "out"))
    return root, ref


def test_each_sample_comes_back_exactly_through_to_slime_train_data(run):
    root, ref = run
    ds = open_dataset(str(root / "out"))
    for step in (1, 2):
        b = ds.load(step, 0)
        got = b.to_slime_train_data()["multimodal_train_inputs"]
        pos = b.rollout_positions.tolist()
        for p, g in zip(pos, got):
            _same(ref[step][p]["multimodal_train_inputs"], g)
        assert b.extras["multimodal_train_input_id"] == [ref[step][p].get("multimodal_train_input_id") for p in pos]


@pytest.mark.parametrize("world_size, max_tokens", [(1, 10_000), (2, 30), (3, 16)])
def test_micro_batches_join_as_slimes_get_batch(run, world_size, max_tokens):
    root, ref = run
    ds = open_dataset(str(root / "out"))
    seen = 0
    for rank in range(world_size):
        for b in ds.iter_batches(rank, world_size=world_size, max_tokens=max_tokens):
            per = [ref[b.step][p]["multimodal_train_inputs"] for p in b.rollout_positions.tolist()]
            want = {}
            for d in per:  # slime's get_batch: per key torch.cat along dim 0, None skipped
                for k, v in (d or {}).items():
                    if isinstance(v, torch.Tensor):
                        want[k] = v if k not in want else torch.cat([want[k], v], dim=0)
            got = b.multimodal_train_inputs
            assert list(got) == list(want)
            for k in want:
                assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k])
            if not any(per):
                assert got == {}
            for p, g in zip(per, b.to_slime_train_data().get("multimodal_train_inputs", [None] * len(per))):
                _same(p, g)
            moved = b.to("cpu")
            assert all(torch.equal(moved.multimodal_train_inputs[k], got[k]) for k in got)
            seen += b.num_samples
    assert seen == 16


def test_numpy_backend_gives_arrays_with_bfloat16_widened(run):
    root, ref = run
    ds = open_dataset(str(root / "out"))
    for b in ds.iter_batches(0, world_size=1, backend="numpy"):
        pv = b.multimodal_train_inputs["pixel_values"]
        assert isinstance(pv, np.ndarray) and pv.dtype == np.float32
        want = torch.cat([ref[b.step][p]["multimodal_train_inputs"]["pixel_values"].to(torch.float32)
                          for p in b.rollout_positions.tolist() if ref[b.step][p]["multimodal_train_inputs"]])
        assert np.array_equal(pv, want.numpy())


def test_export_writes_tensors_back_and_reconverts_to_the_same_shards(run):
    root, ref = run
    export_slime_pt(str(root / "out"), str(root / "exp"))
    for step in (1, 2):
        back = torch.load(str(root / "exp" / f"{step}.pt"), weights_only=False)["samples"]
        for a, b in zip(ref[step], back):
            _same(a["multimodal_train_inputs"], b["multimodal_train_inputs"])
            assert a.get("multimodal_train_input_id") == b["multimodal_train_input_id"]
    convert([str(root / "exp")], str(root / "out2"))
    assert _digests(root / "out2") == _digests(root / "out")


def test_the_output_is_within_the_size_bound(run):
    """The whole output folder (Parquet, IPC copy, manifest) <= 2.6x the raw bytes of the run's
    multimodal tensors + 2 MB."""
    root, ref = run
    raw = sum(v.numel() * v.element_size() for samples in ref.values() for s in samples
              for v in (s["multimodal_train_inputs"] or {}).values() if isinstance(v, torch.Tensor))
    out = sum(p.stat().st_size for p in (root / "out").rglob("*") if p.is_file())
    assert out <= 2.6 * raw + (2 << 20), (out, raw)
