"""verl's vision-language rows: `non_tensor_batch["multi_modal_inputs"]` (an object array of
per-row dicts of torch tensors, pickled as torch pickles a lone tensor) read by the restricted
unpickler, without --trust-pickle, into the multimodal_train_inputs column, every tensor exact
(hostile storages inside such a pickle: tests/inputs/pickled/test_legacy.py)."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from conftest import shard_paths
from pickled_dumps import write_verl
from rollout_cli.cli.app import app
from rollout_cli.core import tensors

runner = CliRunner()
P, R, N = 6, 4, 2
IMAGE = 151655


def _batch(rows: int, pads: list[int]):
    """A verl batch of `rows` rows whose prompts hold pads[i] image placeholders."""
    prompts = np.zeros((rows, P), np.int64)
    for i, k in enumerate(pads):  # left-padded: zeros, then the image's placeholders and the text
        prompts[i, P - 3 - k:] = [IMAGE] * k + [5, 6, 7]
    responses = np.tile(np.arange(10, 10 + R, dtype=np.int64), (rows, 1))
    am = np.concatenate([np.zeros((rows, P), np.int64), np.ones((rows, R), np.int64)], axis=1)
    for i, k in enumerate(pads):
        am[i, P - 3 - k:P] = 1
    return {"prompts": prompts, "responses": responses, "attention_mask": am,
            "response_mask": np.ones((rows, R), np.int64)}


def _mm():
    g = torch.Generator().manual_seed(0)
    return [
        {"pixel_values": torch.randn(8, 12, generator=g).to(torch.bfloat16), "image_grid_thw": torch.tensor([[1, 2, 4]])},
        None,
        {"pixel_values": torch.randn(4, 12, generator=g), "image_grid_thw": torch.tensor([[1, 2, 2]]),
         "second_per_grid_ts": [0.5]},
        {"pixel_values": torch.randn(8, 12, generator=g).to(torch.float16)[::2], "image_grid_thw": torch.tensor([[1, 2, 2]])},
    ]


def test_multi_modal_inputs_convert_exactly_without_a_flag(tmp_path):
    mm = _mm()
    write_verl(tmp_path / "dump", 3, _batch(4, [2, 0, 1, 1]), {"multi_modal_inputs": mm}, gbs=2, n=N,
               prompt_length=P, response_length=R)
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(tmp_path / "dump"), str(out), "--workers", "1", "--image-token-id", str(IMAGE)])
    assert r.exit_code == 0, r.output
    col = pq.read_table(shard_paths(out)[0]).sort_by("rollout_id").column("multimodal_train_inputs")
    got = [tensors.as_torch(d, torch) for d in tensors.decode_column(col)]
    assert got[1] is None
    for want, back in zip(mm, got):
        if want is None:
            continue
        assert list(back) == list(want)
        for k, v in want.items():
            if isinstance(v, torch.Tensor):
                assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
            else:
                assert back[k] == v


def test_a_row_whose_entry_is_not_a_dict_is_that_row_s_problem(tmp_path):
    mm = _mm()
    mm[2] = "pixels"
    write_verl(tmp_path / "dump", 3, _batch(4, [2, 0, 1, 1]), {"multi_modal_inputs": mm}, gbs=2, n=N,
               prompt_length=P, response_length=R)
    r = runner.invoke(app, ["convert", str(tmp_path / "dump"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3
    assert "gen_batch.dp:row 2: multi_modal_inputs: expected a dict of tensors or None, got str" in r.output
