"""Atropos' scored groups onto samples (the example trainer's meaning of tokens, masks,
inference_logprobs and scores), a run folder converted with no flag, bad lines named by file,
line and field, and the same rows as slime's JSONL where both carry the same facts."""
from __future__ import annotations

import copy
import json
import random
import shutil

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, copts, read_rows, sample_generator
from rollout_cli.cli.app import app
from rollout_cli.core.errors import InvalidInputError
from rollout_cli.inputs.atropos import reader as atropos
from rollout_cli.run.convert import convert

runner = CliRunner()
DATA = SAMPLE_DATA / "atropos"


def _generator():
    return sample_generator("make_atropos")


gen = _generator()


def test_a_two_turn_sequence_keeps_what_the_trainer_trains():
    # prompt 3, generated 2 (ending EOT), re-rendered EOT + tool 1 (masked), generated 2
    g = {"tokens": [[11, 12, 13, 21, 7, 7, 31, 41, 7], [11, 12, 13, 22, 7]],
         "masks": [[-100, -100, -100, 21, 7, -100, -100, 41, 7], [-100, -100, -100, 22, 7]],
         "scores": [1.0, -0.5],
         "inference_logprobs": [[1.0, 1.0, 1.0, -0.5, -0.25, 1.0, 1.0, -1.0, -0.125], [1.0, 1.0, 1.0, -2.0, -0.5]],
         "overrides": [{"set_advantage_to_zero": True}, None], "group_overrides": {"temperature": 0.7}}
    a, b = atropos.group_samples(np, g, 4)
    assert a["tokens"].tolist() == g["tokens"][0]  # the end-of-turn token twice, as written
    assert a["response_length"] == 6 and a["loss_mask"].tolist() == [1, 1, 0, 0, 1, 1]
    assert a["rollout_log_probs"].tolist() == [-0.5, -0.25, 0.0, 0.0, -1.0, -0.125]  # 1.0 is no log-prob
    assert (a["reward"], a["group_index"], a["status"]) == (1.0, 4, "completed")
    assert a["metadata"] == {"group_overrides": {"temperature": 0.7}, "overrides": {"set_advantage_to_zero": True}}
    assert b["response_length"] == 2 and b["reward"] == -0.5 and b["metadata"] == {"group_overrides": {"temperature": 0.7}}


def test_no_log_probs_and_nothing_trained():
    g = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, -100, -100], [-100, 2, 4]], "scores": [0, 1]}
    a, b = atropos.group_samples(np, g, 0)
    assert a["response_length"] == 0 and a["loss_mask"].tolist() == []
    assert "rollout_log_probs" not in a and "metadata" not in a
    assert b["response_length"] == 2 and isinstance(b["reward"], float)


