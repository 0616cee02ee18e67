"""PIL images in slime's .pt dumps read by the restricted unpickler without PIL: every mode a
processor sees (RGB, RGBA, L, P) and a file plugin's image, read in a process where importing PIL
fails; hostile image states refused (exit 3 from convert)."""
from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.inputs.pickled import PickleFormatError, loads_pickle

Image = pytest.importorskip("PIL.Image")


def _images() -> list:
    out = []
    for mode in ("RGB", "RGBA", "L", "P"):
        im = Image.new(mode, (5, 3))
        n = len(mode) if mode not in ("L", "P") else 1
        im.putdata([(i * 7) % 256 if n == 1 else tuple((i * k * 13) % 256 for k in range(1, n + 1)) for i in range(15)])
        if mode == "P":
            im.putpalette([v % 256 for v in range(768)])
        out.append(im)
    b = io.BytesIO()
    out[0].save(b, "PNG")
    b.seek(0)
    png = Image.open(b)
    png.load()
    out.append(png)
    return out


def _sample(images) -> dict:
    return {"tokens": [1, 2, 3], "response_length": 1, "reward": 1.0, "status": "completed",
            "multimodal_inputs": {"images": images}}


def test_every_mode_reads_without_pil(tmp_path):
    ims = _images()
    torch.save({"rollout_id": 1, "samples": [_sample(ims)]}, str(tmp_path / "1.pt"))
    want = [{"class": type(im).__module__ + "." + type(im).__name__, "mode": im.mode, "size": list(im.size),
             "data": im.tobytes().hex(), "palette": im.getpalette() if im.mode == "P" else None} for im in ims]
    code = textwrap.dedent(f"""
        import json, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "PIL" or name.startswith("PIL."):
                    raise ImportError("PIL is blocked here")
        sys.meta_path.insert(0, Block())
        from rollout_cli.inputs.pickled import load_torch
        ims = load_torch({str(tmp_path / '1.pt')!r})["samples"][0]["multimodal_inputs"]["images"]
        print(json.dumps([{{"class": im.class_name, "mode": im["mode"], "size": list(im["size"]),
                           "data": im["data"].hex(), "palette": im["palette"]}} for im in ims]))
        assert "PIL" not in sys.modules
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout) == want


def _state(im) -> list:
    return list(im.__getstate__())


@pytest.mark.parametrize("change, words", [
    (lambda s: s[:2] + [(5, 4)] + s[3:], "45 bytes for a 5x4 RGB image, which takes 60"),
    (lambda s: s[:2] + [(1 << 30, 1 << 30)] + s[3:], "size: expected (width, height)"),
    (lambda s: s[:1] + ["XYZ"] + s[2:], "mode: expected one of"),
    (lambda s: s[:3] + [[300, 0, 0]] + s[4:], "palette"),
    (lambda s: s[:4] + ["not bytes"] + s[5:], "data: expected the pixel bytes"),
    (lambda s: s[:3], "expected Image.__getstate__'s list"),
])
def test_a_hostile_image_state_is_refused(change, words, monkeypatch):
    im = Image.new("RGB", (5, 3))
    crafted = change(_state(im))
    monkeypatch.setattr(Image.Image, "__getstate__", lambda self: crafted)  # pickled as PIL.Image.Image
    data = pickle.dumps(im, protocol=2)
    with pytest.raises(PickleFormatError, match=words.replace("(", r"\(").replace(")", r"\)")):
        loads_pickle(data, "evil.pkl")


def test_a_hostile_image_in_a_dump_exits_3(tmp_path, monkeypatch):
    im = Image.new("RGB", (4, 4))
    crafted = [{}, "RGB", (4000, 4000), None, im.tobytes()]
    (tmp_path / "in" / "rollout_data").mkdir(parents=True)
    with monkeypatch.context() as m:
        m.setattr(Image.Image, "__getstate__", lambda self: crafted)
        torch.save({"rollout_id": 1, "samples": [_sample([im])]}, str(tmp_path / "in" / "rollout_data" / "1.pt"))
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "in"), str(tmp_path / "out")])
    assert r.exit_code == 3
    assert "48 bytes for a 4000x4000 RGB image" in r.output
