"""Tests of rollout_cli.inputs.format: a descriptor's hooks, called through it; a trait a
format lacks answers as "none"."""
from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_cli.inputs.format import Format
from rollout_cli.inputs.registry import format_of

BARE = Format(name="bare", reader="rollout_cli.inputs.jsonl.reader:read")


def test_a_bare_format_has_no_traits(tmp_path):
    p = str(tmp_path / "x.jsonl")
    assert not BARE.claims(p) and BARE.step_and_split(p) is None and BARE.skip_note(p, None, True) is None
    assert BARE.field_step(p) is None and BARE.peek_train_keys(p) is None and not BARE.is_output_shard(p)
    assert not BARE.extensions and BARE.split(None, 4) == [(0, None)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BARE.name = "other"


def test_endings_are_matched_without_case():
    from rollout_cli.inputs.registry import extension_format

    assert extension_format("/a/B.JSONL.ZST") == "jsonl" and extension_format("b.json") is None


def test_a_detector_without_skip_note_skips_nothing(tmp_path):
    f = dataclasses.replace(BARE, detector="rollout_cli.inputs.jsonl.reader")  # a module without skip_note
    assert f.skip_note(str(tmp_path / "x"), None, False) is None


def test_a_shard_of_an_output_is_told_from_an_input(tmp_path):
    plain, shard = tmp_path / "in.parquet", tmp_path / "shard.parquet"
    t = pa.table({"tokens": [[1, 2]]})
    pq.write_table(t, plain)
    pq.write_table(t.replace_schema_metadata({b"rollout_cli.schema_version": b"3"}), shard)
    fmt = format_of("parquet")
    assert not fmt.is_output_shard(str(plain)) and fmt.is_output_shard(str(shard))
    assert not format_of("pt").is_output_shard(str(shard))  # only Parquet is the output's format


def test_a_pt_train_dump_is_peeked_without_loading(tmp_path):
    import torch

    p = tmp_path / "3.pt"
    torch.save({"format_version": 2, "rollout_id": 3, "samples": []}, p)
    assert format_of("pt").peek_train_keys(str(p)) == {"format_version": 2, "rollout_id": 3}
    assert format_of("jsonl").peek_train_keys(str(p)) is None
