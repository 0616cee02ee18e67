"""verl's rollout-skip cache as its writer leaves it: converted with no flag, inspected, reported,
audited and converted on Ray; bad files exit 3 naming file, row and field; and the same facts
written by verl's writer and as slime JSONL give the same train rows."""
from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, copts, read_rows
from rollout_cli.cli.app import app
from rollout_cli.run.convert import convert

if str(SAMPLE_DATA) not in sys.path:
    sys.path.insert(0, str(SAMPLE_DATA))
_spec = importlib.util.spec_from_file_location("make_verl", SAMPLE_DATA / "make_verl.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
import pickled_writers as writers  # noqa: E402

runner = CliRunner()
RUN = SAMPLE_DATA / "verl"
FACT_COLUMNS = ("step", "rollout_id", "sample_index", "group_index", "tokens", "response_length", "total_length",
                "loss_mask", "status", "truncated", "remove_sample", "rollout_log_probs", "rollout_mask_sum",
                "group_mask_sum", "group_rollouts", "step_rollouts", "step_samples", "step_groups")
FOLDER = dict(gbs=gen.GBS, n=gen.N, prompt_length=gen.P, response_length=gen.R)


def test_sample_data_is_reproducible(tmp_path):
    written = gen.build(tmp_path)
    assert sorted(p.relative_to(tmp_path) for p in written) == sorted(p.relative_to(RUN) for p in RUN.rglob("*") if p.is_file())
    assert all(p.read_bytes() == (RUN / p.relative_to(tmp_path)).read_bytes() for p in written)


def test_the_cache_folder_converts_without_a_flag(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(RUN), str(out), "--workers", "1", "-v"])
    assert r.exit_code == 0, r.output
    assert r.output.count("verl rollout-skip step metadata (the step's number), not samples, skipped") == 2
    rows = read_rows(out)
    by_step = {s: [r for r in rows if r["step"] == s] for s in (2, 4)}
    assert [len(v) for v in by_step.values()] == [8, 8]
    for step, (tensors, non_tensor, _) in gen.steps().items():
        got = sorted(by_step[step], key=lambda r: r["rollout_id"])
        for i, row in enumerate(got):
            p = tensors["prompts"][i][tensors["attention_mask"][i, :gen.P] == 1].tolist()
            resp = tensors["responses"][i][tensors["attention_mask"][i, gen.P:] == 1].tolist()
            assert row["tokens"] == p + resp and row["response_length"] == len(resp)
            assert row["loss_mask"] == tensors["response_mask"][i, :len(resp)].tolist()
            assert row["group_index"] == i // gen.N
            assert row["weight_versions"] == [str(step - 1)]
        assert sum(r["status"] == "truncated" for r in got) == 2  # each prompt's first rollout fills R
    assert all(r["raw_reward"] is None for r in by_step[2])  # no rm_scores: not recorded
    raw = sorted(by_step[4], key=lambda r: r["rollout_id"])
    assert [r["raw_reward"] for r in raw] == gen.steps()[4][0]["rm_scores"].sum(axis=1).tolist()
    r = runner.invoke(app, ["verify", str(out), "-q"])
    assert r.exit_code == 0, r.output