def test_convert_run_folder_without_a_flag_then_inspect_verify_and_report(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(DATA), str(out), "-q", "--workers", "1"])
    assert r.exit_code == 0, r.output
    rows = read_rows(out)
    groups = [[json.loads(line) for line in p.read_text().splitlines()] for p in (DATA / "data").glob("gsm8k*.jsonl")]
    assert len(rows) == sum(len(g["tokens"]) for f in groups for g in f) == 20
    assert {r["step"] for r in rows} == {0, 1}
    step0 = [r for r in rows if r["step"] == 0]
    first = json.loads((DATA / "data" / "gsm8k.jsonl").read_text().splitlines()[0])
    assert [r["tokens"] for r in step0[:4]] == first["tokens"]
    assert [r["group_index"] for r in step0] == [0] * 4 + [1] * 4 + [2] * 4
    assert len({r["rollout_id"] for r in step0}) == 12
    assert [r["raw_reward"] for r in step0[:4]] == first["scores"]
    r = runner.invoke(app, ["verify", str(out), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["inspect", str(DATA), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["rollouts"] == 20 and summary["prompt_groups"] == 5
    r = runner.invoke(app, ["report", str(DATA), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["train"]["rollouts"] == 20


def test_audit_says_atropos_has_no_trainer_dumps():
    from rollout_cli.auditing import audit_paths

    with pytest.raises(InvalidInputError) as e:
        audit_paths([str(DATA)], [str(DATA)])
    assert "Atropos writes no trainer dump rollout-cli reads" in str(e.value)


def _break(kind: str, g: dict) -> tuple[dict | bytes, str]:
    if kind == "tokens":
        del g["tokens"]
        return g, "tokens: missing"
    if kind == "masks_count":
        g["masks"] = g["masks"][:-1]
        return g, "masks: expected 4 entries (one per sequence of tokens), got 3"
    if kind == "mask_length":
        g["masks"][1] = g["masks"][1][:-1]
        return g, f"masks[1]: expected {len(g['tokens'][1])} entries (one per token)"
    if kind == "mask_value":
        j = len(g["tokens"][2]) - 1
        g["masks"][2][j] = g["tokens"][2][j] + 1
        return g, f"masks[2]: position {j}: expected -100 or the token id {g['tokens'][2][j]}"
    if kind == "score":
        g["scores"][3] = "high"
        return g, "scores[3]: expected a number, got str"
    if kind == "logprobs":
        g["inference_logprobs"][0] = g["inference_logprobs"][0][:-2]
        return g, "inference_logprobs[0]: expected"
    if kind == "token":
        g["tokens"][0][0] = -3
        return g, "tokens[0]: expected token ids in [0, 2147483647]"
    assert kind == "truncated"
    return gen.dumps([g])[:-40], "invalid JSON"


@pytest.mark.parametrize("kind", ["tokens", "masks_count", "mask_length", "mask_value", "score", "logprobs", "token", "truncated"])
def test_bad_line_exits_3_naming_file_line_and_field(tmp_path, kind):
    rng = random.Random(3)
    shape = [[(4, 3)], [(4, 4)], [(4, 2)], [(4, 5)]]
    good = [gen.group(rng, shape, [1.0, 0.0, 0.5, 0.0]) for _ in range(3)]
    bad, message = _break(kind, copy.deepcopy(gen.group(rng, shape, [1.0, 0.0, 0.5, 0.0])))
    line = bad if isinstance(bad, bytes) else gen.dumps([bad])
    path = tmp_path / "run" / "groups.jsonl"
    path.parent.mkdir()
    data = gen.dumps(good).splitlines(keepends=True)
    path.write_bytes(b"".join(data[:2]) + line + (b"\n" if kind == "truncated" else b"") + data[2])
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}:line 3" in r.output and message in r.output, r.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_bad_line_is_rejected_under_skip_and_the_rest_converts(tmp_path):
    rng = random.Random(4)
    groups = [gen.group(rng, [[(3, 2)], [(3, 3)]], [1.0, 0.0]) for _ in range(3)]
    groups[1]["masks"][0] = [5]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "g.jsonl").write_bytes(gen.dumps(groups))
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1", "-q",
                            "--on-error", "skip"])
    assert r.exit_code == 0, r.output
    assert len(read_rows(tmp_path / "out")) == 4
    assert "masks[0]" in (tmp_path / "out" / "rejects.jsonl").read_text()


# ---------------------------------------------------------------- the same facts as slime JSONL


@st.composite
def groups(draw):
    """Prompt groups of rollouts: per rollout a prompt, then turns of (trained?, tokens,
    log-probs), a reward."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        prompt = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
        rollouts = []
        for _ in range(draw(st.integers(1, 3))):
            spans = []
            for k in range(draw(st.integers(1, 3))):
                toks = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
                spans.append((k % 2 == 0, toks, [-0.125 * draw(st.integers(0, 8)) for _ in toks]))
            rollouts.append((spans, draw(st.sampled_from([0.0, 0.5, 1.0]))))
        out.append((prompt, rollouts, draw(st.booleans())))
    return out


def _as_atropos(facts) -> list[dict]:
    lines = []
    for prompt, rollouts, with_lp in facts:
        g = {"tokens": [], "masks": [], "scores": []}
        lps = []
        for spans, reward in rollouts:
            g["tokens"].append(prompt + [t for _, toks, _ in spans for t in toks])
            g["masks"].append([-100] * len(prompt) + [t if tr else -100 for tr, toks, _ in spans for t in toks])
            lps.append([1.0] * len(prompt) + [lp if tr else 1.0 for tr, _, lp_ in spans for lp in lp_])
            g["scores"].append(reward)
        if with_lp:
            g["inference_logprobs"] = lps
        lines.append(g)
    return lines


def _as_slime(facts) -> list[dict]:
    rows = []
    for gi, (prompt, rollouts, with_lp) in enumerate(facts):
        for spans, reward in rollouts:
            resp = [t for _, toks, _ in spans for t in toks]
            row = {"group_index": gi, "tokens": prompt + resp, "response_length": len(resp),
                   "loss_mask": [int(tr) for tr, toks, _ in spans for _ in toks], "reward": reward, "status": "completed"}
            if with_lp:
                row["rollout_log_probs"] = [lp if tr else 0.0 for tr, _, lp_ in spans for lp in lp_]
            rows.append(row)
    return rows


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(facts=groups())
def test_same_rows_as_slime_jsonl(tmp_path, facts):
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    (root / "run").mkdir(parents=True)
    (root / "run" / "groups_3.jsonl").write_bytes(gen.dumps(_as_atropos(facts)))
    slime = root / "slime" / "step_3.jsonl"
    slime.parent.mkdir(parents=True)
    slime.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _as_slime(facts)))
    convert([str(root / "run")], str(root / "a"), copts())
    convert([str(slime)], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == sum(len(f[1]) for f in facts)
    assert a == b
