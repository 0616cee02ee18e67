"""PipelineRL's file streams: recognition, the step of a group (its oldest weights version, a
group never split), the mapping onto samples (the trainer's reading of labels and log-probs),
bad input named by file, line and field, the commands on a run folder, and the same rows as
slime's JSONL where both formats carry the same facts."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, copts, read_rows, sample_generator
from rollout_cli.auditing.api import audit_paths
from rollout_cli.cli.app import app
from rollout_cli.core.errors import InvalidInputError
from rollout_cli.core.options import ConvertOptions
from rollout_cli.inputs.pipelinerl import detect, reader
from rollout_cli.inputs.prime_rl.reader import Bad, string_id
from rollout_cli.inputs.units import plan_units
from rollout_cli.run.convert import convert

runner = CliRunner()
RUN = SAMPLE_DATA / "pipelinerl"


def _generator():
    return sample_generator("make_pipelinerl")


gen = _generator()


def write_stream(root: Path, groups: list[list[dict]], topic: str = "actor") -> Path:
    path = root / "streams" / topic / "0" / "0" / "0.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(gen.group_line(g) for g in groups))
    return path


def _text(rng, **kw) -> dict:
    kw.setdefault("group_id", "actor_0")
    kw.setdefault("model_version", 0)
    kw.setdefault("rollout_index", 0)
    return gen.training_text(rng, **kw)


# ---------------------------------------------------------------- recognition and steps


@pytest.mark.parametrize("path, claimed, split, note", [
    ("exp/streams/actor/0/0/0.jsonl", True, "train", None),
    ("exp/streams/actor_test/0/1/0.jsonl", True, "eval", None),
    ("exp/streams/stats/0/0/0.jsonl", True, None, "a PipelineRL `stats` stream, not samples, skipped"),
    ("exp/streams/preprocessor_stats/0/0/0.jsonl", True, None, "a PipelineRL `preprocessor_stats` stream"),
    ("exp/streams/actor/0.jsonl", False, None, None),
    ("rollout_data/12.jsonl", False, None, None),
])
def test_streams_by_path(path, claimed, split, note):
    assert detect.claims(path) == claimed
    if split:
        assert detect.split_of(path) == split and detect.skip_note(path) is None
    if note:
        assert note in detect.skip_note(path)


def test_a_renamed_stream_file_is_claimed_by_its_first_bytes(tmp_path):
    rng = random.Random(1)
    f = tmp_path / "groups.jsonl"
    f.write_bytes(gen.group_line([_text(rng)]))
    assert detect.claims(str(f))
    f.write_bytes(orjson.dumps({"text": "x", "n_predicted": 1}) + b"\n")  # an object, not a group
    assert not detect.claims(str(f))


def test_a_group_is_its_oldest_version_and_a_step_is_read_wherever_its_lines_are(tmp_path):
    rng = random.Random(2)
    groups = [[_text(rng, group_id="g0", model_version=0)],
              [_text(rng, group_id="g1", model_version=5), _text(rng, group_id="g1", model_version=5, rollout_index=1)],
              [_text(rng, group_id="g2", model_version=5), _text(rng, group_id="g2", model_version=0, rollout_index=1)],
              [_text(rng, group_id="g3", model_version=5)]]
    write_stream(tmp_path / "run", groups)
    units, _, notes = plan_units([str(tmp_path / "run")], ConvertOptions())
    assert [(u.step, u.input.split) for u in units] == [(0, "train"), (5, "train")]
    assert [[r[3] for r in u.input.ranges] for u in units] == [[1, 3], [2, 4]]  # first lines of each run
    convert([str(tmp_path / "run")], str(tmp_path / "out"), copts())
    rows = read_rows(tmp_path / "out")
    by_step = {}
    for r in rows:
        by_step.setdefault(r["step"], set()).add(r["group_index"])
    assert by_step == {0: {string_id("g0"), string_id("g2")}, 5: {string_id("g1"), string_id("g3")}}


def test_planning_imports_no_numpy():
    import subprocess
    import sys

    code = ("import sys\n"
            "from rollout_cli.inputs.units import plan_units\n"
            "from rollout_cli.core.options import ConvertOptions\n"
            f"units, _, notes = plan_units([{str(RUN)!r}], ConvertOptions())\n"
            "assert [u.input.format for u in units] == ['pipelinerl'] * 4, units\n"
            "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# ---------------------------------------------------------------- the mapping


def test_a_text_is_a_sample_as_the_trainer_reads_it():
    rng = random.Random(3)
    t = _text(rng, group_id="train_7", rollout_index=2, model_version=12, prompt_len=5, out_len=3,
              logprobs=[-0.5, -0.25, -1.0], reward=0.75, finished=False)
    s = reader.text_sample(np, t, "[0]", keep_text=True)
    assert s["tokens"].tolist() == t["input_ids"] and s["response_length"] == 3
    assert s["loss_mask"].tolist() == [True] * 3 and s["rollout_log_probs"].tolist() == [-0.5, -0.25, -1.0]
    assert s["reward"] == 0.75 and s["status"] == "truncated"
    assert s["group_index"] == string_id("train_7") and s["rollout_id"] == string_id("train_7/2")
    assert s["metadata"]["model_version"] == 12 and s["metadata"]["group_id"] == "train_7"
    assert s["weight_versions"] == ["12"]
    assert s["prompt"] + s["response"] == t["text"] and s["response"].startswith("w")


def test_log_probs_are_right_aligned_as_the_trainer_lays_them():
    """A label masked inside the completion: the trainer lays the log-probs on the last
    positions (rl/__init__.py:589), and the loss mask keeps the hole."""
    rng = random.Random(4)
    t = _text(rng, prompt_len=3, out_len=4, logprobs=[-0.1, -0.2, -0.3])
    t["labels"][4] = -100
    s = reader.text_sample(np, t, "[0]", keep_text=False)
    assert s["response_length"] == 4 and s["loss_mask"].tolist() == [True, False, True, True]
    assert s["rollout_log_probs"].tolist() == [0.0, -0.1, -0.2, -0.3]


def test_the_texts_of_a_multi_call_rollout_share_its_id():
    rng = random.Random(5)
    texts = [_text(rng, group_id="g", rollout_index=r, step_index=k) for r in (0, 1) for k in (0, 1)]
    out = reader.group_samples(np, texts, 0, keep_text=False)
    assert [s["rollout_id"] for s in out] == [string_id("g/0")] * 2 + [string_id("g/1")] * 2
    assert len({s["group_index"] for s in out}) == 1


@pytest.mark.parametrize("change, field, message", [
    (lambda t: t["labels"].pop(), "[1].labels", "expected 8 entries (one per input_ids), got 7"),
    (lambda t: t.__setitem__("labels", [-100] * 8), "[1].labels", "no trained position"),
    (lambda t: t["labels"].__setitem__(7, 1), "[1].labels", "label 1 at position 7 is not its token"),
    (lambda t: t["logprobs"].pop(), "[1].logprobs", "expected 3 values (one per trained label), got 2"),
    (lambda t: t["logprobs"].__setitem__(1, None), "[1].logprobs", "expected numbers, got null at position 1 (orjson writes"),
    (lambda t: t.__setitem__("group_id", None), "[1].group_id", "expected a string, got null"),
    (lambda t: t["metadata"].pop("rollout_index"), "[1].metadata.rollout_index", "expected an integer, got null"),
    (lambda t: t["input_ids"].__setitem__(0, -5), "[1].input_ids", "expected token ids in [0, 2147483647]"),
])
def test_a_bad_text_names_its_field(change, field, message):
    rng = random.Random(6)
    texts = [_text(rng, prompt_len=5, out_len=3) for _ in range(2)]
    change(texts[1])
    with pytest.raises(Bad) as e:
        reader.group_samples(np, texts, 0, keep_text=False)
    assert e.value.field == field and message in e.value.message


# ---------------------------------------------------------------- a run folder, through the commands


def test_convert_a_run_folder_without_a_flag_then_inspect_verify_and_report(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(RUN), str(out), "-q", "--workers", "1"])
    assert r.exit_code == 0, r.output
    groups = [orjson.loads(line) for line in (RUN / "streams/actor/0/0/0.jsonl").read_bytes().splitlines()]
    rows = read_rows(out)
    assert len(rows) == sum(len(g) for g in groups) == 21
    assert {r["step"] for r in rows} == {0, 12, 24}
    for g in groups:  # every group whole in the step of its oldest version, each text's version carried
        mine = [r for r in rows if r["group_index"] == string_id(g[0]["group_id"])]
        assert {r["step"] for r in mine} == {min(t["metadata"]["model_version"] for t in g)}
        assert sorted(r["weight_versions"][0] for r in mine) == sorted(str(t["metadata"]["model_version"]) for t in g)
    assert {tuple(r["weight_versions"]) for r in rows if r["step"] == 0} == {("0",), ("12",)}  # a group over two versions
    assert len(read_rows(out, "eval")) == 4
    assert runner.invoke(app, ["verify", str(out), "-q"]).exit_code == 0
    r = runner.invoke(app, ["inspect", str(RUN), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["rollouts"] == 18 and summary["prompt_groups"] == 6
    assert summary["samples_per_rollout"] == {"1": 15, "2": 3}  # the two-call agent's rollouts
    r = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["train"]["samples"] == 21


def test_the_stats_streams_are_left_out_with_a_note():
    _, _, notes = plan_units([str(RUN)], ConvertOptions())
    assert any("streams/stats/0/0/0.jsonl: a PipelineRL `stats` stream, not samples, skipped" in n for n in notes)


def test_audit_says_pipelinerl_has_no_train_side():
    with pytest.raises(InvalidInputError) as e:
        audit_paths([str(RUN)], [str(RUN)])
    assert "PipelineRL writes no trainer dump rollout-cli reads" in str(e.value)


@pytest.mark.parametrize("kind", ["labels", "json", "version"])
def test_bad_line_exits_3_naming_file_line_and_field(tmp_path, kind):
    rng = random.Random(7)
    groups = [[_text(rng, group_id=f"g{i}")] for i in range(3)]
    path = write_stream(tmp_path / "run", groups)
    lines = path.read_bytes().splitlines(keepends=True)
    bad = [_text(rng, group_id="bad")]
    if kind == "labels":
        bad[0]["labels"] = bad[0]["labels"][:-1]
        line, message = gen.group_line(bad), "[0].labels: expected"
    elif kind == "json":
        line, message = gen.group_line(bad)[:-30] + b"\n", "invalid JSON"
    else:
        del bad[0]["metadata"]["model_version"]
        line, message = gen.group_line(bad), "metadata.model_version: missing"
    path.write_bytes(b"".join(lines[:1]) + line + b"".join(lines[1:]))
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}:line 2" in r.output and message in r.output, r.output


# ---------------------------------------------------------------- the same rows as slime's JSONL


@st.composite
def groups(draw):
    """Prompt groups as plain facts: rollouts, each of 1-2 calls (prompt, completion, masked
    completion positions, log-probs), a reward and whether it finished."""
    out = []
    for g in range(draw(st.integers(1, 4))):
        rollouts = []
        for r in range(draw(st.integers(1, 3))):
            calls = []
            for _ in range(draw(st.integers(1, 2))):
                prompt = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
                out_toks = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
                masked = [draw(st.booleans()) and k > 0 for k in range(len(out_toks))]
                lps = [-round(0.125 * draw(st.integers(0, 8)), 3) for m in masked if not m]
                calls.append((prompt, out_toks, masked, lps))
            rollouts.append((r, calls, draw(st.sampled_from([0.0, 0.5, 1.0])), draw(st.booleans())))
        out.append((f"actor_{g}", rollouts))
    return out


def _as_pipelinerl(facts) -> list[list[dict]]:
    lines = []
    for gid, rollouts in facts:
        texts = []
        for r, calls, reward, finished in rollouts:
            for k, (prompt, out_toks, masked, lps) in enumerate(calls):
                t = gen.training_text(random.Random(0), group_id=gid, model_version=3, rollout_index=r, step_index=k,
                                      reward=reward, finished=finished, logprobs=lps)
                t["input_ids"] = prompt + out_toks
                t["labels"] = [-100] * len(prompt) + [-100 if m else tok for tok, m in zip(out_toks, masked)]
                texts.append(t)
        lines.append(texts)
    return lines


def _as_slime(facts) -> list[dict]:
    rows = []
    for gid, rollouts in facts:
        for r, calls, reward, finished in rollouts:
            for prompt, out_toks, masked, lps in calls:
                n = len(out_toks)
                rows.append({
                    "rollout_id": string_id(f"{gid}/{r}"), "group_index": string_id(gid),
                    "tokens": prompt + out_toks, "response_length": n, "loss_mask": [0 if m else 1 for m in masked],
                    "rollout_log_probs": [0.0] * (n - len(lps)) + lps, "reward": reward,
                    "status": "completed" if finished else "truncated", "weight_versions": ["3"],
                })
    return rows


_CARRIED = ("step", "rollout_id", "group_index", "tokens", "response_length", "loss_mask", "reward", "raw_reward",
            "status", "rollout_log_probs", "rollout_position", "weight_versions")


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(facts=groups())
def test_same_rows_as_slime_jsonl(tmp_path, facts):
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    write_stream(root / "run", _as_pipelinerl(facts))
    slime = root / "slime" / "step_3.jsonl"
    slime.parent.mkdir(parents=True)
    slime.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _as_slime(facts)))
    convert([str(root / "run")], str(root / "a"), copts())
    convert([str(slime)], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == sum(len(calls) for _, rs in facts for _, calls, _, _ in rs)
    assert [{k: r[k] for k in _CARRIED} for r in a] == [{k: r[k] for k in _CARRIED} for r in b]


def test_a_stream_whose_last_group_is_being_written_converts_nothing_until_skipped(tmp_path):
    rng = random.Random(8)
    path = write_stream(tmp_path / "run", [[_text(rng, group_id=f"g{i}", model_version=i)] for i in range(2)])
    path.write_bytes(path.read_bytes() + gen.group_line([_text(rng, group_id="g9")])[:50])
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3 and "still being written? it ends inside line 3" in r.output, r.output
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1", "--skip-incomplete"])
    assert r.exit_code == 0 and "train step 0 is pending" in r.output, r.output


def test_the_sample_data_is_what_its_generator_writes(tmp_path):
    gen.write(tmp_path)
    committed = sorted(p.relative_to(RUN) for p in RUN.rglob("*") if p.is_file())
    assert committed == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert all((RUN / p).read_bytes() == (tmp_path / p).read_bytes() for p in committed)


def test_max_staleness_is_refused_for_pipelinerl_input(tmp_path):
    """The step is the oldest version of its groups, so no version is behind it: not comparable."""
    r = runner.invoke(app, ["convert", str(RUN), str(tmp_path / "out"), "--max-staleness", "1", "--workers", "1"])
    assert r.exit_code == 2, r.output
    assert "--max-staleness: the weight versions of pipelinerl inputs are not comparable" in r.output
