"""derive over a converted run (rollout_cli/derivation/run.py, rows.py, options.py): exactly the rows
the rules name, with provenance, loadable by `datasets.load_dataset(DEST)`, byte-identical on a
rerun; DEST's safety (exit 5, --overwrite only over derive's own folder, exit 3 for no output)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from derive_cases import converted_run, run_samples

import rollout_cli
from rollout_cli.core.errors import InvalidInputError, OutputExistsError, UsageError
from rollout_cli.derivation.run import FORMAT, DeriveResult

TRAIN = "data/train-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return converted_run(tmp_path_factory.mktemp("derive"))


def rows_of(dest: Path, split: str = "train") -> list[dict]:
    return pq.read_table(dest / f"data/{split}-00000-of-00001.parquet").to_pylist()


def tree(dest: Path) -> dict[str, bytes]:
    return {str(p.relative_to(dest)): p.read_bytes() for p in sorted(dest.rglob("*")) if p.is_file()}


def test_sft_best_gives_exactly_the_rows_the_rules_name(out, tmp_path):
    r = rollout_cli.derive(str(out), str(tmp_path / "sft"), as_="sft", select="best", min_reward=1)
    assert isinstance(r, DeriveResult)
    rows = rows_of(tmp_path / "sft")
    # group 0: the compact rollout 100 (two samples) ties rollout 102 and comes first; group 3: 131
    assert [(x["rollout_id"], x["sample_index"]) for x in rows] == [(100, 0), (100, 1), (131, 12)]
    first = rows[1]
    assert first["input_ids"] == [7, 8, 9, 10, 11, 1010, 1011]
    assert first["completion_mask"] == [0, 0, 0, 0, 0, 1, 1]
    assert {k: first[k] for k in ("step", "group_index", "rollout_position", "raw_reward", "weight_versions",
                                  "source_name", "token_exact")} == {
        "step": 1, "group_index": 0, "rollout_position": 1, "raw_reward": 1.0, "weight_versions": None,
        "source_name": "unknown", "token_exact": True}
    c = r.counts
    assert c["skipped"] == {"a sample is not completed": 2, "a sample has remove_sample": 1,
                            "rewards differ within a rollout": 1}
    assert c["not_selected"] == {"not the best of its group": 4, "reward below --min-reward": 2}
    assert c["rollouts"] == 12 and c["candidates"] == 8 and c["selected"] == 2
    ds = datasets.load_dataset(str(tmp_path / "sft"))
    assert list(ds) == ["train"] and ds["train"].num_rows == 3
    assert ds["train"][2]["rollout_id"] == 131


def test_dpo_gives_exactly_the_pairs_the_rules_name(out, tmp_path):
    r = rollout_cli.derive(str(out), str(tmp_path / "dpo"), as_="dpo")
    rows = rows_of(tmp_path / "dpo")
    assert [(x["group_index"], x["chosen_rollout_id"], x["rejected_rollout_id"]) for x in rows] == [
        (0, 102, 101), (3, 131, 132)]
    g0 = rows[0]
    assert g0["prompt_input_ids"] == [7, 8, 9]
    assert g0["chosen_input_ids"] == [1030, 1031] and g0["rejected_input_ids"] == [1020, 1021]
    assert g0["chosen_raw_reward"] == 1.0 and g0["rejected_raw_reward"] == 0.0
    assert g0["chosen_rollout_position"] == 3 and g0["rejected_sample_index"] == 2
    assert r.counts["groups_skipped"] == {"no pair in its group": 2}  # equal rewards; a lone candidate
    assert r.counts["not_selected"] == {"no pair in its group": 3,
                                        "several samples (pairs take rollouts of one sample)": 1}
    ds = datasets.load_dataset(str(tmp_path / "dpo"))["train"]
    assert ds.num_rows == 2 and ds.features["chosen_input_ids"].feature.dtype == "int32"


def test_a_rerun_is_byte_identical_and_json_equals_to_dict(out, tmp_path):
    a = rollout_cli.derive(str(out), str(tmp_path / "a"), as_="dpo", test_fraction=0.5)
    b = rollout_cli.derive(str(out), str(tmp_path / "b"), as_="dpo", test_fraction=0.5)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    again = rollout_cli.derive(str(out), str(tmp_path / "a"), as_="dpo", test_fraction=0.5, overwrite=True)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert a.to_dict()["files"] == again.to_dict()["files"] and a.counts == b.counts
    prov = json.loads((tmp_path / "a" / "provenance.json").read_text())
    assert prov["format"] == FORMAT and "created" not in prov
    assert prov["options"]["as"] == "dpo" and prov["counts"] == a.counts
    assert len(prov["source"]["manifest_blake3"]) == 64


def test_test_fraction_puts_whole_groups_in_one_split(out, tmp_path):
    r = rollout_cli.derive(str(out), str(tmp_path / "d"), as_="kto", min_reward=0.5, test_fraction=0.5)
    train, test = rows_of(tmp_path / "d"), rows_of(tmp_path / "d", "test")
    assert train and test
    assert not {x["group_index"] for x in train} & {x["group_index"] for x in test}
    assert r.rows == {"train": len(train), "test": len(test)}
    assert len(train) + len(test) == 9  # every sample of the 8 candidates (one has two)
    assert {x["rollout_id"]: x["label"] for x in train + test}[123] is False  # 0.2 < 0.5
    ds = datasets.load_dataset(str(tmp_path / "d"))
    assert sorted(ds) == ["test", "train"]


def test_pointwise_rm_scores_every_candidate_sample(out, tmp_path):
    rollout_cli.derive(str(out), str(tmp_path / "rm"), as_="rm", pointwise=True)
    rows = rows_of(tmp_path / "rm")
    assert sorted((x["rollout_id"], x["score"]) for x in rows) == sorted(
        [(100, 1.0), (100, 1.0), (101, 0.0), (102, 1.0), (110, 0.5), (111, 0.5), (123, 0.2), (131, 2.0), (132, -1.0)])


def test_select_all_with_a_cap_and_dedupe(tmp_path):
    samples = run_samples() + [dict(run_samples()[3], index=14, rollout_id=103)]  # repeats 102's response
    samples[-1]["tokens"] = list(samples[3]["tokens"])
    out = converted_run(tmp_path, samples=samples)
    r = rollout_cli.derive(str(out), str(tmp_path / "d"), as_="sft", select="all", dedupe=True, max_rows_per_group=1)
    rows = rows_of(tmp_path / "d")
    assert sorted({x["rollout_id"] for x in rows}) == [100, 110, 123, 131]
    assert r.counts["not_selected"]["duplicate response in its group (--dedupe)"] == 1
    assert r.counts["candidates"] == r.counts["selected"] + sum(r.counts["not_selected"].values())


def test_text_columns_from_a_keep_text_run_with_message_prompts(tmp_path):
    samples = run_samples()
    for s in samples:
        s["prompt"] = [{"role": "user", "content": f"question {s['group_index']}"}]
        s["response"] = f"answer {s['index']}"
    out = converted_run(tmp_path, keep_text=True, samples=samples)
    rollout_cli.derive(str(out), str(tmp_path / "sft"), as_="sft", min_reward=1)
    row = rows_of(tmp_path / "sft")[0]
    assert row["messages"] == [{"role": "user", "content": "question 0"}, {"role": "assistant", "content": "answer 0"}]
    rollout_cli.derive(str(out), str(tmp_path / "dpo"), as_="dpo")
    row = datasets.load_dataset(str(tmp_path / "dpo"))["train"][0]
    assert row["prompt"] == [{"role": "user", "content": "question 0"}]
    assert row["chosen"] == [{"role": "assistant", "content": "answer 3"}]
    assert row["rejected"] == [{"role": "assistant", "content": "answer 2"}]


def test_plain_text_prompts(tmp_path):
    samples = run_samples()
    for s in samples:
        s["prompt"], s["response"] = f"q{s['group_index']}", f"a{s['index']}"
    out = converted_run(tmp_path, keep_text=True, samples=samples)
    rollout_cli.derive(str(out), str(tmp_path / "kto"), as_="kto", min_reward=1)
    row = rows_of(tmp_path / "kto")[0]
    assert (row["prompt"], row["completion"], row["label"]) == ("q0", "a0", True)


def test_dest_safety(out, tmp_path):
    dest = tmp_path / "d"
    rollout_cli.derive(str(out), str(dest), as_="sft")
    before = tree(dest)
    with pytest.raises(OutputExistsError, match="--overwrite"):
        rollout_cli.derive(str(out), str(dest), as_="dpo")
    assert tree(dest) == before
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(OutputExistsError, match="not a folder derive wrote"):
        rollout_cli.derive(str(out), str(foreign), as_="sft", overwrite=True)
    assert (foreign / "notes.txt").read_text() == "keep"
    with pytest.raises(InvalidInputError, match="not a converted output"):
        rollout_cli.derive(str(foreign), str(tmp_path / "new"), as_="sft")
    assert not (tmp_path / "new").exists()
    with pytest.raises(UsageError, match="--min-reward is required"):
        rollout_cli.derive(str(out), str(tmp_path / "new"), as_="kto")
    assert not (tmp_path / "new").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no staging or lock left behind


def test_no_row_is_an_error_and_writes_nothing(out, tmp_path):
    with pytest.raises(UsageError, match="no rows to derive.*4 reward below --min-reward"):
        rollout_cli.derive(str(out), str(tmp_path / "d"), as_="sft", min_reward=100)
    assert os.listdir(tmp_path) == []


def test_a_text_dump_run_decodes_with_the_tokenizer_and_is_not_token_exact(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from conftest import SAMPLE_DATA, sample_generator

    from rollout_cli.run.convert import ConvertOptions, convert

    tok_dir = sample_generator("make_text_dumps").build_tokenizer(tmp_path / "tok")
    tok = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    out = tmp_path / "out"
    convert([str(SAMPLE_DATA / "verl_text")], str(out), ConvertOptions(tokenizer=str(tok_dir), workers=1, mmap=False))
    r = rollout_cli.derive(str(out), str(tmp_path / "d"), as_="sft", tokenizer=str(tok_dir))
    rows = rows_of(tmp_path / "d")
    assert rows and r.rows == {"train": len(rows)}
    for row in rows:
        assert row["token_exact"] is False
        p = row["completion_mask"].count(0)  # a text dump's loss mask is all ones: the zeros are the prompt
        assert row["prompt"] == tok.decode(row["input_ids"][:p], skip_special_tokens=False)
        assert row["completion"] == tok.decode(row["input_ids"][p:], skip_special_tokens=False)
    prov = json.loads((tmp_path / "d" / "provenance.json").read_text())
    assert prov["options"]["text"] == "tokenizer" and prov["source"]["tokenizer_blake3"]


def test_an_object_store_output_derives_as_the_local_one(s3, out, tmp_path):
    from conftest import copts

    from rollout_cli.run.convert import convert

    src = out.parent / "dumps" / "rollout_data" / "1.jsonl"
    convert([str(src)], "s3://bkt/derive-out", copts())
    remote = rollout_cli.derive("s3://bkt/derive-out", str(tmp_path / "remote"), as_="dpo")
    local = rollout_cli.derive(str(out), str(tmp_path / "local"), as_="dpo")
    assert tree(tmp_path / "remote" / "data") == tree(tmp_path / "local" / "data")
    assert remote.counts == local.counts


def test_the_library_name_is_the_function_however_the_package_was_imported():
    """`rollout_cli.derive` is the library function, also after its package was imported;
    neither imports torch."""
    import subprocess
    import sys

    code = ("import sys\nimport rollout_cli.derivation.rules\nfrom rollout_cli import derive, DeriveResult, DeriveOptions\n"
            "import rollout_cli\nassert callable(derive) and rollout_cli.derive is derive\n"
            "assert DeriveOptions().as_ == 'sft' and DeriveResult.__name__ == 'DeriveResult'\n"
            "assert 'torch' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_select_step_gives_the_written_rows_without_writing(out, tmp_path):
    from rollout_cli.derivation.options import DeriveOptions
    from rollout_cli.derivation.run import select_step

    o = rollout_cli.open_output(str(out))
    t = o.table(1, 0)
    rollout_cli.derive(str(out), str(tmp_path / "d"), as_="dpo")
    assert select_step(t, DeriveOptions(as_="dpo")).to_pylist() == rows_of(tmp_path / "d")


def test_a_dest_being_written_is_refused_busy(out, tmp_path):
    from rollout_cli.core.errors import OutputBusyError
    from rollout_cli.output import lock as writer_lock

    dest = tmp_path / "d"
    held = writer_lock.acquire(str(dest), command="derive", path=writer_lock.sibling_lock_path(str(dest)))
    try:
        with pytest.raises(OutputBusyError, match="being written by another process"):
            rollout_cli.derive(str(out), str(dest), as_="sft")
    finally:
        held.release()
    assert not dest.exists()
    rollout_cli.derive(str(out), str(dest), as_="sft")


def test_sft_rows_of_a_vision_language_run_carry_their_images(tmp_path):
    """An output holding images gives SFT rows an `images` column that `datasets` reads as PIL
    images, the same pixels the dump held."""
    import base64
    import io
    import json

    datasets = pytest.importorskip("datasets")
    Image = pytest.importorskip("PIL.Image")
    from rollout_cli.run.convert import convert

    from conftest import copts

    ims = [Image.new("RGB", (3, 2), (10 * i, 20, 30)) for i in range(2)]

    def url(im):
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    src = tmp_path / "dumps"
    src.mkdir()
    rows = [{"tokens": [1, 2, 3, 4], "response_length": 2, "reward": float(i), "status": "completed", "index": i,
             "group_index": 0, "multimodal_inputs": {"images": [url(ims[i])]}} for i in range(2)]
    (src / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    convert([str(src)], str(tmp_path / "out"), copts())
    rollout_cli.derive(str(tmp_path / "out"), str(tmp_path / "sft"), as_="sft")
    ds = datasets.load_dataset(str(tmp_path / "sft"), cache_dir=str(tmp_path / "hf"))["train"]
    assert ds.num_rows == 1 and ds[0]["sample_index"] == 1  # the group's best
    got = ds[0]["images"]
    assert len(got) == 1 and isinstance(got[0], Image.Image)
    assert got[0].convert("RGB").tobytes() == ims[1].tobytes()


@pytest.mark.parametrize("messages", [True, False])
def test_trl_reads_the_rows_as_its_own_formats(tmp_path, messages):
    """TRL's own dataset utilities take the derived rows as they take theirs: conversational
    exactly when the prompts are message lists, DPO pairs unpaired into KTO rows whose labels
    say which side each completion was."""
    data_utils = pytest.importorskip("trl.data_utils")
    samples = run_samples()
    for s in samples:
        s["prompt"] = [{"role": "user", "content": f"q{s['group_index']}"}] if messages else f"q{s['group_index']}"
        s["response"] = f"a{s['index']}"
    out = converted_run(tmp_path, keep_text=True, samples=samples)
    rollout_cli.derive(str(out), str(tmp_path / "sft"), as_="sft", min_reward=1)
    rollout_cli.derive(str(out), str(tmp_path / "dpo"), as_="dpo")
    rollout_cli.derive(str(out), str(tmp_path / "kto"), as_="kto", min_reward=1)
    load = lambda d: datasets.load_dataset(str(tmp_path / d), cache_dir=str(tmp_path / "hf"))["train"]  # noqa: E731
    for name in ("sft", "dpo", "kto"):
        assert all(data_utils.is_conversational(r) == messages for r in load(name))
    dpo = load("dpo")
    unpaired = data_utils.unpair_preference_dataset(dpo)
    assert unpaired.num_rows == 2 * dpo.num_rows
    assert [r["completion"] for r in unpaired if r["label"]] == list(dpo["chosen"])
    assert [r["completion"] for r in unpaired if not r["label"]] == list(dpo["rejected"])
