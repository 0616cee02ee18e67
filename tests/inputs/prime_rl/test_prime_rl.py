"""prime-rl episode traces: recognition, the mapping onto samples (prime-rl's own derivation of
training samples), discovery of the subset, bad input named by file, line and field, byte
ranges, and the same rows as slime's JSONL where both formats carry the same facts."""
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
from rollout_cli.cli.app import app
from rollout_cli.inputs.prime_rl import reader as prime_rl
from rollout_cli.inputs.discover import discover
from rollout_cli.inputs.registry import read_input, split_input
from rollout_cli.inputs.units import plan_units
from rollout_cli.run.convert import convert

runner = CliRunner()
RUN = SAMPLE_DATA / "prime_rl" / "outputs" / "run"


def _generator():
    return sample_generator("make_prime_rl")


gen = _generator()


def write_step(root: Path, step: int, records: list[dict], split: str = "train", subset: str = "effective") -> Path:
    path = root / "rollouts" / f"step_{step}" / split / subset / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gen.dumps(records))
    return path


def forked_episode(rng=None, **kw) -> dict:
    """One episode, one trace: prompt -> answer -> tool result -> two answers (two branches)."""
    rng = rng or random.Random(1)
    nodes = [gen.user(rng, 4), gen.assistant(rng, 0, 1, 3), gen.user(rng, 2, parent=1, role="tool"),
             gen.assistant(rng, 2, 1, 2), gen.assistant(rng, 2, 1, 4)]
    task = gen.task_record(1)
    tr = gen.trace(rng, task, nodes, rewards={"a": {"score": 1.0, "weight": 0.5}, "b": {"score": 0.5, "weight": 2.0},
                                              "c": None})
    return gen.episode(rng, task, "g-1", 3, [tr], **kw)


# ---------------------------------------------------------------- recognition


@pytest.mark.parametrize("path, placed", [
    ("out/run/rollouts/step_12/train/effective/traces.jsonl", (12, "train")),
    ("rollouts/step_0/eval/all/traces.jsonl", (0, "eval")),
    ("s3://b/run/rollouts/step_3/train/all/traces.jsonl.zst", (3, "train")),
    ("out/run/rollouts/step_1/train/traces.jsonl", None),
    ("out/run/rollouts/step_1/train/other/traces.jsonl", None),
    ("rollout_data/12.jsonl", None),
])
def test_step_and_split_from_the_path(path, placed):
    assert prime_rl.step_and_split(path) == placed
    assert prime_rl.claims(path) is (placed is not None)


def test_claims_a_traces_file_anywhere_by_its_first_bytes(tmp_path):
    p = tmp_path / "episodes_5.jsonl"
    p.write_bytes(gen.dumps([forked_episode()]))
    assert prime_rl.claims(str(p))
    slime = SAMPLE_DATA / "jsonl" / "rollout_data" / "1.jsonl"
    assert not prime_rl.claims(str(slime))
    (f,), _, _ = discover([str(p)])
    assert (f.format, f.step, f.split) == ("prime_rl", 5, "train")


def test_string_ids_are_64_bit_and_content_defined():
    a = prime_rl.string_id("3f2a")
    assert a == prime_rl.string_id("3f2a") != prime_rl.string_id("3f2b")
    assert 0 <= a < 2**63


# ---------------------------------------------------------------- mapping


