"""The dataset card (output/card.py): README.md at OUT's root, whose `configs` make
`datasets.load_dataset(OUT)` give the train rows as `train` and the eval rows as `validation`."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import copts, make_sample, write_jsonl
from rollout_cli.core import layout
from rollout_cli.core.errors import UsageError
from rollout_cli.output import card
from rollout_cli.run.convert import convert
from rollout_cli.verification.check import verify_output

SNAPSHOT_V5 = Path(__file__).resolve().parents[1] / "snapshots" / "schema_v5_output"


def _inputs(tmp_path, name="in", eval_step=True, k=4) -> str:
    d = tmp_path / name
    write_jsonl(d / "1.jsonl", [make_sample(index=i, group_index=i // 2) for i in range(k)])
    write_jsonl(d / "2.jsonl", [make_sample(index=10 + i, group_index=5) for i in range(3)])
    if eval_step:
        write_jsonl(d / "eval_2.jsonl", [make_sample(index=20 + i, group_index=7) for i in range(2)])
    return str(d)


def _rows(out: Path, split: str) -> int:
    m = json.loads((out / "manifest.json").read_text())
    return sum(s["rows"] for s in m["steps"] if s["split"] == split)


def _load(out: Path, tmp_path):
    datasets = pytest.importorskip("datasets")
    return datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))


@pytest.mark.parametrize("eval_step", [True, False])
def test_load_dataset_at_the_root_gives_train_and_validation(tmp_path, eval_step):
    out = tmp_path / "out"
    convert([_inputs(tmp_path, eval_step=eval_step)], str(out), copts(mmap=True, shards=2))
    ds = _load(out, tmp_path)
    assert set(ds) == ({"train", "validation"} if eval_step else {"train"})
    assert ds["train"].num_rows == _rows(out, "train") == 7
    assert sorted(set(ds["train"]["step"])) == [1, 2]
    if eval_step:
        assert ds["validation"].num_rows == _rows(out, "eval") == 2
        assert set(ds["validation"]["step"]) == {2}
    text = (out / "README.md").read_text()
    assert ("eval/**/*.parquet" in text) == eval_step and "mmap" not in text.split("---")[1]


def test_an_output_with_empty_shards_loads_at_the_root(tmp_path):
    """A step with fewer rollouts than shards has empty shards, which `datasets` cannot read: the
    card names that split's other files, and every row still loads."""
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts(mmap=True, shards=4))
    m = json.loads((out / "manifest.json").read_text())
    empty = [sh["path"] for s in m["steps"] for sh in s["shards"] if sh["rows"] == 0]
    assert empty  # the eval step's 2 rollouts over 4 shards
    ds = _load(out, tmp_path)
    assert ds["train"].num_rows == _rows(out, "train") and ds["validation"].num_rows == _rows(out, "eval") == 2
    text = (out / "README.md").read_text()
    assert not any(p in text for p in empty)


