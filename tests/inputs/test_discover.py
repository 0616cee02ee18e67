"""Stage 1 discovery and unit planning (inputs.discover, inputs.units.plan_units): step numbers, splits, skipping, --steps."""
from __future__ import annotations

import gzip
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE_DATA, copts, make_sample, read_rows, sample_generator, write_jsonl, write_pt
from rollout_cli.inputs.units import plan_units
from rollout_cli.run.convert import convert
from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.inputs.discover import discover, input_format, parse_steps


def _samples(k=2, base=0):
    return [make_sample(index=base + i, group_index=0, reward=float(i % 2)) for i in range(k)]


def _steps(out, split="train"):
    return sorted({r["step"] for r in read_rows(out, split)})


# ------------------------------------------------------------------------------ formats


@pytest.mark.parametrize("name,fmt", [
    ("1.pt", "pt"), ("a/2.jsonl", "jsonl"), ("3.JSONL", "jsonl"), ("4.jsonl.gz", "jsonl"),
    ("5.jsonl.zst", "jsonl"), ("6.parquet", "parquet"), ("README.md", None), ("7.json", None), ("8.pt.bak", None),
])
def test_input_format(name, fmt):
    assert input_format(name) == fmt


# ------------------------------------------------------------------------------ step numbers


def test_step_from_name_last_digit_run(tmp_path):
    write_jsonl(tmp_path / "run2_rollout_17.jsonl", _samples())
    files, _, _ = discover([str(tmp_path)])
    (f,) = files
    assert (f.step, f.split, f.step_from) == (17, "train", "name")


def test_step_from_field_wins_over_name(tmp_path):
    samples = _samples()
    for s in samples:
        s["step"] = 9
    write_jsonl(tmp_path / "dump_1.jsonl", samples)
    (f,), _, _ = discover([str(tmp_path)])
    assert (f.step, f.step_from) == (9, "field")
    convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert _steps(tmp_path / "out") == [9]


def test_step_from_parquet_field(tmp_path):
    recs = _samples()
    for r in recs:
        r["step"] = 12
        r["metadata"] = "{}"
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "part.parquet")
    (f,), _, _ = discover([str(tmp_path / "part.parquet")])
    assert (f.step, f.step_from, f.format) == (12, "field", "parquet")


def test_bad_step_field_is_invalid_input(tmp_path):
    samples = _samples()
    samples[0]["step"] = "seven"
    write_jsonl(tmp_path / "3.jsonl", samples)
    with pytest.raises(InvalidInputError) as ei:
        discover([str(tmp_path)])
    assert "step" in str(ei.value)


def test_step_from_pt_payload_wins_over_name(tmp_path):
    write_pt(tmp_path / "dump_12.pt", _samples(), 7)
    convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert _steps(tmp_path / "out") == [7]


def test_pt_without_digits_uses_payload(tmp_path):
    write_pt(tmp_path / "latest.pt", _samples(), 4)
    convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert _steps(tmp_path / "out") == [4]


def test_no_step_anywhere_is_a_usage_error(tmp_path):
    write_jsonl(tmp_path / "latest.jsonl", _samples())
    with pytest.raises(UsageError) as ei:
        discover([str(tmp_path)])
    assert "latest.jsonl" in str(ei.value) and "--step" in str(ei.value)


def test_step_option_for_single_file(tmp_path):
    write_jsonl(tmp_path / "latest.jsonl", _samples())
    convert([str(tmp_path / "latest.jsonl")], str(tmp_path / "out"), copts(step=5))
    assert _steps(tmp_path / "out") == [5]


def test_step_option_needs_single_input(tmp_path):
    write_jsonl(tmp_path / "1.jsonl", _samples())
    write_jsonl(tmp_path / "2.jsonl", _samples())
    with pytest.raises(UsageError):
        discover([str(tmp_path)], 3)


def test_stdin_needs_step():
    with pytest.raises(UsageError) as ei:
        discover(["-"])
    assert "--step" in str(ei.value)


# ------------------------------------------------------------------------------ splits and skipping


def test_eval_split(tmp_path):
    write_jsonl(tmp_path / "rollout_data" / "3.jsonl", _samples())
    write_jsonl(tmp_path / "rollout_data" / "eval_3.jsonl", _samples(3))
    files, _, _ = discover([str(tmp_path)])
    assert sorted((f.split, f.step) for f in files) == [("eval", 3), ("train", 3)]
    convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert len(read_rows(tmp_path / "out", "train")) == 2
    assert len(read_rows(tmp_path / "out", "eval")) == 3
    assert (tmp_path / "out" / "eval" / "step-000003").is_dir()
    assert not list((tmp_path / "out" / "data").glob("**/*eval*"))