def test_branches_are_samples_of_one_rollout():
    ep = forked_episode()
    nodes = ep["traces"][0]["nodes"]
    s1, s2 = prime_rl.episode_samples(np, ep)
    rid, gid = prime_rl.string_id(ep["id"]), prime_rl.string_id("g-1")
    for s in (s1, s2):
        assert (s["rollout_id"], s["group_index"]) == (rid, gid)
        assert s["reward"] == 1.0 * 0.5 + 0.5 * 2.0  # Σ score·weight, unscored left out
        assert s["status"] == "completed" and s["remove_sample"] is False
        assert s["metadata"]["source_name"] == "gsm8k" and s["metadata"]["task_key"] == "task-1"
        assert s["metadata"]["dispatch_step"] == 3
    assert [s1["metadata"]["branch"], s2["metadata"]["branch"]] == [0, 1]
    # branch 0: nodes 0,1,2,3; the response starts at node 1's first sampled token
    tok = sum((nodes[j]["token_ids"] for j in (0, 1, 2, 3)), [])
    assert s1["tokens"].tolist() == tok
    assert s1["response_length"] == len(tok) - (4 + 1)
    assert s1["loss_mask"].astype(int).tolist() == [1] * 3 + [0] * 2 + [0] + [1] * 2
    lp = nodes[1]["logprobs"] + [0.0] * 3 + nodes[3]["logprobs"]
    assert s1["rollout_log_probs"].tolist() == lp
    # branch 1 shares nodes 0-2: node 1 was trained in branch 0, so here it is context (prime-rl's
    # iter_trainable_branches) and the response starts in node 4
    tok2 = sum((nodes[j]["token_ids"] for j in (0, 1, 2, 4)), [])
    assert s2["tokens"].tolist() == tok2
    assert s2["response_length"] == 4  # node 4: 1 scaffold token, then 4 sampled
    assert s2["loss_mask"].astype(int).tolist() == [1] * 4
    assert s2["rollout_log_probs"].tolist() == nodes[4]["logprobs"]


def test_branch_without_trainable_tokens_is_no_sample():
    rng = random.Random(2)
    nodes = [gen.user(rng, 3), gen.assistant(rng, 0, 0, 2), gen.user(rng, 2, parent=1), gen.user(rng, 2, parent=1)]
    ep = gen.episode(rng, gen.task_record(2), "g", 1, [gen.trace(rng, gen.task_record(2), nodes)])
    (s,) = prime_rl.episode_samples(np, ep)  # the second leaf's branch only repeats node 1
    assert s["metadata"]["branch"] == 0


def test_agents_status_and_errors():
    rng = random.Random(3)
    task = gen.task_record(3)

    def tr(**kw):
        return gen.trace(rng, task, gen.single_turn(rng, 3, 1, 2), **kw)

    traces = [tr(agent="solver"), tr(agent="judge", trainable=False), tr(stop_condition="max_turns"),
              tr(finish_reasons=["length"]), tr(ok=False, stop_condition="error"),
              tr(ok=False, stop_condition=None, completed=False)]
    ep = gen.episode(rng, task, "g", 1, traces)
    samples = prime_rl.episode_samples(np, ep)
    assert [s["metadata"]["agent"] for s in samples] == ["solver", "agent", "agent", "agent", "agent"]
    assert [s["status"] for s in samples] == ["completed", "truncated", "truncated", "failed", "aborted"]
    assert [s["remove_sample"] for s in samples] == [False, False, False, True, True]
    assert len({s["rollout_id"] for s in samples}) == 1  # every trace of the episode: one rollout


def test_episode_without_traces_or_group():
    ep = forked_episode()
    ep["traces"] = []
    assert prime_rl.episode_samples(np, ep) == []
    ep = forked_episode()
    del ep["group"]
    assert all(s["group_index"] is None for s in prime_rl.episode_samples(np, ep))


# ---------------------------------------------------------------- discovery and subsets


def test_run_folder_reads_effective_by_default(tmp_path):
    files, skipped, notes = discover([str(RUN)])
    assert sorted((f.split, f.step, f.format) for f in files) == [("eval", 2, "prime_rl"), ("train", 1, "prime_rl"),
                                                                 ("train", 2, "prime_rl")]
    assert all("/effective/" in f.path for f in files)
    assert sum("`all` traces, skipped" in n for n in notes) == 3
    assert any("metrics.jsonl: a prime-rl run folder's metrics log" in n for n in notes)
    assert any("progress.pt: a prime-rl run folder's checkpoint" in n for n in notes)
    units, _, _ = plan_units([str(RUN)], copts(prime_rl_subset="all"))
    assert len(units) == 3 and all("/all/" in u.input.path for u in units)


def test_subset_option_is_recorded_only_when_not_the_default():
    assert "prime_rl_subset" not in copts().conversion_options()
    assert copts(prime_rl_subset="all").conversion_options()["prime_rl_subset"] == "all"
    r = runner.invoke(app, ["convert", str(RUN), "/nonexistent/out", "--prime-rl-subset", "some"])
    assert r.exit_code == 2


