"""output/batch_fields.py: the numpy Batch and the torch PackedBatch take their fields from the
one table, in its order (a gathered block's layout), and docs/loader.md documents each."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from rollout_cli.output.batch_fields import ARRAY_FIELDS, FIELDS, PER_SAMPLE, BatchField, batch_dataclass
from rollout_cli.output.batches import Batch


def test_a_class_made_from_the_table_has_its_fields_then_its_own():
    @batch_dataclass("np.ndarray")
    class Made:
        _own: int = 3

    names = [f.name for f in dataclasses.fields(Made)]
    assert names == [f.name for f in FIELDS] + ["_own"]
    assert [f.name for f in dataclasses.fields(Batch)] == [f.name for f in FIELDS] + ["_block"]
    required = [f.name for f in dataclasses.fields(Made) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    assert required == [f.name for f in FIELDS if f.default == "required" and f.factory is None]
    types = {f.name: f.type for f in dataclasses.fields(Made)}
    assert types["tokens"] == "np.ndarray" and types["round_numbers"] == "np.ndarray | None"
    assert types["step_mask_sum"] == "int" and types["source_names"] == "list[str] | None"
    assert Made(**{n: np.zeros(0) for n in required}).extras == {}  # a fresh dict each


def test_the_packed_batch_has_the_same_fields():
    pytest.importorskip("torch")
    from rollout_cli.loader.batch import PackedBatch

    names = [f.name for f in dataclasses.fields(PackedBatch)]
    assert names[:len(FIELDS)] == [f.name for f in FIELDS]
    assert all("Tensor" in str(f.type) for f in dataclasses.fields(PackedBatch) if f.name in ARRAY_FIELDS)


def test_the_derived_lists():
    assert ARRAY_FIELDS[:3] == ("tokens", "cu_seqlens", "loss_mask") and "source_names" not in ARRAY_FIELDS
    assert "response_lengths" in PER_SAMPLE and "micro_batch_ids" in PER_SAMPLE and "loss_mask" not in PER_SAMPLE
    assert BatchField("x", "sample", "int64", True).annotation("T") == "T | None"


def test_every_field_is_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "loader.md").read_text()
    table = doc[doc.index("### `PackedBatch`"):doc.index("Properties and methods")]
    documented = set(re.findall(r"`(\w+)`", table))
    missing = [f.name for f in FIELDS if f.name not in documented]
    assert not missing, f"docs/loader.md's PackedBatch table lacks {missing}"
