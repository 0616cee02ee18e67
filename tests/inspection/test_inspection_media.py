"""A vision-language output inspected as its dump is: the raw images and processor patches per
step, and each sample's images and patches in --show, read from the shards' list structure and
the tensors' shapes."""
from __future__ import annotations

import pytest
import torch

from conftest import copts
from rollout_cli.inspection import inspect_paths, show_rollout
from rollout_cli.run.convert import convert

Image = pytest.importorskip("PIL.Image")


def _dump(root):
    ims = [Image.new("RGB", (7, 5), (10 * k, 20, 30)) for k in range(3)]
    (root / "rollout_data").mkdir(parents=True)
    samples = []
    for i in range(4):
        s = {"tokens": [1, 2, 3, 4], "response_length": 2, "reward": float(i % 2), "status": "completed",
             "index": i, "group_index": i // 2}
        if i != 2:  # a text-only sample among them
            s["multimodal_inputs"] = {"images": ims[: 1 + i % 2]}
            s["multimodal_train_inputs"] = {"pixel_values": torch.zeros(4 * (1 + i), 6, dtype=torch.bfloat16),
                                            "image_grid_thw": torch.tensor([[1, 2, 2 * (1 + i)]])}
        samples.append(s)
    torch.save({"rollout_id": 1, "samples": samples}, str(root / "rollout_data" / "1.pt"))


def test_images_and_patches_of_an_output_are_those_of_its_dump(tmp_path):
    _dump(tmp_path / "in")
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(mmap=True))
    per = {}
    for src in ("in", "out"):
        s = inspect_paths([str(tmp_path / src)])["summary"]["per_step"]
        per[src] = [(p["step"], p.get("images"), p.get("patches")) for p in s]
    assert per["out"] == per["in"] == [(1, 1 + 2 + 2, 4 + 8 + 16)]
    for rid, (images, patches) in enumerate([(1, 4), (2, 8), (0, None), (2, 16)]):
        for src in ("in", "out"):
            smp = show_rollout([str(tmp_path / src)], f"1:{rid}")["rollout"]["samples"][0]
            assert len(smp.get("images") or []) == images and smp.get("patches") == patches, (src, rid)
