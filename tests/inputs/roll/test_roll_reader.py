"""ROLL's mock dumps read as plain data (no pickle code runs) and converted with no flag; bad
dumps exit 3 naming the file, the row and the field; the same rows as slime's JSONL where both
carry the same facts."""
from __future__ import annotations

import json
import pickle
import random
import shutil

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, copts, read_rows, sample_generator
from rollout_cli.cli.app import app
from rollout_cli.run.convert import convert

runner = CliRunner()
RUN = SAMPLE_DATA / "roll"


def _generator():
    return sample_generator("make_roll")


gen = _generator()


def test_convert_a_dump_folder_without_a_flag_then_verify_inspect_report(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(RUN), str(out), "-q", "--workers", "1"])
    assert r.exit_code == 0, r.output
    rows = read_rows(out)
    assert [sum(1 for r in rows if r["step"] == s) for s in (1, 2)] == [6, 12]  # step 2: a row per turn
    step2 = [r for r in rows if r["step"] == 2]
    assert [r["rollout_id"] for r in step2] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [r["group_index"] for r in step2] == [0] * 6 + [1] * 6
    assert {r["source_name"] for r in rows} == {"sokoban"}
    assert len(read_rows(out, "eval")) == 3
    r = runner.invoke(app, ["verify", str(out), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["inspect", str(RUN), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert summary["rollouts"] == 12 and summary["prompt_groups"] == 4 and summary["samples"] == 18
    r = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "r.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["train"]["rollouts"] == 12


def test_the_rows_hold_what_the_writer_put_in(tmp_path):
    rng = random.Random(2)
    r = gen.rollout(rng, "maze", 0, 0, 0, [(4, 2), (1, 3)], [0.5, 1.0])
    gen.write(tmp_path / "mock", 7, [r], 16)
    out = tmp_path / "out"
    convert([str(tmp_path / "mock")], str(out), copts())
    (row,) = read_rows(out)
    t0, t1 = r.turns
    assert row["tokens"] == t0.prompt + t0.response + t1.prompt + t1.response
    assert row["response_length"] == 6 and row["loss_mask"] == [1, 1, 0, 1, 1, 1]
    assert row["rollout_log_probs"] == [float(np.float32(v)) for v in t0.logprobs + [0.0] + t1.logprobs]
    assert row["raw_reward"] == 1.5 and row["step"] == 7


def test_audit_says_roll_has_no_trainer_dumps():
    import pytest

    from rollout_cli.auditing import audit_paths
    from rollout_cli.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as e:
        audit_paths([str(RUN)], [str(RUN)])
    assert "ROLL writes no trainer dump rollout-cli reads" in str(e.value)


def _convert_bad(tmp_path, path) -> str:
    r = runner.invoke(app, ["convert", str(path.parent.parent), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
    return r.output


def _one_step(tmp_path, **kw):
    rng = random.Random(3)
    rs = [gen.rollout(rng, "maze", 0, e, 0, [(4, 2)], [float(e)]) for e in range(3)]
    return gen.agentic_batch(rs, 8, **kw)


def test_a_bad_row_exits_3_naming_file_row_and_field(tmp_path):
    batch, nt = _one_step(tmp_path)
    batch["attention_mask"][1, 1] = 0
    path = gen._writers().write_roll(tmp_path / "mock", 1, batch, nt)
    out = _convert_bad(tmp_path, path)
    assert f"{path}:row 1" in out and "attention_mask: expected 1 on the real tokens then 0 (right padding)" in out


def test_a_batch_of_another_layout_exits_3_naming_the_field(tmp_path):
    batch, nt = _one_step(tmp_path)
    del nt["traj_id"]
    path = gen._writers().write_roll(tmp_path / "mock", 1, batch, nt)
    out = _convert_bad(tmp_path, path)
    assert f"{path}: traj_id: missing from non_tensor_batch" in out


def test_a_cut_off_dump_exits_3(tmp_path):
    batch, nt = _one_step(tmp_path)
    path = gen._writers().write_roll(tmp_path / "mock", 1, batch, nt)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    out = _convert_bad(tmp_path, path)
    assert f"{path}: not a readable pickle" in out


def test_no_code_of_the_file_runs(tmp_path):
    """A dump at ROLL's path whose pickle would call a function: refused, nothing run."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "mock" / "train" / "step_000001.pkl"
    path.parent.mkdir(parents=True)
    # the module name ROLL's files start with, then a global nothing allows
    path.write_bytes(pickle.dumps({"roll.distributed.scheduler.protocol": Evil()}, protocol=5))
    r = runner.invoke(app, ["convert", str(path), str(tmp_path / "out"), "--workers", "1"])
    assert r.exit_code == 3, r.output
    assert f"{path}: needs full unpickling (it references" in r.output and "open" in r.output
    assert not marker.exists()


# ---------------------------------------------------------------- the same facts as slime JSONL


@st.composite
def steps(draw):
    """Prompt groups of rollouts: turns of (prompt tokens, response tokens), a reward per turn."""
    rng = random.Random(draw(st.integers(0, 2**16)))
    rollouts = []
    for g in range(draw(st.integers(1, 3))):
        for e in range(draw(st.integers(1, 3))):
            turns = [(draw(st.integers(1, 3)), draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 2)))]
            rewards = [draw(st.sampled_from([0.0, 0.5, 1.0])) for _ in turns]
            rollouts.append(gen.rollout(rng, "maze", g, g * 3 + e, 0, turns, rewards))
    return rollouts, draw(st.booleans()), draw(st.booleans())


def _as_slime(rollouts, step_wise: bool, logprobs: bool) -> list[dict]:
    rows = []
    groups: dict[str, int] = {}
    for k, r in enumerate(rollouts):
        gid = groups.setdefault(r.traj_group_id, len(groups))
        parts = [[t] for t in r.turns] if step_wise else [r.turns]
        for turns in parts:
            toks = [t for tr in turns for t in tr.prompt + tr.response]
            p0 = len(turns[0].prompt)
            mask = [m for tr in turns for m in [0] * len(tr.prompt) + [1] * len(tr.response)][p0:]
            lps = [v for tr in turns for v in [0.0] * len(tr.prompt) + tr.logprobs][p0:]
            row = {"rollout_id": k, "group_index": gid, "tokens": toks, "response_length": len(toks) - p0,
                   "loss_mask": mask, "reward": sum(tr.reward for tr in turns), "status": "completed", "source": "maze"}
            if logprobs:
                row["rollout_log_probs"] = [float(np.float32(v)) for v in lps]
            rows.append(row)
    return rows


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(facts=steps())
def test_same_rows_as_slime_jsonl(tmp_path, facts):
    rollouts, step_wise, logprobs = facts
    root = tmp_path / "case"
    if root.exists():
        shutil.rmtree(root)
    gen.write(root / "mock", 4, rollouts, 16, step_wise=step_wise, logprobs=logprobs)
    slime = root / "slime" / "step_4.jsonl"
    slime.parent.mkdir(parents=True)
    slime.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _as_slime(rollouts, step_wise, logprobs)))
    convert([str(root / "mock")], str(root / "a"), copts())
    convert([str(slime)], str(root / "b"), copts())
    a, b = read_rows(root / "a"), read_rows(root / "b")
    assert len(a) == (sum(len(r.turns) for r in rollouts) if step_wise else len(rollouts))
    assert a == b


def test_sample_data_is_reproducible(tmp_path):
    gen.build(tmp_path)
    shipped = {p.relative_to(RUN): p.read_bytes() for p in RUN.rglob("*") if p.is_file()}
    made = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert shipped == made
    assert sum(len(b) for b in shipped.values()) < 100_000


def test_numpy_2_paths_read_as_numpy_1(tmp_path):
    """A dump pickled under numpy 2 (numpy._core) gives the rows a numpy 1 one does."""
    batch, nt = _one_step(tmp_path)
    w = gen._writers()
    w.write_roll(tmp_path / "one", 1, batch, nt, numpy1=True)
    w.write_roll(tmp_path / "two", 1, batch, nt, numpy1=False)
    assert b"numpy.core" in (tmp_path / "one" / "train" / "step_000001.pkl").read_bytes()
    assert b"numpy._core" in (tmp_path / "two" / "train" / "step_000001.pkl").read_bytes()
    convert([str(tmp_path / "one")], str(tmp_path / "a"), copts())
    convert([str(tmp_path / "two")], str(tmp_path / "b"), copts())
    assert read_rows(tmp_path / "a") == read_rows(tmp_path / "b") and len(read_rows(tmp_path / "a")) == 3


def test_a_bad_row_is_rejected_under_skip_and_the_rest_converts(tmp_path):
    batch, nt = _one_step(tmp_path)
    batch["response_mask"][2, 7] = True
    batch["attention_mask"][2, 7] = 0
    gen._writers().write_roll(tmp_path / "mock", 1, batch, nt)
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(tmp_path / "mock"), str(out), "--workers", "1", "-q", "--on-error", "skip"])
    assert r.exit_code == 0, r.output
    assert len(read_rows(out)) == 2
    assert "response_mask" in (out / "rejects.jsonl").read_text()
