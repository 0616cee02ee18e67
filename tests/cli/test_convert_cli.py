"""`rollout-cli convert` end to end through typer's CliRunner: exit codes, --json, messages, --help."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest
import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from conftest import ROOT, SAMPLE_DATA, make_sample, read_rows, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.run.convert import ConvertOptions

FAST = ["--workers", "1", "--no-mmap"]


def _invoke(args, **kw):
    runner = CliRunner()
    return runner.invoke(app, args, **kw)


def _bad_input(tmp_path):
    samples = [make_sample(index=i, group_index=0, reward=float(i % 2)) for i in range(3)]
    samples[1]["status"] = "done"
    return write_jsonl(tmp_path / "in" / "1.jsonl", samples)


# ------------------------------------------------------------------------------ exit codes


def test_exit_0_and_summary(tmp_path):
    r = _invoke(["convert", str(SAMPLE_DATA / "jsonl" / "rollout_data"), str(tmp_path / "out"), *FAST])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "manifest.json").exists()
    assert "53" in r.stdout  # rows / samples in the summary
    assert len(read_rows(tmp_path / "out")) == 46



def test_summary_is_plain_text_when_piped(tmp_path):
    r = _invoke(["convert", str(SAMPLE_DATA / "jsonl" / "rollout_data"), str(tmp_path / "out"), *FAST])
    lines = r.stdout.splitlines()
    assert lines[0] == f"{tmp_path / 'out'}: 53 rows from 53 samples, 0 rejected"
    assert lines[1].split() == ["split", "step", "samples", "rows", "rejected", "rollouts", "tokens", "shard", "max/mean"]
    assert len(lines) == 2 + 4 + 1 and lines[-1].startswith("done in ")
    widths = {len(line) for line in lines[1:-1]}
    assert len(widths) == 1  # the columns align (numbers right-aligned to the headers' width)
    assert not set("┃│━─") & set(r.stdout)


def test_summary_is_a_rich_table_on_a_terminal(monkeypatch, capsys):
    from rollout_cli.cli import render

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    render.print_convert_summary({"out": "o", "counts": {"rows": 3, "input_samples": 4, "rejected": 1},
                                  "steps": [{"split": "train", "step": 1, "samples": 4, "rows": 3, "rejected": 1,
                                             "rollouts": 2, "tokens": 30, "imbalance": 1.0}],
                                  "rejects": 1, "elapsed_seconds": 0.5})
    out = capsys.readouterr().out
    assert "┃" in out and "o: 3 rows from 4 samples, 1 rejected" in out
    assert "rejected samples and reasons: o/rejects.jsonl" in out

def test_json_output_parses_and_has_counts(tmp_path):
    r = _invoke(["convert", str(SAMPLE_DATA / "jsonl" / "rollout_data"), str(tmp_path / "out"), "--json", *FAST])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    c = res["counts"]
    assert c["input_samples"] == 53 and c["rows"] == 53 and c["rejected"] == 0
    assert c["steps"] == 3 and c["eval_steps"] == 1
    assert [(s["split"], s["step"]) for s in res["steps"]] == [("train", 1), ("train", 2), ("train", 3), ("eval", 3)]


@pytest.mark.parametrize("args", [
    ["--on-error", "maybe"],
    ["--advantage-estimator", "dpo"],
    ["--shards", "0"],
    ["--max-errors", "-1"],
    ["--slime-compat"],  # needs --rollout-batch-size
    ["--steps", "x:y"],
    ["--overwrite", "--resume"],
])
def test_exit_2_on_usage_errors(tmp_path, args):
    inp = write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=0)])
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), *FAST, *args])
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert "Traceback" not in r.output


def test_exit_2_on_missing_input(tmp_path):
    r = _invoke(["convert", str(tmp_path / "nope"), str(tmp_path / "out"), *FAST])
    assert r.exit_code == 2
    assert "nope" in r.stderr
    assert "Traceback" not in r.output


def test_exit_2_without_arguments():
    r = _invoke(["convert"])
    assert r.exit_code == 2


def test_exit_3_names_file_line_and_field(tmp_path):
    inp = _bad_input(tmp_path)
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), *FAST])
    assert r.exit_code == 3, r.output
    assert f"{inp}:line 2" in r.stderr
    assert "status" in r.stderr and "'done'" in r.stderr
    assert "expected one of" in r.stderr
    assert "Traceback" not in r.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_reused_id_is_explained_once(tmp_path):
    """One explicit id on 15 samples of 5 prompt groups: the explanation once, naming the places."""
    samples = [make_sample(index=i, group_index=i // 3, rollout_id=7) for i in range(15)]
    inp = write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), *FAST])
    assert r.exit_code == 3, r.output
    assert r.stderr.count("--rollout-id-scope step") == 1
    assert f"{inp}:line 1, 2, 3" in r.stderr and "15 samples of different prompt groups 0, 1, 2, 3, 4" in r.stderr
    others = r.stderr.splitlines()[1:]
    assert len(others) == 14 and all(line.endswith("different prompt groups: see line 1") for line in others)


def test_exit_3_json_error(tmp_path):
    inp = _bad_input(tmp_path)
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), "--json", *FAST])
    assert r.exit_code == 3
    err = json.loads(r.stdout)
    assert err["exit_code"] == 3 and err["error"] == "InvalidInputError"
    (p,) = err["problems"]
    assert p["file"] == str(inp) and p["line"] == 2 and p["field"] == "status"


def _two_bad_steps(tmp_path):
    """Step 1 with 3 invalid samples (lines 2, 3, 5), step 2 with 2 (lines 1, 4), step 3 clean."""
    for step, bad in ((1, (2, 3, 5)), (2, (1, 4)), (3, ())):
        samples = [make_sample(index=i, group_index=i) for i in range(6)]
        for line in bad:
            samples[line - 1]["status"] = "bogus"
        write_jsonl(tmp_path / "in" / f"{step}.jsonl", samples)
    return tmp_path / "in"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_fail_lists_the_invalid_samples_of_every_step(tmp_path, workers):
    """Today's main named one file: 'error: 3 invalid sample(s): .../1.jsonl:line 2: ...'."""
    src = _two_bad_steps(tmp_path)
    out = tmp_path / "out"
    expected = [f"{src / '1.jsonl'}:line 2", f"{src / '1.jsonl'}:line 3", f"{src / '1.jsonl'}:line 5",
                f"{src / '2.jsonl'}:line 1", f"{src / '2.jsonl'}:line 4"]
    r = _invoke(["convert", str(src), str(out), "--no-mmap", "--workers", workers])
    assert r.exit_code == 3, r.output
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"error: 5 invalid samples in 2 files: {expected[0]}: status: "), r.stderr
    assert [line.split(": status")[0].strip() for line in lines[1:]] == expected[1:]
    assert not out.exists()
    r = _invoke(["convert", str(src), str(out), "--no-mmap", "--workers", workers, "--json"])
    err = json.loads(r.stdout)
    assert r.exit_code == 3 and err["exit_code"] == 3
    assert err["message"].startswith("5 invalid samples in 2 files: ")
    assert [f"{p['file']}:line {p['line']}" for p in err["problems"]] == expected
    assert not out.exists()


