"""The train-side dump reader: slime's `--save-debug-train-data` payload through the restricted
unpickler, checked, and one step's per-rank files merged."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
import torch

import train_dumps as T
from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.inputs.train_pt import reader as train_pt
from rollout_cli.inputs.discover import InputFile, discover_train
from rollout_cli.inputs.registry import read_train


def _inp(path: Path, fmt: str = "pt") -> InputFile:
    return InputFile(str(path), str(path), fmt, None, "train", "name")


def _dump(tmp_path: Path, dp: int = 1, per_rank: bool = False, edit=None, name: str = "td") -> list[Path]:
    return T.write_train(tmp_path / name, T.rollout_samples(4), 4, n=2, rbs=3, dp=dp, per_rank=per_rank, edit=edit)


@pytest.mark.parametrize("dp", [1, 2])
def test_reads_slime_payload_as_numpy(tmp_path, dp):
    (path,) = _dump(tmp_path, dp=dp)
    td = read_train(_inp(path))
    assert td.step == 4 and td.positions.tolist() == list(range(6))
    s = td.samples[1]
    assert s["rollout_position"] == 1 and s["data_parallel_rank"] == (1 if dp == 2 else 0)
    assert isinstance(s["tokens"], np.ndarray) and s["tokens"].dtype == np.int64
    assert s["loss_masks"].dtype == np.int32 and s["log_probs"].dtype == np.float32
    assert len(s["log_probs"]) == s["response_lengths"] == 4
    assert isinstance(s["rollout_mask_sums"], float)  # a 0-d tensor element, as a number
    assert td.raw_reward is not None and len(td.raw_reward) == 6
    assert len(td.dp_shards) == dp


def test_recognised_by_content_not_name(tmp_path):
    (path,) = _dump(tmp_path, name="anywhere")
    assert train_pt.peek_keys(str(path))["format_version"] == train_pt.FORMAT_VERSION
    # discovery takes every .pt of the folder, train_data/ included (convert skips that folder)
    T.write_train(tmp_path / "run" / "train_data", T.rollout_samples(1), 1, n=2, rbs=3)
    found = discover_train([str(tmp_path / "run")])
    assert [Path(f.path).name for f in found] == ["1.pt"] and found[0].step == 1


def test_other_format_version_names_file_and_version(tmp_path):
    (path,) = _dump(tmp_path, edit=lambda p: p.update(format_version=3))
    with pytest.raises(InvalidInputError, match=r"td/4\.pt: format_version: expected 2, got 3"):
        read_train(_inp(path))


def test_rollout_dump_given_as_train(tmp_path):
    path = T.write_rollout(tmp_path, T.rollout_samples(0), 0, "pt")
    with pytest.raises(InvalidInputError, match="format_version: missing"):
        read_train(_inp(path))


def test_samples_without_rollout_position(tmp_path):
    (path,) = _dump(tmp_path, edit=lambda p: p["samples"][2].pop("rollout_position"))
    with pytest.raises(InvalidInputError, match=r"4\.pt:sample 2: rollout_position: missing"):
        read_train(_inp(path))


def test_token_field_of_wrong_length(tmp_path):
    def cut(p):
        p["samples"][3]["log_probs"] = p["samples"][3]["log_probs"][:2]

    (path,) = _dump(tmp_path, edit=cut)
    with pytest.raises(InvalidInputError, match=r"sample 3: log_probs: expected 4 values \(response_lengths\), got 2"):
        read_train(_inp(path))


def test_truncated_file(tmp_path):
    (path,) = _dump(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidInputError, match="not a readable torch dump"):
        read_train(_inp(path))


Custom = collections.namedtuple("Custom", "x")


def test_restricted_unpickler_and_trust_pickle(tmp_path):
    (path,) = _dump(tmp_path, edit=lambda p: p.update(extra=Custom(1)))
    with pytest.raises(InvalidInputError, match="--trust-pickle"):
        read_train(_inp(path))
    assert read_train(_inp(path), trust_pickle=True).step == 4


def test_unsorted_samples_are_sorted(tmp_path):
    (path,) = _dump(tmp_path, edit=lambda p: p["samples"].reverse())
    td = read_train(_inp(path))
    assert td.positions.tolist() == list(range(6))
    assert [s["rollout_position"] for s in td.samples] == list(range(6))


def test_merge_per_rank_files(tmp_path):
    paths = _dump(tmp_path, dp=2, per_rank=True)
    assert [p.name for p in paths] == ["4_0.pt", "4_1.pt"]
    parts = [read_train(_inp(p)) for p in paths]
    assert parts[0].positions.tolist() == [0, 2, 4]
    merged = train_pt.merge(parts)
    assert merged.positions.tolist() == list(range(6))
    assert [s["data_parallel_rank"] for s in merged.samples] == [0, 1, 0, 1, 0, 1]
    with pytest.raises(InvalidInputError, match="rollout_position: 0 is also in"):
        train_pt.merge([parts[0], parts[0]])


def test_no_train_reader_for_format(tmp_path):
    with pytest.raises(UsageError, match="no train-side reader for jsonl"):
        read_train(_inp(tmp_path / "x.jsonl", "jsonl"))
    (tmp_path / "x.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="not a train-side input"):
        discover_train([str(tmp_path / "x.jsonl")])
