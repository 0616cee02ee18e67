"""A vision-language run's report: each drill-down sample's images embedded once per distinct
image, lossless (the PNG decodes to the original pixels), as thumbnails linking to the full
image; the images and patches per step plotted (in Chromium, when the page opens)."""
from __future__ import annotations

import base64
import io
import json

import pytest
import torch

from cdp_browser import Browser, find_browser
from conftest import SAMPLE_DATA
from rollout_cli.reporting import build_report, read_data

Image = pytest.importorskip("PIL.Image")


def _run(root):
    ims = [Image.new("RGB", (7, 5), (10 * k, 20, 30)) for k in range(3)]
    ims.append(Image.new("P", (4, 4)))
    ims[3].putpalette([(v * 3) % 256 for v in range(768)])
    (root / "rollout_data").mkdir(parents=True)
    samples = [{"tokens": [1, 2, 3, 4], "response_length": 2, "reward": float(i % 2), "status": "completed",
                "index": i, "group_index": i // 2, "multimodal_inputs": {"images": [ims[i % 2], ims[2 + i % 2]]},
                "multimodal_train_inputs": {"pixel_values": torch.zeros(8, 4, dtype=torch.bfloat16),
                                            "image_grid_thw": torch.tensor([[1, 2, 4]])}} for i in range(4)]
    torch.save({"rollout_id": 1, "samples": samples}, str(root / "rollout_data" / "1.pt"))
    return ims


def test_each_distinct_image_once_lossless(tmp_path):
    ims = _run(tmp_path / "in")
    out = tmp_path / "r.html"
    build_report([str(tmp_path / "in")], str(out))
    data = read_data(str(out))["splits"]["train"]
    table = data["images"]
    assert len(table) == 4  # 8 image slots over 4 samples, 4 distinct images
    shown = [smp for r in data["details"].values() for smp in r["samples"]]
    assert shown and all(len(smp["images"]) == 2 and smp["patches"] == 8 for smp in shown)
    text = out.read_text()
    for key, uri in table.items():
        assert text.count(uri) == 1
    got = {Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))).tobytes() for u in table.values()}
    assert got == {im.tobytes() for im in ims}
    per = data["inspect"]["summary"]["per_step"]
    assert [(p["images"], p["patches"]) for p in per] == [(8, 32)]


def test_the_page_plots_images_and_patches(tmp_path):
    if find_browser() is None:
        pytest.fail("no Chromium on PATH: apt-get install chromium (the browser test is required, not optional)")
    out = tmp_path / "vlm.html"
    build_report([str(SAMPLE_DATA / "vlm")], str(out))
    with Browser() as b:
        b.open(out)
        b.settle(0.3)
        assert b.eval("document.body.dataset.ready") == "1" and b.errors() == []
        n = json.loads(b.eval("JSON.stringify(document.querySelectorAll('#plot-media g.trace').length)"))
        shown = b.eval("document.getElementById('plot-media').style.display")
        assert n == 2 and shown == ""