def test_fail_max_errors_cuts_the_list(tmp_path):
    src = _two_bad_steps(tmp_path)
    r = _invoke(["convert", str(src), str(tmp_path / "out"), *FAST, "--max-errors", "3", "--json"])
    err = json.loads(r.stdout)
    assert r.exit_code == 3
    assert [(p["file"].rsplit("/", 1)[-1], p["line"]) for p in err["problems"]] == [("1.jsonl", 2), ("1.jsonl", 3), ("1.jsonl", 5)]
    assert "(the first 3 listed; stopped at --max-errors 3)" in err["message"]
    assert not (tmp_path / "out").exists()


def test_skip_json_counts(tmp_path):
    inp = _bad_input(tmp_path)
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), "--json", "--on-error", "skip", *FAST])
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["counts"]
    assert (c["input_samples"], c["rows"], c["rejected"]) == (3, 2, 1)
    assert (tmp_path / "out" / "rejects.jsonl").exists()


def test_exit_5_when_output_exists(tmp_path):
    inp = write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=i, reward=float(i)) for i in range(2)])
    assert _invoke(["convert", str(inp), str(tmp_path / "out"), *FAST]).exit_code == 0
    before = (tmp_path / "out" / "manifest.json").read_bytes()
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), *FAST])
    assert r.exit_code == 5
    assert "--overwrite" in r.stderr
    assert (tmp_path / "out" / "manifest.json").read_bytes() == before
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), "--overwrite", *FAST])
    assert r.exit_code == 0


