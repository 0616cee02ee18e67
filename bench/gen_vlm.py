#!/usr/bin/env python3
"""Deterministic generator of a slime vision-language run: `rollout_data/{step}.pt` dumps as
slime's debug dump writes them (`torch.save({"rollout_id": step, "samples": [...]})`), each
sample with one or more images processed as Qwen2-VL's image processor does.

Per sample: a prompt of text tokens with one image placeholder run per image (`--image-token-id`,
Qwen2-VL's 151655 by default, one placeholder per merged patch: prod(t, h, w) / merge**2),
then the response; `multimodal_train_inputs` = `{"pixel_values": [n_patches, 1176],
"image_grid_thw": [n_images, 3] int64}` (the processor's output less input_ids and
attention_mask), pixel values in `--dtype` (bfloat16 by default); `multimodal_inputs` = None
(the raw images are left out: PIL objects in the pickle need the image reader).

Images: `--processor hf` runs Hugging Face's `Qwen2VLImageProcessor` (transformers) on random
RGB images of the drawn size; `--processor synthetic` (the default, no transformers) makes the
same shapes the processor gives (patch 14, temporal patch 2, merge 2: 1176 values a patch, the
grid of an image resized to multiples of 28) from seeded noise. Patches per image are drawn
around `--patches` (multiples of 4, as the merge needs). `--text-every K` leaves every K-th
sample without images (a text-only sample in a VLM run). The same arguments give the same bytes.

    python bench/gen_vlm.py --out /tmp/vlm --steps 16 --samples 256 --patches 1000
    python bench/gen_vlm.py --out sample_data/vlm --steps 2 --samples 8 --patches 16 --processor hf
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

PATCH_VALUES = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch (Qwen2-VL)
MERGE = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the run's folder (rollout_data/ is written in it)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--samples", type=int, default=8, help="samples per step")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--patches", type=int, default=1000, help="mean patches per sample (all its images)")
    p.add_argument("--max-images", type=int, default=2, help="images per sample: 1..this")
    p.add_argument("--dtype", choices=("bfloat16", "float32", "float16"), default="bfloat16")
    p.add_argument("--processor", choices=("synthetic", "hf"), default="synthetic")
    p.add_argument("--image-token-id", type=int, default=151655)
    p.add_argument("--text-every", type=int, default=0, help="every K-th sample has no image (0: none)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _grid(rng, patches: int) -> tuple[int, int]:
    """(h, w) in patches, both even (the merge), with h*w near `patches`."""
    side = max(2, int(round(np.sqrt(max(patches, 4)) / 2)) * 2)
    h = max(2, side + 2 * int(rng.integers(-1, 2)))
    w = max(2, int(round(patches / h / 2)) * 2)
    return h, w


def _hf_processor():
    from transformers import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=4096 * 28 * 28)


def _images(rng, n_images: int, patches: int, processor, torch, dtype):
    grids, pixels = [], []
    for _ in range(n_images):
        h, w = _grid(rng, patches // n_images)
        if processor is None:
            pv = rng.standard_normal((h * w, PATCH_VALUES), dtype=np.float32)
            pixels.append(torch.from_numpy(pv))
            grids.append([1, h, w])
        else:  # the processor resizes an image of h*14 x w*14 pixels to a multiple of 28: the same grid
            img = rng.integers(0, 256, (h * 14, w * 14, 3), dtype=np.uint8)
            out = processor(images=[img], return_tensors="pt")
            pixels.append(out["pixel_values"])
            grids.append(out["image_grid_thw"][0].tolist())
    return torch.cat(pixels).to(dtype), torch.tensor(grids, dtype=torch.int64)


def make_step(args, step: int, processor, torch) -> list[dict]:
    rng = np.random.default_rng([args.seed, step])
    dtype = getattr(torch, args.dtype)
    samples = []
    for i in range(args.samples):
        g = i // args.group_size
        text_only = args.text_every and i % args.text_every == args.text_every - 1
        mm = None
        prompt = rng.integers(100, 150000, int(rng.integers(20, 60))).tolist()
        if not text_only:
            n_img = int(rng.integers(1, args.max_images + 1))
            pv, grid = _images(rng, n_img, args.patches, processor, torch, dtype)
            mm = {"pixel_values": pv, "image_grid_thw": grid}
            pads = [[args.image_token_id] * int(np.prod(t) // MERGE ** 2) for t in grid.tolist()]
            prompt = prompt[:5] + [t for run in pads for t in run] + prompt[5:]
        rl = int(rng.integers(16, 128))
        response = rng.integers(100, 150000, rl).tolist()
        samples.append({
            "group_index": step * 10_000 + g, "index": step * 10_000 + i, "rollout_id": None,
            "tokens": prompt + response, "response_length": rl, "reward": float(rng.integers(0, 2)),
            "loss_mask": [1] * rl, "rollout_log_probs": (-rng.random(rl, dtype=np.float32)).tolist(),
            "status": "completed", "metadata": {}, "multimodal_inputs": None,
            "multimodal_train_inputs": mm, "multimodal_train_input_id": None,
        })
    return samples


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    processor = _hf_processor() if args.processor == "hf" else None
    d = os.path.join(args.out, "rollout_data")
    os.makedirs(d, exist_ok=True)
    tensor_bytes = 0
    for step in range(1, args.steps + 1):
        samples = make_step(args, step, processor, torch)
        for s in samples:
            for v in (s["multimodal_train_inputs"] or {}).values():
                tensor_bytes += v.numel() * v.element_size()
        path = os.path.join(d, f"{step}.pt")
        torch.save({"rollout_id": step, "samples": samples}, path + ".tmp")
        os.replace(path + ".tmp", path)
    meta = {"steps": args.steps, "samples": args.samples, "tensor_bytes": tensor_bytes, "args": vars(args)}
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