def test_card_bytes_are_deterministic_and_recorded(tmp_path):
    inputs = _inputs(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    convert([inputs], str(a), copts())
    convert([inputs], str(b), copts(workers=2))
    assert (a / "README.md").read_bytes() == (b / "README.md").read_bytes()
    m = json.loads((a / "manifest.json").read_text())
    data = (a / "README.md").read_bytes()
    assert m["card"]["path"] == layout.CARD and m["card"]["bytes"] == len(data)
    assert card.output_card(m) == data


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_verify_catches_a_changed_or_missing_card(tmp_path, damage):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    assert verify_output(str(out))["ok"]
    path = out / "README.md"
    if damage == "changed":
        path.write_bytes(path.read_bytes().replace(b"validation", b"test\x20\x20\x20\x20\x20\x20"))
        want = {("README.md", "checksum")}
    else:
        path.unlink()
        want = {("README.md", "file_present")}
    res = verify_output(str(out))
    assert not res["ok"] and {(f["file"], f["invariant"]) for f in res["failures"]} == want
    if damage == "missing":
        assert not verify_output(str(out), quick=True)["ok"]


def test_a_manifest_of_schema_6_without_its_card_is_malformed(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    m = json.loads((out / "manifest.json").read_text())
    del m["card"]
    (out / "manifest.json").write_text(json.dumps(m))
    res = verify_output(str(out))
    assert [f["invariant"] for f in res["failures"]] == ["manifest_structure"] and "card" in res["failures"][0]["detail"]


def test_overwrite_replaces_the_card(tmp_path):
    out = tmp_path / "out"
    convert([_inputs(tmp_path)], str(out), copts())
    before = (out / "README.md").read_bytes()
    convert([_inputs(tmp_path, "in2", eval_step=False, k=6)], str(out), copts(overwrite=True))
    after = (out / "README.md").read_bytes()
    assert after != before and b"validation" not in after
    assert verify_output(str(out))["ok"]
    assert _load(out, tmp_path)["train"].num_rows == _rows(out, "train") == 9


def test_resume_rewrites_the_card_for_the_steps_it_adds(tmp_path):
    out = tmp_path / "out"
    inputs = _inputs(tmp_path)
    convert([inputs], str(out), copts())
    before = (out / "README.md").read_bytes()
    write_jsonl(Path(inputs) / "3.jsonl", [make_sample(index=40 + i, group_index=40) for i in range(2)])
    convert([inputs], str(out), copts(resume=True))
    assert (out / "README.md").read_bytes() != before and b"9 train rows in 3 steps" in (out / "README.md").read_bytes()
    assert verify_output(str(out))["ok"]


def _v5(tmp_path) -> Path:
    dest = tmp_path / "v5"
    shutil.copytree(SNAPSHOT_V5, dest, ignore=shutil.ignore_patterns("README.md"))
    return dest


def test_a_schema_5_output_loads_verifies_and_is_refused_by_resume(tmp_path):
    from rollout_cli import open_dataset

    out = _v5(tmp_path)
    assert json.loads((out / "manifest.json").read_text())["schema_version"] == 5
    res = verify_output(str(out))
    assert res["ok"], res["failures"]
    assert not any("README" in n for n in res["notes"])
    ds = open_dataset(str(out))
    assert sum(ds.load(s, 0).num_samples for s in ds.steps) == _rows(out, "train")
    listing = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(UsageError, match=r"schema version 5 \(without [^)]*README.md\)"):
        convert(["sample_data/jsonl/rollout_data/3.jsonl", "sample_data/jsonl/rollout_data/eval_3.jsonl"],
                str(out), copts(resume=True, mmap=True))
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == listing
    convert(["sample_data/jsonl/rollout_data/3.jsonl", "sample_data/jsonl/rollout_data/eval_3.jsonl"],
            str(out), copts(overwrite=True, mmap=True))
    assert (out / "README.md").is_file() and verify_output(str(out))["ok"]


def test_render_declares_only_splits_with_files():
    text = card.render({"train": ["a/*.parquet", "b/*.parquet"], "validation": []}, title="t").decode()
    head = text.split("---")[1]
    assert '  - split: "train"\n    path:\n    - "a/*.parquet"\n    - "b/*.parquet"\n' in head
    assert "validation" not in head


def test_object_store_card_names_the_generation_files(s3, tmp_path):
    from conftest import s3_download

    convert([_inputs(tmp_path)], "s3://bkt/card-out", copts(mmap=True))
    m = json.loads(s3.open_input_stream("bkt/card-out/manifest.json").readall())
    text = s3.open_input_stream("bkt/card-out/README.md").readall().decode()
    assert f'"gen/{m["generation"]}/data/**/*.parquet"' in text and f'"gen/{m["generation"]}/eval/**/*.parquet"' in text
    assert verify_output("s3://bkt/card-out")["ok"]
    s3_download(s3, "bkt/card-out", tmp_path / "copy")
    ds = _load(tmp_path / "copy", tmp_path)
    assert ds["train"].num_rows == 7 and ds["validation"].num_rows == 2