def test_sample_data_eval_is_its_own_split(tmp_path):
    res = convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    assert res["counts"]["steps"] == 3 and res["counts"]["eval_steps"] == 1
    assert _steps(tmp_path / "out") == [1, 2, 3]
    assert _steps(tmp_path / "out", "eval") == [3]
    assert len(read_rows(tmp_path / "out", "eval")) == 7


def test_train_data_dir_skipped_with_note(tmp_path):
    write_jsonl(tmp_path / "rollout_data" / "1.jsonl", _samples())
    write_jsonl(tmp_path / "train_data" / "1.jsonl", _samples(5))
    files, skipped, notes = discover([str(tmp_path)])
    assert [f.step for f in files] == [1]
    assert any("train_data" in n for n in notes)
    res = convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert res["counts"]["rows"] == 2
    assert any("train_data" in n for n in res["notes"])


def test_train_side_pt_dump_skipped(tmp_path):
    import torch

    write_jsonl(tmp_path / "1.jsonl", _samples())
    torch.save({"format_version": 2, "rollout_id": 2, "rank": 0, "samples": [], "dp_shards": [], "raw_reward": []},
               str(tmp_path / "2.pt"))
    res = convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert _steps(tmp_path / "out") == [1]
    assert any("format_version" in n or "train-side" in n for n in res["notes"])


def test_non_input_files_skipped(tmp_path):
    write_jsonl(tmp_path / "1.jsonl", _samples())
    (tmp_path / "README.md").write_text("hello")
    (tmp_path / "notes.txt").write_text("2.jsonl")
    files, skipped, _ = discover([str(tmp_path)])
    assert [f.step for f in files] == [1]
    assert sorted(p.rsplit("/", 1)[-1] for p in skipped) == ["README.md", "notes.txt"]


def test_explicit_non_input_file_is_a_usage_error(tmp_path):
    (tmp_path / "README.md").write_text("hello")
    with pytest.raises(UsageError):
        discover([str(tmp_path / "README.md")])


def test_missing_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        discover([str(tmp_path / "nope")])


def test_gzip_input(tmp_path):
    src = write_jsonl(tmp_path / "x" / "6.jsonl", _samples(3))
    with open(src, "rb") as f, gzip.open(tmp_path / "6.jsonl.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    convert([str(tmp_path / "6.jsonl.gz")], str(tmp_path / "out"), copts())
    assert _steps(tmp_path / "out") == [6]
    assert len(read_rows(tmp_path / "out")) == 3


# ------------------------------------------------------------------------------ duplicates and --steps


def test_duplicate_steps_error(tmp_path):
    write_jsonl(tmp_path / "a" / "1.jsonl", _samples())
    write_jsonl(tmp_path / "b" / "1.jsonl", _samples())
    with pytest.raises(InvalidInputError) as ei:
        plan_units([str(tmp_path)], copts())
    msg = str(ei.value)
    assert "a/1.jsonl" in msg and "b/1.jsonl" in msg
    assert ei.value.exit_code == 3


def test_duplicate_step_across_formats(tmp_path):
    write_jsonl(tmp_path / "2.jsonl", _samples())
    write_pt(tmp_path / "2.pt", _samples(), 2)
    with pytest.raises(InvalidInputError):
        convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_duplicate_step_from_pt_payload(tmp_path):
    # the name says nothing; the payload says step 1, which 1.jsonl already gives
    write_jsonl(tmp_path / "1.jsonl", _samples())
    write_pt(tmp_path / "latest.pt", _samples(), 1)
    with pytest.raises(InvalidInputError):
        convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_same_step_train_and_eval_is_not_a_duplicate(tmp_path):
    write_jsonl(tmp_path / "3.jsonl", _samples())
    write_jsonl(tmp_path / "eval_3.jsonl", _samples())
    units, _, _ = plan_units([str(tmp_path)], copts())
    assert [(u.input.split, u.step) for u in units] == [("train", 3), ("eval", 3)]


@pytest.mark.parametrize("spec,lo,hi", [("2:5", 2, 5), ("3:", 3, None), (":4", None, 4), ("7", 7, 7), (None, None, None)])
def test_parse_steps(spec, lo, hi):
    assert parse_steps(spec) == (lo, hi)


@pytest.mark.parametrize("spec", ["a:b", "1-3", "x", "1:2:3"])
def test_parse_steps_bad(spec):
    with pytest.raises(UsageError):
        parse_steps(spec)


@pytest.mark.parametrize("spec,expected", [("2:3", [2, 3]), ("3:", [3, 4]), (":1", [1]), ("2", [2]), (None, [1, 2, 3, 4])])
def test_steps_selection(tmp_path, spec, expected):
    for k in range(1, 5):
        write_jsonl(tmp_path / "in" / f"{k}.jsonl", _samples(base=10 * k))
    units, _, _ = plan_units([str(tmp_path / "in")], copts(steps=spec))
    assert [u.step for u in units] == expected
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(steps=spec))
    assert _steps(tmp_path / "out") == expected