def test_a_refused_resume_does_not_wedge_the_next(tmp_path):
    """convert RUN OUT; convert RUN OUT --resume --shards 2 (exit 2, nothing written); then
    convert RUN OUT --resume is not refused: the output is up to date, nothing is rewritten."""
    inp = write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=i, reward=float(i)) for i in range(2)])
    out = tmp_path / "out"
    assert _invoke(["convert", str(inp), str(out), *FAST]).exit_code == 0
    stamp = (out / "manifest.json").stat().st_mtime_ns
    r = _invoke(["convert", str(inp), str(out), "--resume", "--shards", "2", *FAST])
    assert r.exit_code == 2 and "(shards)" in r.stderr
    assert not (out / ".staging").exists()
    r = _invoke(["convert", str(inp), str(out), "--resume", *FAST])
    assert r.exit_code == 0, r.output
    assert (out / "manifest.json").stat().st_mtime_ns == stamp


def test_exit_8_json_while_another_process_writes(tmp_path):
    from rollout_cli.output import lock

    inp = write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=0)])
    (tmp_path / "out").mkdir()
    held = lock.acquire(str(tmp_path / "out"))
    try:
        r = _invoke(["convert", str(inp), str(tmp_path / "out"), "--json", *FAST])
    finally:
        held.release()
    assert r.exit_code == 8
    err = json.loads(r.stdout)
    assert err["exit_code"] == 8 and err["error"] == "OutputBusyError" and "pid" in err["message"]
    assert list((tmp_path / "out").iterdir()) == []


def test_exit_5_json(tmp_path):
    inp = write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=0)])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("x")
    r = _invoke(["convert", str(inp), str(tmp_path / "out"), "--json", *FAST])
    assert r.exit_code == 5
    assert json.loads(r.stdout)["exit_code"] == 5


def test_stdin_with_step(tmp_path):
    data = b"".join(json.dumps(make_sample(index=i, group_index=0, reward=float(i % 2))).encode() + b"\n" for i in range(4))
    r = _invoke(["convert", "-", str(tmp_path / "out"), "--step", "8", "--json", *FAST], input=data)
    assert r.exit_code == 0, r.output
    rows = read_rows(tmp_path / "out")
    assert [row["step"] for row in rows] == [8] * 4


def test_stdin_without_step_is_usage_error(tmp_path):
    r = _invoke(["convert", "-", str(tmp_path / "out"), *FAST], input=b"{}\n")
    assert r.exit_code == 2
    assert "--step" in r.stderr


# ------------------------------------------------------------------------------ --help


def _convert_command():
    return typer.main.get_command(app).get_command(None, "convert")