def test_convert_run_folder_without_a_flag_then_inspect_and_verify(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(RUN.parent.parent), str(out), "-q", "--workers", "1"])
    assert r.exit_code == 0, r.output
    rows = read_rows(out)
    assert {r["step"] for r in rows} == {1, 2} and len(rows) == 15
    r = runner.invoke(app, ["verify", str(out), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["inspect", str(RUN), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    # as written: step 1 has 6 trained episodes (one forked into two branches), step 2 has 7
    # (one of them two solver traces); 2 groups per step
    effective = [orjson.loads(line) for p in sorted(RUN.glob("rollouts/step_*/train/effective/traces.jsonl"))
                 for line in p.read_bytes().splitlines()]
    assert summary["rollouts"] == len(effective) == 13
    assert summary["prompt_groups"] == len({e["group"]["id"] for e in effective}) == 4
    assert summary["samples"] == 15 and summary["samples_per_rollout"] == {"1": 11, "2": 2}
    r = runner.invoke(app, ["inspect", str(RUN), "--json", "--group-by", "group_index"])
    shown = {tuple(g["key"]): g["rollouts"] for g in json.loads(r.stdout)["groups"]}
    written: dict[tuple, int] = {}
    for p in sorted(RUN.glob("rollouts/step_*/train/effective/traces.jsonl")):
        step = int(p.parts[-4].split("_")[1])
        for line in p.read_bytes().splitlines():
            key = (step, prime_rl.string_id(orjson.loads(line)["group"]["id"]))
            written[key] = written.get(key, 0) + 1
    assert shown == written  # a prompt group per (step, group id), a rollout per episode
    r = runner.invoke(app, ["inspect", str(RUN), "--json", "--prime-rl-subset", "all"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["rollouts"] == 14  # the errored episode is there, as a removed sample
    assert summary["status"].get("failed") == 1


# ---------------------------------------------------------------- bad input


def _break(kind: str, ep: dict) -> tuple[dict | bytes, str]:
    n = ep["traces"][0]["nodes"]
    if kind == "mask":
        n[1]["mask"] = n[1]["mask"][:-1]
        return ep, "traces[0].nodes[1].mask: expected 4 entries (one per token_ids), got 3"
    if kind == "mask_value":
        n[1]["mask"][0] = "yes"
        return ep, "traces[0].nodes[1].mask: expected a list of true/false"
    if kind == "logprobs":
        n[3]["logprobs"] = n[3]["logprobs"] + [-0.5]
        return ep, "traces[0].nodes[3].logprobs: expected 2 values (one per true entry of mask), got 3"
    if kind == "advantages":
        n[3]["advantages"] = [0.5]
        return ep, "traces[0].nodes[3].advantages: expected 2 values"
    if kind == "parent":
        n[2]["parent"] = 9
        return ep, "traces[0].nodes[2].parent: expected a node index in [0, 5), got 9"
    if kind == "cycle":
        n[0]["parent"] = 2
        return ep, "traces[0].nodes[0].parent: the parent links form a cycle"
    if kind == "token":
        n[0]["token_ids"][0] = -1
        return ep, "traces[0].nodes[0].token_ids: expected token ids in [0, 2147483647]"
    if kind == "reward":
        ep["traces"][0]["rewards"]["a"]["score"] = "high"
        return ep, "traces[0].rewards.a.score: expected a number, got str"
    if kind == "nan":  # Python's json writes NaN literally: read, then refused by the log-prob rules
        n[3]["logprobs"][0] = float("nan")
        return json.dumps(ep).encode() + b"\n", "rollout_log_probs: expected finite numbers, got nan at position"
    assert kind == "truncated"
    return gen.dumps([ep])[:-40], "invalid JSON"


@pytest.mark.parametrize("kind", ["mask", "mask_value", "logprobs", "advantages", "parent", "cycle", "token", "reward", "truncated",
                                  "nan"])
def test_bad_line_exits_3_naming_file_line_and_field(tmp_path, kind):
    rng = random.Random(5)
    good = [forked_episode(rng) for _ in range(3)]
    bad, message = _break(kind, forked_episode(rng))
    path = write_step(tmp_path / "run", 4, good)
    data = path.read_bytes().splitlines(keepends=True)
    line = bad if isinstance(bad, bytes) else gen.dumps([bad])
    path.write_bytes(b"".join(data[:2]) + line + (b"\n" if kind == "truncated" else b"") + data[2])
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}:line 3" in r.output and message in r.output, r.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_traces_file_cut_inside_its_last_line_is_still_being_written(tmp_path):
    """The trainer is writing the step: its last line has no newline and is not JSON yet
    (run/live.py): exit 3 naming it, nothing converted, whatever --on-error says."""
    rng = random.Random(5)
    path = write_step(tmp_path / "run", 4, [forked_episode(rng) for _ in range(3)])
    path.write_bytes(path.read_bytes()[:-40])
    for on_error in ("fail", "skip"):
        r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1", "--on-error", on_error])
        assert r.exit_code == 3, r.output
        assert f"{path}: still being written? it ends inside line 3" in r.output
        assert not (tmp_path / "out").exists()


def test_bad_line_is_rejected_under_skip_and_the_rest_converts(tmp_path):
    rng = random.Random(6)
    eps = [forked_episode(rng) for _ in range(3)]
    eps[1]["traces"][0]["nodes"][1]["mask"] = []
    write_step(tmp_path / "run", 2, eps)
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1", "-q",
                            "--on-error", "skip"])
    assert r.exit_code == 0, r.output
    assert len(read_rows(tmp_path / "out")) == 4  # two episodes of two branches each
    rejects = (tmp_path / "out" / "rejects.jsonl").read_text()
    assert "traces[0].nodes[1].mask" in rejects


# ---------------------------------------------------------------- byte ranges


def test_byte_ranges_give_the_same_samples_and_ids(tmp_path, monkeypatch):
    rng = random.Random(7)
    path = write_step(tmp_path / "run", 1, [forked_episode(rng) for _ in range(40)])
    (inp,), _, _ = discover([str(path)])
    from rollout_cli.inputs.jsonl import reader as jsonl

    orig = jsonl.split_ranges
    monkeypatch.setattr(jsonl, "split_ranges", lambda p, parts, min_bytes=0: orig(p, parts, 4096))
    parts = split_input(inp, 4)
    assert len(parts) == 4

    def read(start=0, end=None):
        reading = read_input(inp, start=start, end=end)
        chunks = list(reading)
        return [(n, rid, g) for c in chunks for n, rid, g in zip(c.numbers, c.values("rollout_id"), c.values("group_index"))], reading.info.lines

    whole, lines = read()
    pieces, offset = [], 0
    for a, b in parts:
        got, n = read(a, b)
        pieces += [(line + offset, rid, g) for line, rid, g in got]
        offset += n
    assert lines == offset == 40
    assert pieces == whole and len(whole) == 80
    assert [n for n, _, _ in whole] == [k // 2 + 1 for k in range(80)]  # a line's samples carry its number


# ---------------------------------------------------------------- the same rows as slime's JSONL


@st.composite
def rollouts(draw):
    """Episodes as plain facts: group, samples (prompt + alternating trainable / context spans),
    reward, how the trace ended; a rollout's samples share its prompt, as a branching trace's do."""
    out = []
    for e in range(draw(st.integers(1, 6))):
        group = draw(st.integers(0, 2))
        prompt = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
        end = draw(st.sampled_from(["completed", "completed", "truncated", "failed"]))
        samples = []
        for _ in range(draw(st.integers(1, 3))):
            spans = []
            for k in range(draw(st.integers(1, 3))):
                toks = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
                lps = [-round(0.125 * draw(st.integers(0, 8)), 3) for _ in toks]
                spans.append((k % 2 == 0, toks, lps))
            if not spans[-1][0]:
                spans.pop()
            samples.append(spans)
        out.append((e, group, prompt, end, draw(st.sampled_from([0.0, 0.5, 1.0])), samples))
    return out


def _as_prime_rl(facts) -> list[dict]:
    rng = random.Random(0)
    records = []
    for e, group, prompt, end, reward, samples in facts:
        nodes = [gen.node("user", "q", prompt)]
        for spans in samples:  # each sample a branch off the shared prompt node
            parent = 0
            for trainable, toks, lps in spans:
                nodes.append(gen.node("assistant" if trainable else "tool", "x", toks, parent=parent, sampled=trainable,
                                      mask=[trainable] * len(toks), logprobs=lps if trainable else []))
                parent = len(nodes) - 1
        tr = gen.trace(rng, gen.task_record(group), nodes, rewards={"r": {"score": reward, "weight": 1.0}},
                       ok=end != "failed", stop_condition="max_turns" if end == "truncated" else "agent_completed")
        records.append(gen.episode(rng, gen.task_record(group), f"group-{group}", 1, [tr], episode_id=f"ep{e}"))
    return records


def _as_slime(facts) -> list[dict]:
    rows = []
    for e, group, prompt, end, reward, samples in facts:
        for spans in samples:
            resp = [t for _, toks, _ in spans for t in toks]
            rows.append({
                "rollout_id": prime_rl.string_id(f"ep{e}"), "group_index": prime_rl.string_id(f"group-{group}"),
                "tokens": prompt + resp, "response_length": len(resp),
                "loss_mask": [int(tr) for tr, toks, _ in spans for _ in toks],
                "rollout_log_probs": [lp if tr else 0.0 for tr, toks, lps in spans for lp in (lps if tr else [0.0] * len(toks))],
                "reward": reward, "status": end, "remove_sample": end == "failed",
                "metadata": {"source_name": "gsm8k"},
            })
    return rows


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(facts=rollouts())
def test_same_rows_as_slime_jsonl(tmp_path, facts):
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    write_step(root / "run", 1, _as_prime_rl(facts))
    slime = root / "slime" / "step_1.jsonl"
    slime.parent.mkdir(parents=True)
    slime.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _as_slime(facts)))
    convert([str(root / "run")], str(root / "a"), copts())
    convert([str(slime)], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == sum(len(f[5]) for f in facts)
    assert a == b


def test_recognition_and_planning_import_no_numpy(tmp_path):
    import subprocess
    import sys

    code = ("import sys\n"
            "from rollout_cli.inputs.units import plan_units\n"
            "from rollout_cli.inputs.registry import split_input\n"
            "from rollout_cli.core.options import ConvertOptions\n"
            f"units, _, notes = plan_units([{str(RUN)!r}], ConvertOptions())\n"
            "assert [u.input.format for u in units] == ['prime_rl'] * 3, units\n"
            "[split_input(u.input, 4) for u in units]\n"
            "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_report_on_a_run_folder(tmp_path):
    r = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    counts = json.loads(r.stdout)["counts"]
    assert counts["train"]["rollouts"] == 13 and counts["train"]["samples"] == 15


def test_compressed_traces_are_read_whole(tmp_path):
    import gzip

    path = write_step(tmp_path / "run", 6, [forked_episode(random.Random(8)) for _ in range(3)])
    gz = path.with_name("traces.jsonl.gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    (inp,), _, _ = discover([str(tmp_path / "run")])
    assert (inp.format, inp.step, inp.split) == ("prime_rl", 6, "train")
    assert split_input(inp, 4) == [(0, None)]
    assert sum(len(c) for c in read_input(inp)) == 6


def test_a_named_file_is_read_whatever_the_subset(tmp_path):
    path = RUN / "rollouts" / "step_1" / "train" / "all" / "traces.jsonl"
    (f,), _, notes = discover([str(path)], options=copts())
    assert (f.format, f.step) == ("prime_rl", 1) and not notes
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(path), str(out), "-q", "--workers", "1"])
    assert r.exit_code == 0, r.output
    rows = read_rows(out)
    assert len(rows) == 8  # 7 trained samples and the errored episode's
    (failed,) = [r for r in rows if r["status"] == "failed"]
    assert not any(failed["loss_mask"]) and failed["source_name"] == "gsm8k"  # removed: trains nothing


def test_a_named_run_folder_file_that_is_no_rollout_data_is_left_out(tmp_path):
    files, _, notes = discover([str(RUN / "metrics.jsonl")], options=copts())
    assert files == [] and notes == [f"{RUN / 'metrics.jsonl'}: a prime-rl run folder's metrics log, not rollout data, skipped"]
    r = runner.invoke(app, ["convert", str(RUN / "metrics.jsonl"), str(tmp_path / "out")])
    assert r.exit_code == 2 and "no input files found" in r.output, r.output