def test_steps_selection_uses_pt_payload_step(tmp_path):
    # "latest.pt" holds step 5 (payload key); --steps 1:2 must not convert it
    write_jsonl(tmp_path / "1.jsonl", _samples())
    write_pt(tmp_path / "latest.pt", _samples(), 5)
    convert([str(tmp_path)], str(tmp_path / "out"), copts(steps="1:2"))
    assert _steps(tmp_path / "out") == [1]


def test_steps_selection_keeps_pt_whose_payload_step_matches(tmp_path):
    # "dump_12.pt" holds step 7 (the payload wins over the name): --steps 7 selects it
    write_pt(tmp_path / "dump_12.pt", _samples(), 7)
    write_jsonl(tmp_path / "3.jsonl", _samples())
    convert([str(tmp_path)], str(tmp_path / "out"), copts(steps="7"))
    assert _steps(tmp_path / "out") == [7]


def test_units_ordered_train_then_eval_by_step(tmp_path):
    for name in ["10.jsonl", "2.jsonl", "eval_1.jsonl", "eval_10.jsonl", "1.jsonl"]:
        write_jsonl(tmp_path / name, _samples())
    units, _, _ = plan_units([str(tmp_path)], copts())
    assert [(u.input.split, u.step) for u in units] == [("train", 1), ("train", 2), ("train", 10), ("eval", 1), ("eval", 10)]


def test_output_inside_input_folder_is_not_read_back(tmp_path):
    """`convert dumps/ dumps/converted` twice (--overwrite): the first run's shards, Arrow copies and
    rejects.jsonl under OUT are outputs, never inputs."""
    samples = _samples(4)
    samples[3]["status"] = "bogus"  # so that OUT/rejects.jsonl exists too
    write_jsonl(tmp_path / "dumps" / "1.jsonl", samples)
    out = tmp_path / "dumps" / "converted"
    first = convert([str(tmp_path / "dumps")], str(out), copts(on_error="skip", mmap=True))
    assert (out / "rejects.jsonl").exists()
    second = convert([str(tmp_path / "dumps")], str(out), copts(on_error="skip", mmap=True, overwrite=True))
    assert second["counts"] == first["counts"]
    assert len(read_rows(out)) == 3


# ------------------------------------------------------------------------------ frameworks' dumps (the registry's detectors)


def _nemo_step(path, val=False):
    from framework_dumps import Conversation, Turn, nemo_rl_batch, write_batched_jsonl

    rows = [Conversation([1, 2], [Turn([3, 4], True, [-0.5, -0.25])], 1.0), Conversation([1, 2], [Turn([5], True, [-1.0])], 0.0)]
    write_batched_jsonl(nemo_rl_batch(rows), path)
    return path


def test_frameworks_are_recognised_from_path_and_content(tmp_path):
    _nemo_step(tmp_path / "logs" / "exp_001" / "train_data_step3.jsonl")
    _nemo_step(tmp_path / "logs" / "exp_001" / "val_data_step3.jsonl")  # a validation log carrying token ids
    write_jsonl(tmp_path / "logs" / "exp_002" / "train_data_step4.jsonl", _samples())  # slime-shaped: not claimed
    files, _, notes = discover([str(tmp_path / "logs")])
    got = [(f.path.split("logs/")[1], f.format, f.step, f.split, f.step_from) for f in files]
    assert got == [("exp_001/train_data_step3.jsonl", "nemo_rl", 3, "train", "name"),
                   ("exp_001/val_data_step3.jsonl", "nemo_rl", 3, "eval", "name"),
                   ("exp_002/train_data_step4.jsonl", "jsonl", 4, "train", "name")]
    assert notes == []