def _help_blocks(text: str) -> dict[str, str]:
    """Option name -> its rows of the help table."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        # an option row starts at column 2 or 3; its wrapped text is indented further
        m = re.match(r"^ {1,2}(?:-[a-zA-Z], )?(--[a-z0-9-]+)", line)
        if m:
            current = m.group(1)
            blocks[current] = line
        elif current:
            blocks[current] += "\n" + line
    return blocks


def test_help_lists_every_flag_with_its_default():
    r = CliRunner().invoke(app, ["convert", "--help"], env={"COLUMNS": "240"})
    assert r.exit_code == 0
    blocks = _help_blocks(r.stdout)
    cmd = _convert_command()
    options = [p for p in cmd.params if isinstance(p, TyperOption)]
    assert len(options) >= 20
    with_default = 0
    for p in options:
        long = [o for o in p.opts if o.startswith("--")][0]
        assert long in blocks, long
        default = p.default
        if default is None or default is False or p.name in ("help",):
            continue
        if isinstance(default, bool):
            shown = p.opts[0].lstrip("-")  # --mmap/--no-mmap: typer shows the flag name
        else:
            shown = str(getattr(default, "value", default))
        assert f"[default: {shown}]" in " ".join(blocks[long].split()), (long, blocks[long])
        with_default += 1
    # estimator, scope, on-error, shards, compression, row-group bytes, mmap, engine at least
    assert with_default >= 8


def test_cli_defaults_equal_library_defaults():
    lib = {f.name: f.default for f in dataclasses.fields(ConvertOptions)}
    cli = {p.name: getattr(p.default, "value", p.default) for p in _convert_command().params if isinstance(p, TyperOption)}
    renamed = {"disable_rewards_normalization": ("rewards_normalization", lambda v: not v),
               "disable_grpo_std_normalization": ("grpo_std_normalization", lambda v: not v)}
    checked = 0
    for name, value in cli.items():
        if name in renamed:
            lname, f = renamed[name]
            assert f(value) == lib[lname], name
            checked += 1
        elif name in lib:
            assert value == lib[name], (name, value, lib[name])
            checked += 1
    assert checked >= 20


def test_import_and_help_never_import_torch():
    code = "import rollout_cli.cli.app, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom rollout_cli.cli.app import app\n"
            "r = CliRunner().invoke(app, ['convert', '--help'])\nassert r.exit_code == 0\n"
            "assert 'torch' not in sys.modules, 'torch imported by --help'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_reward_baseline_flags(tmp_path):
    samples = [make_sample(index=i, group_index=0, rollout_id=5, reward=r) for i, r in enumerate([1.0, 0.0])]
    samples.append(make_sample(index=2, group_index=0, rollout_id=6, reward=1.0))
    inp = write_jsonl(tmp_path / "in" / "2.jsonl", samples)
    r = _invoke(["convert", str(inp), str(tmp_path / "a"), "--reward-baseline", "rollout", "-q"])
    assert r.exit_code == 3 and "train step 2: rollout 5" in r.output and "1.0, 0.0" in r.output
    r = _invoke(["convert", str(inp), str(tmp_path / "b"), "--reward-baseline", "rollout", "--sibling-reward", "mean", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["options"]["sibling_reward"] == "mean"
    r = _invoke(["convert", str(inp), str(tmp_path / "c"), "--reward-baseline", "rollout", "--slime-compat",
                 "--rollout-batch-size", "1", "-q"])
    assert r.exit_code == 2 and "--slime-compat" in r.output


def test_slime_compat_notes_each_step_normalised_as_one_group(tmp_path):
    """Today's main said nothing: step 2's 6 samples were normalised as one group silently."""
    for step, size in ((1, 4), (2, 6), (3, 4)):
        write_jsonl(tmp_path / "in" / f"{step}.jsonl",
                    [make_sample(index=i, group_index=i // 2, reward=float(i % 3 == 0)) for i in range(size)])
    args = ["convert", str(tmp_path / "in"), "--slime-compat", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
            *FAST]
    note = "step 2: 6 samples, not 2 × 2: normalised as one group, as slime does"
    r = _invoke([*args[:2], str(tmp_path / "a"), *args[2:], "--json"])
    assert r.exit_code == 0, r.output
    assert [n for n in json.loads(r.stdout)["notes"] if "normalised" in n] == [note]
    r = _invoke([*args[:2], str(tmp_path / "b"), *args[2:], "-v"])
    assert r.exit_code == 0, r.output
    assert [line for line in r.stderr.splitlines() if "normalised" in line] == [f"note: {note}"]
