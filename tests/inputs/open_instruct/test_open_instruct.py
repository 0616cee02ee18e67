"""open-instruct's saved traces: recognition, steps across shards and the copy of a step a
resumed run wrote again, the mapping onto samples (loss mask, the empty completion's NaN
log-prob), bad input named by file, line and field, the commands on a run folder, and the same
rows as slime's JSONL where both formats carry the same facts."""
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
from rollout_cli.inputs.open_instruct import detect, reader
from rollout_cli.inputs.prime_rl.reader import Bad
from rollout_cli.inputs.units import plan_units
from rollout_cli.run.convert import convert

runner = CliRunner()
RUN = SAMPLE_DATA / "open_instruct"


def _generator():
    return sample_generator("make_open_instruct")


gen = _generator()


def _rec(rng, step: int, i: int, **kw) -> dict:
    return gen.record(rng, step=step, sample_idx=i, prompt_idx=i // 2, prompt=[7, 8, 9], **kw)


def write_shard(root: Path, shard: int, records: list[dict], run: str = "r") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{run}_rollouts_{shard:06d}.jsonl"
    with open(path, "a") as f:
        f.writelines(gen.record_line(r) for r in records)
    return path


# ---------------------------------------------------------------- recognition and steps


def test_shards_and_metadata_by_name_and_first_bytes(tmp_path):
    rng = random.Random(1)
    shard = write_shard(tmp_path, 0, [_rec(rng, 1, 0)])
    assert detect.claims(str(shard)) and detect.skip_note(str(shard)) is None
    meta = tmp_path / "r_metadata.jsonl"
    meta.write_text(json.dumps({"run_name": "r", "git_commit": "x", "model_name": "m", "timestamp": "t"}) + "\n")
    assert detect.claims(str(meta)) and "open-instruct run metadata" in detect.skip_note(str(meta))
    other = tmp_path / "x_rollouts_000000.jsonl"  # the name, but slime samples in it
    other.write_bytes(orjson.dumps({"tokens": [1, 2], "response_length": 1}) + b"\n")
    assert not detect.claims(str(other))
    plain = tmp_path / "notes_metadata.jsonl"
    plain.write_text('{"a": 1}\n')
    assert not detect.claims(str(plain))


def test_a_step_in_two_shards_is_one_unit(tmp_path):
    rng = random.Random(2)
    write_shard(tmp_path, 0, [_rec(rng, 1, i) for i in range(4)] + [_rec(rng, 2, i) for i in range(2)])
    write_shard(tmp_path, 1, [_rec(rng, 2, i) for i in range(2, 4)] + [_rec(rng, 3, i) for i in range(4)])
    units, _, notes = plan_units([str(tmp_path)], ConvertOptions())
    assert [u.step for u in units] == [1, 2, 3] and not notes
    assert [(Path(p).name, first) for p, _, _, first in units[1].input.ranges] == [
        ("r_rollouts_000000.jsonl", 5), ("r_rollouts_000001.jsonl", 1)]
    convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert [r["rollout_id"] for r in read_rows(tmp_path / "out", step=2)] == [0, 1, 2, 3]


def test_a_step_written_again_after_a_resume_keeps_the_later_copy_with_a_note():
    units, _, notes = plan_units([str(RUN)], ConvertOptions())
    assert [u.step for u in units] == [1, 2, 3, 4]
    kept = {u.step: [(Path(p).name, first) for p, _, _, first in u.input.ranges] for u in units}
    assert kept[3] == [("grpo_demo_rollouts_000000.jsonl", 13)] and kept[4] == [("grpo_demo_rollouts_000000.jsonl", 21)]
    said = [n for n in notes if "written 2 times" in n]
    assert len(said) == 2 and "step 3 was written 2 times" in said[0]
    assert "kept " + str(RUN / "grpo_demo_rollouts_000000.jsonl") + ":lines 13-20" in said[0]
    assert "left out " + str(RUN / "grpo_demo_rollouts_000001.jsonl") + ":lines 1-8" in said[0]
    assert any("grpo_demo_metadata.jsonl: open-instruct run metadata" in n for n in notes)


def test_a_copy_in_the_same_shard_keeps_the_last(tmp_path):
    rng = random.Random(3)
    first = [_rec(rng, 5, i, reward=0.0) for i in range(2)]
    again = [_rec(rng, 5, i, reward=1.0) for i in range(2)]
    write_shard(tmp_path, 0, first + again)
    convert([str(tmp_path)], str(tmp_path / "out"), copts())
    assert [r["raw_reward"] for r in read_rows(tmp_path / "out")] == [1.0, 1.0]


# ---------------------------------------------------------------- the mapping


def test_a_record_is_a_sample_with_every_response_token_in_the_loss():
    rng = random.Random(4)
    rec = _rec(rng, 7, 3, response=[11, 12, 13], logprobs=[-0.5, 0.0, -0.25], reward=0.5, finish_reason="length",
               num_calls=1)
    s = reader.record_sample(np, rec, 7, keep_text=False)
    assert s["tokens"].tolist() == [7, 8, 9, 11, 12, 13] and s["response_length"] == 3
    assert s["loss_mask"].tolist() == [1, 1, 1] and s["rollout_log_probs"] == [-0.5, 0.0, -0.25]
    assert (s["rollout_id"], s["index"], s["group_index"]) == (3, 3, 1)
    assert s["status"] == "truncated" and s["reward"] == 0.5 and s["source"] == "gsm8k"
    assert s["metadata"]["tool_calls"] == 1 and s["metadata"]["advantage"] == 0.0


def test_the_empty_completions_nan_log_prob_is_no_log_probs_and_any_other_nan_is_refused(tmp_path):
    rng = random.Random(5)
    recs = [_rec(rng, 1, 0), _rec(rng, 1, 1, response=[gen.EOS], logprobs=[float("nan")])]
    path = write_shard(tmp_path / "ok", 0, recs)
    assert b"NaN" in path.read_bytes()
    convert([str(tmp_path / "ok")], str(tmp_path / "out"), copts())
    rows = read_rows(tmp_path / "out")
    assert rows[1]["tokens"][-1] == gen.EOS and rows[1]["loss_mask"] == [1] and rows[1]["rollout_log_probs"] is None
    assert rows[0]["rollout_log_probs"] is not None
    bad = [_rec(rng, 1, 0, response=[5, 6], logprobs=[-0.5, float("nan")])]
    path = write_shard(tmp_path / "bad", 0, bad)
    r = runner.invoke(app, ["convert", str(tmp_path / "bad"), str(tmp_path / "out2"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}:line 1: rollout_log_probs: expected finite numbers, got nan at position 1" in r.output


@pytest.mark.parametrize("change, field, message", [
    (lambda r: r.pop("step"), "step", "expected an integer >= 0, got missing"),
    (lambda r: r.__setitem__("response_tokens", []), "response_tokens", "expected a non-empty list"),
    (lambda r: r["logprobs"].pop(), "logprobs", "values (one per response token)"),
    (lambda r: r.__setitem__("reward", None), "reward", "expected a number, got null"),
    (lambda r: r.__setitem__("prompt_tokens", [1, -2]), "prompt_tokens", "expected token ids in [0, 2147483647]"),
])
def test_a_bad_record_names_its_field(change, field, message):
    rec = _rec(random.Random(6), 1, 0)
    change(rec)
    with pytest.raises(Bad) as e:
        reader.record_sample(np, rec, None, keep_text=False)
    assert e.value.field == field and message in e.value.message


@pytest.mark.parametrize("kind", ["field", "json", "step"])
def test_bad_line_exits_3_naming_file_line_and_field(tmp_path, kind):
    rng = random.Random(7)
    recs = [_rec(rng, 1, i) for i in range(4)]
    if kind == "field":
        recs[2]["response_tokens"] = "abc"
    path = write_shard(tmp_path, 0, recs)
    lines = path.read_bytes().splitlines(keepends=True)
    if kind == "json":
        lines[2] = lines[2][:40] + b"\n"
    elif kind == "step":  # no step to place the record by: refused while planning
        lines[2] = orjson.dumps({"sample_idx": 2}) + b"\n"
    path.write_bytes(b"".join(lines))
    r = runner.invoke(app, ["convert", str(tmp_path), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    want = {"field": "response_tokens: expected a list of token ids, got str", "json": "invalid JSON",
            "step": "step: expected an integer >= 0, got missing"}[kind]
    assert f"{path}:line 3" in r.output and want in r.output, r.output


# ---------------------------------------------------------------- a run folder, through the commands


def test_convert_a_run_folder_without_a_flag_then_inspect_verify_and_report(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(RUN), str(out), "-q", "--workers", "1"])
    assert r.exit_code == 0, r.output
    rows = read_rows(out)
    assert [(s, sum(1 for r in rows if r["step"] == s)) for s in (1, 2, 3, 4)] == [(1, 8), (2, 4), (3, 8), (4, 4)]
    kept = [orjson.loads(line) for line in (RUN / "grpo_demo_rollouts_000000.jsonl").read_bytes().splitlines()[12:20]]
    step3 = [r for r in rows if r["step"] == 3]
    assert [r["tokens"] for r in step3] == [k["prompt_tokens"] + k["response_tokens"] for k in kept]
    assert runner.invoke(app, ["verify", str(out), "-q"]).exit_code == 0
    r = runner.invoke(app, ["inspect", str(RUN), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["rollouts"] == 24 and summary["prompt_groups"] == 6
    r = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["train"]["samples"] == 24


def test_audit_says_open_instruct_has_no_train_side():
    with pytest.raises(InvalidInputError) as e:
        audit_paths([str(RUN)], [str(RUN)])
    assert "open-instruct writes no trainer dump rollout-cli reads" in str(e.value)


# ---------------------------------------------------------------- the same rows as slime's JSONL


@st.composite
def steps(draw):
    """Steps of whole groups as plain facts: per sample a prompt, a response, log-probs, a reward
    and how it finished."""
    out = []
    for step in range(draw(st.integers(1, 3))):
        samples = []
        for g in range(draw(st.integers(1, 3))):
            prompt = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
            for _ in range(draw(st.integers(1, 3))):
                resp = draw(st.lists(st.integers(0, 999), min_size=1, max_size=5))
                lps = [-round(0.125 * draw(st.integers(0, 8)), 3) for _ in resp]
                samples.append((g, prompt, resp, lps, draw(st.sampled_from([0.0, 1.0])),
                                draw(st.sampled_from(["stop", "length"]))))
        out.append(samples)
    return out


_CARRIED = ("step", "rollout_id", "sample_index", "group_index", "tokens", "response_length", "loss_mask", "reward",
            "raw_reward", "status", "rollout_log_probs", "source_name")


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(facts=steps())
def test_same_rows_as_slime_jsonl(tmp_path, facts):
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    rng = random.Random(0)
    recs, slime = [], {}
    for step, samples in enumerate(facts):
        for i, (g, prompt, resp, lps, reward, finish) in enumerate(samples):
            recs.append(gen.record(rng, step=step, sample_idx=i, prompt_idx=g, prompt=prompt, response=resp,
                                   logprobs=lps, reward=reward, finish_reason=finish))
            slime.setdefault(step, []).append({
                "rollout_id": i, "index": i, "group_index": g, "tokens": prompt + resp, "response_length": len(resp),
                "loss_mask": [1] * len(resp), "rollout_log_probs": lps, "reward": reward, "source": "gsm8k",
                "status": "completed" if finish == "stop" else "truncated"})
    half = len(recs) // 2  # the writer's shard boundary may fall anywhere between steps or inside one
    write_shard(root / "run", 0, recs[:half])
    write_shard(root / "run", 1, recs[half:])
    for step, rows in slime.items():
        p = root / "slime" / f"step_{step}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    convert([str(root / "run")], str(root / "a"), copts())
    convert([str(root / "slime")], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == len(recs)
    assert [{k: r[k] for k in _CARRIED} for r in a] == [{k: r[k] for k in _CARRIED} for r in b]


def test_the_sample_data_is_what_its_generator_writes(tmp_path):
    gen.write(tmp_path)
    committed = sorted(p.relative_to(RUN) for p in RUN.rglob("*") if p.is_file())
    assert committed == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert all((RUN / p).read_bytes() == (tmp_path / p).read_bytes() for p in committed)