def test_text_only_validation_log_is_skipped_with_a_note():
    files, _, notes = discover([str(SAMPLE_DATA / "nemo_rl")])
    assert [(f.format, f.step, f.split) for f in files] == [("nemo_rl", 1, "train"), ("nemo_rl", 2, "train")]
    (note,) = notes
    assert "val_data_step2.jsonl" in note and "without token_ids" in note


def test_input_format_forces_the_reader(tmp_path):
    _nemo_step(tmp_path / "run_9.jsonl")  # not a NeMo-RL name: read as slime JSONL unless forced
    (f,), _, _ = discover([str(tmp_path)])
    assert f.format == "jsonl"
    (f,), _, _ = discover([str(tmp_path)], options=copts(input_format="nemo_rl"))
    assert (f.format, f.step, f.split) == ("nemo_rl", 9, "train")
    units, _, _ = plan_units([str(tmp_path)], copts(input_format="nemo_rl"))
    assert units[0].input.format == "nemo_rl"
    with pytest.raises(UsageError, match="--input-format: expected one of .*nemo_rl.*, got 'nemo'"):
        discover([str(tmp_path)], options=copts(input_format="nemo"))


def test_input_format_option_on_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from rollout_cli.cli.app import app

    _nemo_step(tmp_path / "in" / "run_9.jsonl")
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "in"), str(tmp_path / "out"), "--input-format", "nemo_rl",
                                 "--workers", "1", "--no-mmap", "--json"])
    assert r.exit_code == 0, r.output
    assert [r["group_index"] for r in read_rows(tmp_path / "out")] == [0, 0]
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "in"), "--input-format", "nemo_rl", "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "in"), str(tmp_path / "o2"), "--input-format", "x"])
    assert r.exit_code == 2 and "--input-format" in r.stderr


def test_miles_side_files_are_left_out_or_refused(tmp_path):
    files, _, notes = discover([str(SAMPLE_DATA / "miles")])
    assert [(f.path.split("miles/")[1], f.format, f.split) for f in files] == [
        ("rollout_data/1.pt", "pt", "train"), ("rollout_data/2.pt", "pt", "train"), ("rollout_data/eval_2.pt", "pt", "eval")]
    assert sum("dashboard mirror" in n for n in notes) == 3 and sum("trajectory sidecar" in n for n in notes) == 3
    alone = tmp_path / "run" / "dashboard_columns"
    alone.mkdir(parents=True)
    shutil.copy(SAMPLE_DATA / "miles" / "dashboard_columns" / "rollout_1.parquet", alone)
    (f,), _, _ = discover([str(tmp_path / "run")])
    assert (f.format, f.step, f.split) == ("miles", 1, "train")
    with pytest.raises(InvalidInputError, match="rollout_1.parquet: reward, status, group_index: missing"):
        convert([str(tmp_path / "run")], str(tmp_path / "out"), copts())


def test_planning_framework_dumps_imports_no_numpy(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom rollout_cli.inputs.units import plan_units\nfrom rollout_cli.core.options import ConvertOptions\n"
            "from rollout_cli.inputs.registry import split_input\n"
            f"units, _, notes = plan_units([{str(SAMPLE_DATA / 'nemo_rl')!r}, {str(SAMPLE_DATA / 'miles')!r}], ConvertOptions())\n"
            "parts = [split_input(u.input, 4) for u in units]\n"
            "print(sorted({u.input.format for u in units}), len(notes), 'numpy' in sys.modules, 'pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "['nemo_rl', 'pt'] 7 False False"


def test_a_format_whose_files_hold_several_steps_names_one_unit_per_step(tmp_path):
    """Format.units: discovery hands the format all of its files and takes one input per step,
    its display naming the step; --step does not apply to them."""

    from rollout_cli.core.errors import UsageError

    gen = sample_generator("make_open_instruct")
    gen.write(tmp_path)
    files, _, notes = discover([str(tmp_path)])
    assert [(f.format, f.step, f.split, f.display) for f in files] == [
        ("open_instruct", s, "train", f"{tmp_path}/grpo_demo_rollouts#step={s}") for s in (1, 2, 3, 4)]
    assert all(f.path == f.ranges[0][0] for f in files)
    with pytest.raises(UsageError, match="--step does not apply"):
        discover([str(tmp_path / "grpo_demo_rollouts_000000.jsonl")], step=3)
