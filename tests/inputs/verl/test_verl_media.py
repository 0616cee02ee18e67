"""verl's raw media: `non_tensor_batch["multi_modal_data"]` (one dict per row, `{"image": [PIL
images], "video": [...]}`) and, without it, the images of the `raw_prompt` messages, read by the
restricted unpickler without --trust-pickle into the `images` column: each image back with its
mode, size and pixels; videos counted in a note; a hostile image state refused (exit 3)."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pickled_dumps import write_verl
from rollout_cli.cli.app import app
from rollout_cli.output.model import open_output

Image = pytest.importorskip("PIL.Image")
runner = CliRunner()
P, R, N = 6, 4, 2


def _batch(rows: int):
    prompts = np.zeros((rows, P), np.int64)
    prompts[:, P - 3:] = [5, 6, 7]
    am = np.concatenate([np.zeros((rows, P), np.int64), np.ones((rows, R), np.int64)], axis=1)
    am[:, P - 3:P] = 1
    return {"prompts": prompts, "responses": np.tile(np.arange(10, 10 + R, dtype=np.int64), (rows, 1)),
            "attention_mask": am, "response_mask": np.ones((rows, R), np.int64)}


def _image(mode: str, size: tuple[int, int], seed: int):
    im = Image.new(mode, size)
    bands = len(im.getbands())
    n = size[0] * size[1]
    im.putdata([(i * 7 + seed) % 256 if bands == 1 else tuple((i * k * 13 + seed) % 256 for k in range(1, bands + 1))
                for i in range(n)])
    if mode == "P":
        im.putpalette([(v * 5 + seed) % 256 for v in range(768)])
    return im


def _same(want, got) -> None:
    assert (got.mode, got.size) == (want.mode, want.size)
    assert got.tobytes() == want.tobytes()
    if want.mode == "P":
        assert got.getpalette() == want.getpalette()


def _images_by_row(out) -> list:
    o = open_output(str(out))
    rows = []
    for table in o.tables(o.step_numbers()[0]):
        rows += list(zip(table.column("rollout_id").to_pylist(), table.column("images").to_pylist()))
    return [None if v is None else [Image.open(io.BytesIO(e["bytes"])) for e in v] for _, v in sorted(rows)]


def _convert(dump, out, *extra):
    return runner.invoke(app, ["convert", str(dump), str(out), "--workers", "1", "--json", *extra])


def test_multi_modal_data_images_come_back_exactly_without_a_flag(tmp_path):
    data = [{"image": [_image("RGB", (5, 3), 1), _image("L", (4, 6), 2)]},
            None,
            {"image": [_image("P", (3, 3), 3)], "video": [np.zeros((2, 4, 4, 3), np.uint8)]},
            {"images": [_image("RGBA", (2, 7), 4)]}]
    write_verl(tmp_path / "dump", 3, _batch(4), {"multi_modal_data": data}, gbs=2, n=N,
               prompt_length=P, response_length=R)
    r = _convert(tmp_path / "dump", tmp_path / "out")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any("1 image(s) or video(s) of multimodal_inputs not kept" in n for n in notes), notes
    got = _images_by_row(tmp_path / "out")
    assert got[1] is None
    for want, back in zip(data, got):
        if want is None:
            continue
        ims = want.get("image") or want.get("images")
        assert len(back) == len(ims)
        for a, b in zip(ims, back):
            _same(a, b)


def test_raw_prompt_images_are_used_without_multi_modal_data(tmp_path):
    ims = [_image("RGB", (6, 2), 5), _image("L", (3, 5), 6), _image("P", (4, 4), 7)]
    path = tmp_path / "on_disk.png"
    ims[1].save(path)
    encoded = io.BytesIO()
    ims[2].save(encoded, "PNG")

    def msgs(items):
        return [{"role": "user", "content": [*items, {"type": "text", "text": "What is shown?"}]}]

    raw = [msgs([{"type": "image", "image": ims[0]}, {"type": "image", "image": str(path)}]),
           msgs([]),
           [{"role": "user", "content": "plain text"}],
           msgs([{"type": "image", "image": ims[0]}, {"type": "image", "bytes": encoded.getvalue(), "path": None},
                 {"type": "video", "video": ["f1.jpg", "f2.jpg"]}])]
    write_verl(tmp_path / "dump", 1, _batch(4), {"raw_prompt": raw}, gbs=2, n=N, prompt_length=P, response_length=R)
    r = _convert(tmp_path / "dump", tmp_path / "out")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any("1 image(s) or video(s) of multimodal_inputs not kept" in n for n in notes), notes
    got = _images_by_row(tmp_path / "out")
    assert got[1] is None and got[2] is None
    assert len(got[0]) == 2 and len(got[3]) == 2
    for a, b in zip([ims[0], ims[1], ims[0], ims[2]], got[0] + got[3]):
        _same(a, b)


def test_an_entry_that_is_not_a_dict_is_that_row_s_problem(tmp_path):
    data = [{"image": [_image("RGB", (2, 2), 0)]}, "pixels", None, None]
    write_verl(tmp_path / "dump", 3, _batch(4), {"multi_modal_data": data}, gbs=2, n=N,
               prompt_length=P, response_length=R)
    r = runner.invoke(app, ["convert", str(tmp_path / "dump"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3
    assert "gen_batch.dp:row 1: multi_modal_data: expected a dict of media lists (image, video) or None, got str" in r.output


def test_a_hostile_image_state_exits_3(tmp_path, monkeypatch):
    im = _image("RGB", (4, 4), 0)
    crafted = [{}, "RGB", (4000, 4000), None, im.tobytes()]
    with monkeypatch.context() as m:
        m.setattr(Image.Image, "__getstate__", lambda self: crafted)
        write_verl(tmp_path / "dump", 3, _batch(2), {"multi_modal_data": [{"image": [im]}, None]}, gbs=2, n=N,
                   prompt_length=P, response_length=R)
    r = runner.invoke(app, ["convert", str(tmp_path / "dump"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3
    assert "48 bytes for a 4000x4000 RGB image" in r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