def test_inspect_and_report(tmp_path):
    r = runner.invoke(app, ["inspect", str(RUN), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["samples"] == 16 and summary["rollouts"] == 16 and summary["prompt_groups"] == 4
    r = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["train"]["samples"] == 16


def test_audit_says_there_is_no_train_side():
    r = runner.invoke(app, ["audit", str(RUN), "--train", str(RUN)])
    assert r.exit_code == 3, r.output
    assert "the rollout-skip cache holds the agent loop's output only" in r.output


# ---------------------------------------------------------------- bad input


def test_a_bad_row_exits_3_naming_file_row_and_field(tmp_path):
    tensors, non_tensor, meta_info = gen.steps()[2]
    tensors["attention_mask"][5, gen.P] = 0  # a hole at the response's start
    path = writers.write_verl(tmp_path / "cache", 2, tensors, non_tensor, meta_info, **FOLDER)
    r = runner.invoke(app, ["convert", str(tmp_path / "cache"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}:row 5: attention_mask: expected a right-padded response" in r.output


@pytest.mark.parametrize("kind, words", [
    ("groups", "uid: missing, and the 8 rows are not whole groups of N=3"),
    ("nofolder", "uid: missing, and the file is not in a `GBS{gbs}_N{n}_in{P}_out{R}` folder"),
    ("missing", "responses: missing"),
    ("class", "expected a pickled verl DataProto (the rollout-skip cache), got dict"),
    ("global", "references posix.system, which no verl rollout-skip cache holds: not read"),
    ("cut", "not a readable verl DataProto"),
])
def test_a_bad_file_exits_3_naming_it_and_the_field(tmp_path, kind, words):
    tensors, non_tensor, meta_info = gen.steps()[2]
    folder = dict(FOLDER, n=3) if kind == "groups" else FOLDER
    if kind == "missing":
        del tensors["responses"]
    path = writers.write_verl(tmp_path / "cache", 2, tensors, non_tensor, meta_info, **folder)
    if kind == "nofolder":
        path = shutil.copy(path, tmp_path / "gen_batch.dp")
    elif kind == "class":
        path.write_bytes(pickle.dumps({"batch": None}))
    elif kind == "global":
        path.write_bytes(pickle.dumps(os.system))
    elif kind == "cut":
        path.write_bytes(path.read_bytes()[:-64])
    args = ["convert", str(path), str(tmp_path / "out"), "--workers", "1"] + (["--step", "2"] if kind == "nofolder" else [])
    r = runner.invoke(app, args)
    assert r.exit_code == 3, r.output
    assert str(path) in r.output and words in r.output, r.output


# ---------------------------------------------------------------- the same rows as slime's JSONL


@st.composite
def facts(draw):
    """Prompt groups of N rollouts each (the folder's N): prompt, response spans (generated or
    tool), float32-exact log-probs, a score; and whether the batch carries uids and rm_scores."""
    n = draw(st.integers(1, 3))
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        prompt = draw(st.lists(st.integers(1, 999), min_size=1, max_size=5))
        rollouts = []
        for _ in range(n):
            resp, mask, lps = [], [], []
            for k in range(draw(st.integers(1, 3))):
                toks = draw(st.lists(st.integers(0, 999), min_size=1, max_size=3))
                resp += toks
                mask += [1 - k % 2] * len(toks)
                lps += [-0.125 * draw(st.integers(0, 16)) if k % 2 == 0 else 0.0 for _ in toks]
            rollouts.append((resp, mask, lps, draw(st.sampled_from([0.0, 0.5, 1.0]))))
        groups.append((prompt, rollouts))
    return groups, n, draw(st.booleans()), draw(st.booleans())


def _as_slime(groups, width: int, scores: bool) -> list[dict]:
    rows, i = [], 0
    for g, (prompt, rollouts) in enumerate(groups):
        for resp, mask, lps, score in rollouts:
            rows.append({"rollout_id": i, "index": i, "group_index": g, "tokens": prompt + resp,
                         "response_length": len(resp), "loss_mask": mask, "rollout_log_probs": lps,
                         "reward": score if scores else 0.0, "weight_versions": ["4"],
                         "status": "truncated" if len(resp) == width else "completed"})
            i += 1
    return rows


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=facts())
def test_same_rows_as_slime_jsonl(tmp_path, case):
    groups, n, uids, scores = case
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    P = max(len(p) for p, _ in groups) + 1
    R = max(len(r[0]) for _, rs in groups for r in rs)
    tensors, non_tensor, meta_info = gen.layout(groups, P, R, 5, uids=uids, scores=scores)
    writers.write_verl(root / "cache", 5, tensors, non_tensor, meta_info, gbs=len(groups), n=n, prompt_length=P,
                       response_length=R)
    slime = root / "slime" / "step_5.jsonl"
    slime.parent.mkdir(parents=True)
    slime.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _as_slime(groups, R, scores)))
    convert([str(root / "cache")], str(root / "a"), copts())
    convert([str(slime)], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == n * len(groups)
    columns = FACT_COLUMNS + (("reward", "raw_reward") if scores else ()) + ("weight_versions",)
    assert [{k: r[k] for k in columns} for r in a] == [{k: r[k] for k in columns} for r in b]


# ---------------------------------------------------------------- Ray


def test_converts_on_ray_as_locally(tmp_path):
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for engine in ("local", "ray"):
            r = runner.invoke(app, ["convert", str(RUN), str(tmp_path / engine), "--engine", engine, "--workers", "2", "-q"])
            assert r.exit_code == 0, r.output
    finally:
        if started:
            ray.shutdown()
    assert read_rows(tmp_path / "local") == read_rows(tmp_path / "ray")
    assert len(read_rows(tmp_path / "ray")) == 16
