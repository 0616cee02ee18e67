"""SkyRL's export folder as its trainer leaves it: converted with no flag, inspected, reported,
verified, audited and converted on Ray; bad files exit 3 naming file, row and field; and the
same facts written by SkyRL's writer and as slime JSONL give the same train rows."""
from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, converted_locally_and_on_ray, copts, read_rows, sample_generator
from rollout_cli.cli.app import app
from rollout_cli.run.convert import convert

from pickled_dumps import writers  # noqa: E402  (registers pickled_writers, which the generator imports)
gen = sample_generator("make_skyrl")

runner = CliRunner()
RUN = SAMPLE_DATA / "skyrl"
FACT_COLUMNS = ("step", "rollout_id", "sample_index", "group_index", "tokens", "response_length", "total_length",
                "loss_mask", "status", "truncated", "remove_sample", "rollout_log_probs", "rollout_mask_sum",
                "group_mask_sum", "group_rollouts", "step_rollouts", "step_samples", "step_groups")


def test_sample_data_is_reproducible(tmp_path):
    written = gen.build(tmp_path)
    assert [p.relative_to(tmp_path) for p in written] == [p.relative_to(RUN) for p in sorted(RUN.rglob("*.pkl"))]
    assert all(p.read_bytes() == (RUN / p.relative_to(tmp_path)).read_bytes() for p in written)


def test_the_export_folder_converts_without_a_flag(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(RUN), str(out), "--workers", "1", "-v"])
    assert r.exit_code == 0, r.output
    assert "global_step_2_training_input.pkl: 2 trailing row(s) that pad the batch" in r.output
    rows = read_rows(out)
    assert [(s, sum(r["step"] == s for r in rows)) for s in (1, 2)] == [(1, 12), (2, 6)]  # step 2's 2 pad rows left out
    tensors, meta = gen.steps()[1]
    first = rows[0] if rows[0]["step"] == 1 and rows[0]["rollout_id"] == 0 else next(
        r for r in rows if r["step"] == 1 and r["rollout_id"] == 0)
    real = tensors["attention_mask"][0] == 1
    assert first["tokens"] == tensors["sequences"][0][real].tolist()
    assert first["tokens"][-1] == gen.EOS  # the response's end, though it is the pad id as well
    assert all(r["reward"] is None and r["raw_reward"] is None for r in rows)  # popped before the dump
    assert {(r["step"], r["group_index"]) for r in rows} == {(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)}
    tool = [r for r in rows if r["step"] == 2 and 0 in r["loss_mask"]]
    assert tool and all(lp == 0.0 for r in tool for lp, m in zip(r["rollout_log_probs"], r["loss_mask"]) if m == 0)
    r = runner.invoke(app, ["verify", str(out), "-q"])
    assert r.exit_code == 0, r.output


