"""loader/dataset.py on the output model: open_dataset takes an Output already opened (one read
of the manifest for both faces), and a broken manifest is the model's ManifestError."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from rollout_cli.output.manifest import ManifestError
from rollout_cli.output.model import open_output
from rollout_cli.loader import Dataset, PackedBatch, open_dataset
from rollout_cli.run.convert import ConvertOptions, convert

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("dataset") / "out"
    convert([os.path.join(REPO, "sample_data", "jsonl")], str(out), ConvertOptions(overwrite=True, workers=1, shards=2))
    return str(out)


def test_open_dataset_takes_an_output(sample_out):
    o = open_output(sample_out)
    ds = open_dataset(o, "eval")
    assert isinstance(ds, Dataset) and ds.output is o and ds.manifest is o.manifest
    assert ds.steps == o.step_numbers("eval") and ds.num_shards == o.num_shards("eval")
    by_path = open_dataset(sample_out, "eval")
    for step in ds.steps:
        for r in range(ds.num_shards):
            a, b = ds.load(step, r), by_path.load(step, r)
            assert isinstance(a, PackedBatch) and a.tensors().keys() == b.tensors().keys()
            assert all(torch.equal(t, b.tensors()[k]) for k, t in a.tensors().items())
            # the batch holds the rows table() reads
            t = o.table(step, r, "eval", columns=["rollout_id", "reward"])
            assert a.rollout_ids.tolist() == t.column("rollout_id").to_pylist()
            assert a.rewards.tolist() == pytest.approx(t.column("reward").to_pylist())


def test_a_broken_manifest_is_the_models_error(sample_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    m = json.loads((out / "manifest.json").read_text())
    m["steps"].append(m["steps"][0])
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="train step 1 is listed twice") as e:
        open_dataset(out)
    assert e.value.invariant == "duplicate_step"


# -- iter_batches: the torch face of output/batches.py ---------------------------------------

from torch.utils.data import DataLoader  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from rollout_cli.core.errors import UsageError  # noqa: E402
from rollout_cli.loader import BatchDataset  # noqa: E402
from rollout_cli.output.batches import Batch  # noqa: E402

SAMPLE = os.path.join(REPO, "sample_data", "jsonl")
BUDGET = 64


@pytest.fixture(scope="module")
def out4(tmp_path_factory):
    out = tmp_path_factory.mktemp("dataset4") / "out"
    convert([SAMPLE], str(out), ConvertOptions(overwrite=True, workers=1, shards=4))
    return str(out)


@pytest.fixture(scope="module")
def out_slime(tmp_path_factory):
    out = tmp_path_factory.mktemp("dataset_slime") / "out"
    convert([SAMPLE], str(out), ConvertOptions(overwrite=True, workers=1, shards=2, schedule="slime",
                                              global_batch_size=2, use_dynamic_batch_size=True, max_tokens_per_gpu=1000))
    return str(out)


def _key(b) -> tuple:
    return (b.step, b.micro_batch_index, b.rollout_positions.tolist(), b.tokens.tolist())


def test_slice_keeps_every_per_sample_field(sample_out):
    b = open_dataset(sample_out).load(1, 0)
    assert b.num_samples >= 3
    s = b.slice(1, 3)
    for name in ("group_mask_sums", "group_rollouts", "rollout_mask_sums", "rollout_positions", "rewards"):
        assert getattr(s, name).tolist() == getattr(b, name)[1:3].tolist(), name
    assert s.status == b.status[1:3]  # an extra column, sliced too


def test_rollout_positions_are_filled_on_balanced_shards(sample_out):
    o = open_output(sample_out)
    b = open_dataset(o).load(1, 1)
    assert b.rollout_positions is not None and not b.scheduled
    assert b.rollout_positions.tolist() == o.table(1, 1).column("rollout_position").to_pylist()


def test_iter_batches_hands_torch_or_numpy_batches(out4):
    ds = open_dataset(out4)
    t = list(ds.iter_batches(2, world_size=3, max_tokens=BUDGET))
    n = list(ds.iter_batches(2, world_size=3, max_tokens=BUDGET, backend="numpy"))
    assert all(isinstance(b, PackedBatch) and isinstance(b.tokens, torch.Tensor) for b in t)
    assert all(isinstance(b, Batch) and not isinstance(b.tokens, torch.Tensor) for b in n)
    assert [_key(b) for b in t] == [_key(b) for b in n]
    assert [_key(b) for b in n] == [_key(b) for b in open_output(out4).iter_batches(2, world_size=3, max_tokens=BUDGET)]
    with pytest.raises(UsageError, match="device must be 'cpu'"):
        ds.iter_batches(0, backend="numpy", pin_memory=True)
    with pytest.raises(UsageError, match="backend"):
        ds.iter_batches(0, backend="jax")


def test_slime_train_data_of_a_micro_batch_has_the_whole_shards_values(out4):
    ds = open_dataset(out4)
    per_sample = ("tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "rollout_ids",
                  "loss_masks", "rollout_log_probs", "total_lengths")
    for rank in range(4):
        for step in ds.steps:
            whole = ds.load(step, rank)
            want = whole.to_slime_train_data()
            by_pos = {p: i for i, p in enumerate(whole.rollout_positions.tolist())}
            got = {k: [None] * whole.num_samples for k in per_sample}
            mbs = [b for b in ds.iter_batches(rank, max_tokens=BUDGET, steps=[step])]
            assert len({b.num_micro_batches for b in mbs}) == 1
            for b in mbs:
                d = b.to_slime_train_data()
                for j, p in enumerate(b.rollout_positions.tolist()):
                    for k in per_sample:
                        if k in d:
                            got[k][by_pos[p]] = d[k][j]
                rms = d["rollout_mask_sums"].tolist()
                assert rms == whole.rollout_mask_sums[[by_pos[p] for p in b.rollout_positions.tolist()]].tolist()
            for k in per_sample:
                if k in want:
                    exp = [x.tolist() if isinstance(x, torch.Tensor) else x for x in want[k]]
                    assert [x.tolist() if isinstance(x, torch.Tensor) else x for x in got[k]] == exp, k


def test_a_slime_schedule_is_served_as_converted(out_slime):
    ds = open_dataset(out_slime)
    for rank in range(2):
        got = list(ds.iter_batches(rank))
        want = [mb for s in ds.steps for mb in ds.load(s, rank).micro_batches()]
        assert len(got) == len(want) > len(ds.steps)
        for g, w in zip(got, want):
            assert g.scheduled and _key(g)[2:] == _key(w)[2:]
            assert g.to_slime_train_data()["partition"] == w.rollout_positions.tolist()
        # under a budget (or at another world size) it is repacked: no slime micro-batch ids
        assert not any(b.scheduled for b in ds.iter_batches(rank, max_tokens=BUDGET))


def test_dataloader_workers_hand_the_stream_once_in_order(out4):
    ref = [_key(b) for b in open_dataset(out4).iter_batches(1, world_size=3, max_tokens=BUDGET)]
    ds = BatchDataset(out4, 1, world_size=3, max_tokens=BUDGET)
    assert [_key(b) for b in DataLoader(ds, batch_size=None, num_workers=2)] == ref
    assert [_key(b) for b in DataLoader(ds, batch_size=None)] == ref


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata 0.11 on torch 2.13
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(out4, workers):
    ref = [_key(b) for b in open_dataset(out4).iter_batches(0, world_size=2, max_tokens=BUDGET)]
    cut = len(ref) // 2 + 1
    dl = StatefulDataLoader(BatchDataset(out4, 0, world_size=2, max_tokens=BUDGET), batch_size=None, num_workers=workers)
    got = []
    for b in dl:
        got.append(_key(b))
        if len(got) == cut:
            state = dl.state_dict()
            break
    del dl
    dl = StatefulDataLoader(BatchDataset(out4, 0, world_size=2, max_tokens=BUDGET), batch_size=None, num_workers=workers)
    dl.load_state_dict(state)
    got += [_key(b) for b in dl]
    assert got == ref


def test_a_gathered_micro_batch_is_one_staging_buffer(out4):
    """A repartitioned micro-batch's tensors lie in one block laid out as PackedBatch's staging
    buffer: pin_memory and to(device) copy it once; a copy of it rebuilds the same batch."""
    seen = 0
    for b in open_dataset(out4).iter_batches(1, world_size=3, max_tokens=BUDGET):
        if not b.num_samples:
            continue
        assert b._staging is not None and b.buffers()[0] is not None
        assert b.buffers()[0].data_ptr() == b._staging.data_ptr()
        again = b._views_of(b._staging.clone())  # what to(device) makes of the one copied buffer
        for name, t in b.tensors().items():
            assert torch.equal(getattr(again, name), t), name
            assert getattr(again, name).data_ptr() != t.data_ptr()
        seen += 1
    assert seen
    native = next(iter(open_dataset(out4).iter_batches(1)))  # views of the shard: no block
    assert native._staging is None and len(native.buffers()) >= len(native.tensors())


def test_loading_a_text_only_output_never_imports_arrow_compute(out4):
    """An epoch over a text-only output decodes no multimodal entries and imports nothing it
    does not use: pyarrow.compute alone is 26 ms of a process's start."""
    import subprocess
    import sys

    code = ("import sys, rollout_cli\n"
            "ds = rollout_cli.open_dataset(sys.argv[1])\n"
            "n = sum(ds.load(s, r).num_samples for s in ds.steps for r in range(ds.num_shards))\n"
            "print(n, 'pyarrow.compute' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code, out4], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    n, imported = done.stdout.split()
    assert int(n) > 0 and imported == "False"
