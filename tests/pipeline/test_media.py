"""Raw images kept: PIL images of slime's .pt dumps, and the paths, data URLs and bytes of JSONL
dumps, stored as PNG in the `images` column (Hugging Face's Image layout: load_dataset gives PIL
images), written back by export as PIL images (same mode, size, pixels, palette); reconverting
the export gives the same shards; videos and what cannot be kept are a note and a count."""
from __future__ import annotations

import base64
import glob
import hashlib
import io
import json

import orjson
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from rollout_cli.cli.app import app

Image = pytest.importorskip("PIL.Image")


def _images() -> list:
    out = []
    for mode in ("RGB", "RGBA", "L", "P"):
        im = Image.new(mode, (6, 4))
        n = 1 if mode in ("L", "P") else len(mode)
        im.putdata([(i * 11) % 256 if n == 1 else tuple((i * k * 17) % 256 for k in range(1, n + 1)) for i in range(24)])
        if mode == "P":
            im.putpalette([(v * 5) % 256 for v in range(768)])
        out.append(im)
    return out


def _sample(i: int, mm) -> dict:
    return {"tokens": [1, 2, 3, 4], "response_length": 2, "reward": float(i), "status": "completed", "index": i,
            "group_index": i, "multimodal_inputs": mm}


def _invoke(*args):
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r


def _same(a, b) -> None:
    assert a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()
    assert a.getpalette() == b.getpalette()


def _digests(out) -> list[str]:
    return [hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in sorted(glob.glob(str(out / "**" / "*.parquet"), recursive=True)
                            + glob.glob(str(out / "**" / "*.arrow"), recursive=True))]


def test_pt_images_round_trip_through_the_column_load_dataset_and_export(tmp_path, monkeypatch):
    ims = _images()
    (tmp_path / "in" / "rollout_data").mkdir(parents=True)
    samples = [_sample(0, {"images": ims}), _sample(1, None), _sample(2, {"images": ims[2:]})]
    torch.save({"rollout_id": 1, "samples": samples}, str(tmp_path / "in" / "rollout_data" / "1.pt"))
    _invoke("convert", str(tmp_path / "in"), str(tmp_path / "out"))
    files = sorted(glob.glob(str(tmp_path / "out" / "data" / "**" / "*.parquet"), recursive=True))
    col = pq.read_table(files).column("images").to_pylist()
    assert [None if r is None else len(r) for r in col] == [4, None, 2]
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    got = ds[0]["images"]
    assert all(isinstance(g, Image.Image) for g in got)
    for a, b in zip(ims, got):
        _same(a, b)
    _invoke("export", str(tmp_path / "out"), str(tmp_path / "exp"), "--format", "slime-pt")
    back = torch.load(str(tmp_path / "exp" / "1.pt"), weights_only=False)["samples"]
    for a, b in zip(samples, back):
        if a["multimodal_inputs"] is None:
            assert b["multimodal_inputs"] is None
            continue
        for x, y in zip(a["multimodal_inputs"]["images"], b["multimodal_inputs"]["images"]):
            _same(x, y)
    _invoke("convert", str(tmp_path / "exp"), str(tmp_path / "out2"))
    assert _digests(tmp_path / "out2") == _digests(tmp_path / "out")


def test_jsonl_paths_data_urls_and_videos(tmp_path):
    ims = _images()
    path = tmp_path / "a.png"
    ims[0].save(path)
    buf = io.BytesIO()
    ims[1].save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    rows = [_sample(0, {"images": [str(path), url]}), _sample(1, {"images": [str(tmp_path / "missing.png")],
                                                                 "videos": ["v.mp4"]})]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    r = _invoke("convert", str(tmp_path / "in" / "1.jsonl"), str(tmp_path / "out"), "--step", "1", "--json")
    notes = json.loads(r.stdout)["notes"]
    assert any("2 image(s) or video(s) of multimodal_inputs not kept" in n for n in notes), notes
    files = sorted(glob.glob(str(tmp_path / "out" / "data" / "**" / "*.parquet"), recursive=True))
    col = pq.read_table(files).column("images").to_pylist()
    assert col[1] is None
    for a, e in zip(ims[:2], col[0]):
        _same(a, Image.open(io.BytesIO(e["bytes"])))