def test_inspect_and_report_say_rewards_are_not_recorded(tmp_path):
    r = runner.invoke(app, ["inspect", str(RUN), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["samples"] == 18 and summary["rollouts"] == 18 and summary["prompt_groups"] == 5
    r = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["train"]["samples"] == 18


def test_audit_says_there_is_no_train_side(tmp_path):
    r = runner.invoke(app, ["audit", str(RUN), "--train", str(RUN)])
    assert r.exit_code == 3, r.output
    assert "SkyRL's dump holds the trainer's batch" in r.output


def test_a_renamed_dump_is_found_by_content_or_forced(tmp_path):
    src = RUN / "dumped_data" / "global_step_1_training_input.pkl"
    (tmp_path / "a").mkdir()
    shutil.copy(src, tmp_path / "a" / "batch_7.pkl")
    r = runner.invoke(app, ["convert", str(tmp_path / "a"), str(tmp_path / "out"), "--workers", "1", "-q"])
    assert r.exit_code == 0, r.output
    assert {r["step"] for r in read_rows(tmp_path / "out")} == {7}
    shutil.copy(src, tmp_path / "global_step_9.pt")  # a .pt by its ending: read as SkyRL's when forced
    r = runner.invoke(app, ["convert", str(tmp_path / "global_step_9.pt"), str(tmp_path / "out2"), "--workers", "1",
                            "-q", "--input-format", "skyrl"])
    assert r.exit_code == 0, r.output
    assert len(read_rows(tmp_path / "out2", step=9)) == 12


# ---------------------------------------------------------------- bad input


def _write(tmp_path, tensors, meta):
    return writers.write_skyrl(tmp_path / "run", 3, tensors, meta)


def test_a_bad_row_exits_3_naming_file_row_and_field(tmp_path):
    tensors, meta = gen.steps()[1]
    tensors["attention_mask"][4, -1] = 0
    path = _write(tmp_path, tensors, meta)
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}:row 4: attention_mask: expected left padding" in r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
    r = runner.invoke(app, ["convert", str(tmp_path / "run"), str(tmp_path / "out"), "--workers", "1",
                            "--on-error", "skip", "-q"])
    assert r.exit_code == 0 and len(read_rows(tmp_path / "out")) == 11


@pytest.mark.parametrize("kind, words", [
    ("boundaries", "metadata.policy_prompt_boundaries: missing"),
    ("shape", "loss_mask: expected a [12, 8] tensor"),
    ("class", "expected a pickled SkyRL TrainingInputBatch (trainer.dump_data_batch), got"),
    ("global", "needs full unpickling (it references posix.system)"),
    ("cut", "not a readable pickle"),
])
def test_a_bad_file_exits_3_naming_it_and_the_field(tmp_path, kind, words):
    tensors, meta = gen.steps()[1]
    if kind == "boundaries":
        del meta["policy_prompt_boundaries"]
    elif kind == "shape":
        tensors["loss_mask"] = tensors["loss_mask"][:, 1:]
    path = _write(tmp_path, tensors, meta)
    if kind == "class":
        path.write_bytes(pickle.dumps({"batch_dict": {}}, protocol=4))
    elif kind == "global":
        import os
        path.write_bytes(pickle.dumps(os.system, protocol=4))
    elif kind == "cut":
        path.write_bytes(path.read_bytes()[:-100])
    width = tensors["response_mask"].shape[1]
    words = words.replace("[12, 8]", f"[12, {width}]")
    r = runner.invoke(app, ["convert", str(path), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert str(path) in r.output and words in r.output, r.output


# ---------------------------------------------------------------- the same rows as slime's JSONL


@st.composite
def facts(draw):
    """Prompt groups of rollouts: prompt, response spans (generated or tool), log-probs
    (float32-exact), as SkyRL's generator hands them to the trainer; the data-parallel size."""
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        prompt = draw(st.lists(st.integers(0, 999), min_size=1, max_size=5))
        rollouts = []
        for _ in range(draw(st.integers(1, 3))):
            resp, mask, lps = [], [], []
            for k in range(draw(st.integers(1, 3))):
                toks = draw(st.lists(st.integers(0, 999), min_size=1, max_size=4))
                resp += toks
                mask += [1 - k % 2] * len(toks)
                lps += [-0.125 * draw(st.integers(0, 16)) if k % 2 == 0 else 0.0 for _ in toks]
            rollouts.append((resp, mask, lps))
        groups.append((prompt, rollouts))
    return groups, draw(st.integers(1, 4)), draw(st.integers(0, 999))


def _as_slime(groups) -> list[dict]:
    rows, i = [], 0
    for g, (prompt, rollouts) in enumerate(groups):
        for resp, mask, lps in rollouts:
            rows.append({"rollout_id": i, "index": i, "group_index": g, "tokens": prompt + resp,
                         "response_length": len(resp), "loss_mask": mask, "rollout_log_probs": lps,
                         "reward": 0.0, "status": "completed"})
            i += 1
    return rows


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=facts())
def test_same_rows_as_slime_jsonl(tmp_path, case):
    groups, dp, pad_id = case
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    tensors, meta = gen.layout(groups, pad_id=pad_id, dp_size=dp)
    writers.write_skyrl(root / "run", 5, tensors, meta)
    slime = root / "slime" / "step_5.jsonl"
    slime.parent.mkdir(parents=True)
    slime.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _as_slime(groups)))
    convert([str(root / "run")], str(root / "a"), copts())
    convert([str(slime)], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == sum(len(r) for _, r in groups)
    assert [{k: r[k] for k in FACT_COLUMNS} for r in a] == [{k: r[k] for k in FACT_COLUMNS} for r in b]
    assert all(r["reward"] is None for r in a)
    assert np.isclose(sum(len(r["tokens"]) for r in a), sum(len(p) + len(x) for p, rs in groups for x, _, _ in rs))


# ---------------------------------------------------------------- Ray


def test_converts_on_ray_as_locally(local_ray, tmp_path):
    local, ray = converted_locally_and_on_ray(RUN, tmp_path)
    assert local == ray
    assert len(ray) == 18
