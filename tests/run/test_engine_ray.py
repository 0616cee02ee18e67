"""The Ray engine: same bytes as the local engine, retries of lost tasks, errors as the local engine.

One local Ray (2 CPUs) serves the whole module; the engine finds it initialised and reuses it
(and must not shut it down). The init rules themselves are checked against a stand-in module.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import ray

from typer.testing import CliRunner  # noqa: E402

from conftest import SAMPLE_DATA, make_sample, write_jsonl  # noqa: E402
from rollout_cli.cli.app import app  # noqa: E402
from rollout_cli.run.engines import ray as ray_engine  # noqa: E402

runner = CliRunner()


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():  # someone else's Ray: use it, leave it running
        yield
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _no_leftover_faults():
    ray_engine._FAULTS.clear()
    yield
    ray_engine._FAULTS.clear()


def convert(inputs, out, *flags):
    return runner.invoke(app, ["convert", *map(str, inputs), str(out), "-q", *flags])


def output_files(out) -> dict[str, bytes]:
    """Every file a conversion commits, the manifest without its "volatile" key."""
    out = Path(out)
    res: dict[str, bytes] = {}
    for top in ("data", "eval", "mmap"):
        for p in sorted((out / top).rglob("*")):
            if p.is_file():
                res[str(p.relative_to(out))] = p.read_bytes()
    if (out / "rejects.jsonl").exists():
        res["rejects.jsonl"] = (out / "rejects.jsonl").read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("volatile")
    res["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    assert not (out / ".staging").exists()
    return res


def assert_same_output(a, b) -> None:
    fa, fb = output_files(a), output_files(b)
    assert sorted(fa) == sorted(fb)
    assert any(k.startswith("data/") for k in fa)
    for k in fa:
        assert fa[k] == fb[k], f"{k} differs between engines"


def attempts(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def big_jsonl(path: Path, n: int = 600, bad_line: int | None = None) -> Path:
    samples = [
        make_sample(index=i, group_index=i // 4, reward=float(i % 3), response_length=40 + i % 17, prompt_len=30, log_probs=True)
        for i in range(n)
    ]
    raw = {bad_line: b'{"tokens": [1, 2'} if bad_line is not None else None
    return write_jsonl(path, samples, raw)


@pytest.fixture
def split_small(monkeypatch):
    """Let the planner cut even small JSONL files into byte ranges (driver side only)."""
    from rollout_cli.inputs.jsonl import reader as jsonl

    orig = jsonl.split_ranges
    monkeypatch.setattr(jsonl, "split_ranges", lambda path, parts, min_bytes=0: orig(path, parts, 16 << 10))


@pytest.fixture
def submitted(monkeypatch):
    """Names of the stage functions the Ray engine was given, in order."""
    names: list[str] = []
    orig = ray_engine.RayEngine.submit

    def spy(self, fn, *args, **kw):
        names.append(fn.__name__ + (" (here)" if kw.get("here") else ""))
        return orig(self, fn, *args, **kw)

    monkeypatch.setattr(ray_engine.RayEngine, "submit", spy)
    return names


# ---------------------------------------------------------------- init rules (no real Ray)


class FakeRay:
    class exceptions:
        class RayError(Exception):
            pass

        class RayTaskError(RayError):
            pass

    def __init__(self, initialized: bool):
        self.initialized = initialized
        self.init_calls: list[dict] = []
        self.pythonpath_at_init: str | None = None
        self.shutdowns = 0

    def is_initialized(self):
        return self.initialized

    def init(self, **kw):
        self.init_calls.append(kw)
        self.pythonpath_at_init = os.environ.get("PYTHONPATH")
        self.initialized = True

    def shutdown(self):
        self.shutdowns += 1
        self.initialized = False

    def remote(self, fn):
        class _Task:
            def options(self, **kw):
                self.opts = kw
                return self

        return _Task()


def test_init_starts_a_local_ray_and_stops_it(monkeypatch):
    fake = FakeRay(initialized=False)
    monkeypatch.setattr(ray_engine, "_import_ray", lambda: fake)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    eng = ray_engine.RayEngine(address=None, workers=2)
    root = str(Path(ray_engine.__file__).resolve().parents[3])
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join([root, "/elsewhere"])}}
    assert fake.init_calls == [dict(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                                    runtime_env=runtime_env)]
    assert fake.pythonpath_at_init == "/elsewhere"  # this process's environment is left as it is
    assert eng._task.opts["max_retries"] == 3 and eng._task.opts["retry_exceptions"] == [OSError]
    eng.shutdown()
    assert fake.shutdowns == 1


def test_init_reuses_a_running_ray_and_leaves_it(monkeypatch):
    fake = FakeRay(initialized=True)
    monkeypatch.setattr(ray_engine, "_import_ray", lambda: fake)
    eng = ray_engine.RayEngine(address=None, workers=8)
    assert fake.init_calls == []
    eng.shutdown()
    assert fake.shutdowns == 0 and fake.initialized


def test_init_connects_to_an_address(monkeypatch):
    fake = FakeRay(initialized=False)
    monkeypatch.setattr(ray_engine, "_import_ray", lambda: fake)
    monkeypatch.setattr(ray_engine, "_check_reachable", lambda address: None)
    monkeypatch.setenv(ray_engine.MAX_RETRIES_ENV, "5")
    eng = ray_engine.RayEngine(address="10.0.0.1:6379", workers=2)
    assert fake.init_calls == [dict(address="10.0.0.1:6379", log_to_driver=False)]
    assert eng._task.opts["max_retries"] == 5
    eng.shutdown()  # our connection: disconnect (the cluster itself keeps running)
    assert fake.shutdowns == 1


def test_unreachable_address_is_a_usage_error(monkeypatch, tmp_path):
    import socket

    fake = FakeRay(initialized=False)
    monkeypatch.setattr(ray_engine, "_import_ray", lambda: fake)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ray_engine.UsageError, match=f"--ray-address 127.0.0.1:{port}: cannot connect"):
        ray_engine.RayEngine(address=f"127.0.0.1:{port}", workers=2)
    assert fake.init_calls == []  # refused before Ray's own minutes of retrying

    def refuse(**kw):
        raise ConnectionError("could not reach the GCS")

    fake.init = refuse
    monkeypatch.setattr(ray_engine, "_check_reachable", lambda address: None)
    r = convert([SAMPLE_DATA / "jsonl" / "rollout_data"], tmp_path / "out", "--engine", "ray", "--ray-address", "10.0.0.9:6379")
    assert r.exit_code == 2 and "error: --ray-address 10.0.0.9:6379: cannot connect: could not reach the GCS" in r.stderr


# ---------------------------------------------------------------- byte identity


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_sample_data_identical_to_local(local_ray, tmp_path, fmt, submitted):
    src = SAMPLE_DATA / fmt / "rollout_data"
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([src], a, "--engine", "local", "--workers", "2", "--shards", "2")
    assert r.exit_code == 0, r.output
    r = convert([src], b, "--engine", "ray", "--workers", "2", "--shards", "2")
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)
    assert submitted.count("finish_unit") == 4  # three train steps and one eval step, all as Ray tasks
    assert ray.is_initialized()  # the engine reused the module's Ray and left it running


def test_byte_ranges_and_rejects_identical_to_local(local_ray, tmp_path, split_small, submitted):
    src = tmp_path / "in"
    big_jsonl(src / "step_7.jsonl", bad_line=250)
    big_jsonl(src / "step_8.jsonl", n=300)
    flags = ["--workers", "4", "--shards", "3", "--on-error", "skip", "--compression", "none"]
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([src], a, "--engine", "local", *flags)
    assert r.exit_code == 0, r.output
    r = convert([src], b, "--engine", "ray", *flags)
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)
    assert (b / "rejects.jsonl").exists()
    assert submitted.count("parse_part") >= 3  # at least one step read as byte ranges in parallel


def test_stdin_is_parsed_in_the_driver(local_ray, tmp_path, submitted):
    data = (SAMPLE_DATA / "jsonl" / "rollout_data" / "2.jsonl").read_bytes()
    a, b = tmp_path / "local", tmp_path / "ray"
    r = runner.invoke(app, ["convert", "-", str(a), "--step", "2", "-q"], input=data)
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["convert", "-", str(b), "--step", "2", "-q", "--engine", "ray"], input=data)
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)
    assert json.loads((b / "manifest.json").read_text())["counts"]["rows"] == 15
    assert submitted == ["parse_part (here)", "finish_unit"]


# ---------------------------------------------------------------- retries


def test_worker_crash_is_retried(local_ray, tmp_path):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    a, b = tmp_path / "local", tmp_path / "ray"
    assert convert([src], a, "--workers", "2").exit_code == 0
    parse_marker, finish_marker = tmp_path / "parse.attempts", tmp_path / "finish.attempts"
    ray_engine._FAULTS["parse_part"] = {"marker": str(parse_marker), "action": "exit", "times": 1}
    ray_engine._FAULTS["finish_unit"] = {"marker": str(finish_marker), "action": "exit", "times": 1}
    r = convert([src], b, "--engine", "ray", "--workers", "2")
    assert r.exit_code == 0, r.output
    assert attempts(parse_marker) == 2 and attempts(finish_marker) == 2  # killed once, then done
    assert_same_output(a, b)


def test_io_fault_is_retried(local_ray, tmp_path):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    a, b = tmp_path / "local", tmp_path / "ray"
    assert convert([src], a, "--workers", "2").exit_code == 0
    marker = tmp_path / "finish.attempts"
    ray_engine._FAULTS["finish_unit"] = {"marker": str(marker), "action": "oserror", "times": 2}
    r = convert([src], b, "--engine", "ray", "--workers", "2")
    assert r.exit_code == 0, r.output
    assert attempts(marker) == 3
    assert_same_output(a, b)


def test_step_that_keeps_failing_is_named_and_nothing_committed(local_ray, tmp_path, monkeypatch):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    out = tmp_path / "ray"
    marker = tmp_path / "finish.attempts"
    monkeypatch.setenv(ray_engine.MAX_RETRIES_ENV, "1")
    ray_engine._FAULTS["finish_unit"] = {"marker": str(marker), "action": "exit", "times": 99}
    r = convert([src], out, "--engine", "ray", "--workers", "2")
    assert r.exit_code == 1, r.output
    assert attempts(marker) == 2
    assert re.search(r"error: finish of (train|eval) step \d+ \(.+\.jsonl\) failed \(after 2 attempts\): WorkerCrashedError", r.stderr), r.stderr
    assert "Traceback" not in r.output
    assert not (out / "manifest.json").exists() and not (out / "data").exists()


def test_persistent_io_fault_is_named(local_ray, tmp_path, monkeypatch):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    out = tmp_path / "ray"
    marker = tmp_path / "parse.attempts"
    monkeypatch.setenv(ray_engine.MAX_RETRIES_ENV, "1")
    ray_engine._FAULTS["parse_part"] = {"marker": str(marker), "action": "oserror", "times": 99}
    r = convert([src], out, "--engine", "ray", "--workers", "2", "--json")
    assert r.exit_code == 1, r.output
    assert attempts(marker) == 2
    err = json.loads(r.stdout.strip().splitlines()[-1])
    assert err["error"] == "StepFailedError" and err["exit_code"] == 1
    assert re.match(r"parse of (train|eval) step \d+ \(.+\.jsonl\) failed \(after 2 attempts\): OSError: .*injected I/O fault", err["message"])
    assert not (out / "manifest.json").exists()


# ---------------------------------------------------------------- invalid input: not retried, same report


def _same_failure(tmp_path, src, *flags):
    a = convert([src], tmp_path / "local", "--workers", "2", *flags)
    marker = tmp_path / "finish.attempts"
    ray_engine._FAULTS["finish_unit"] = {"marker": str(marker), "action": "count"}
    b = convert([src], tmp_path / "ray", "--engine", "ray", "--workers", "2", *flags)
    assert a.exit_code == b.exit_code == 3, (a.output, b.output)
    assert b.stderr == a.stderr
    assert b.stdout == a.stdout
    assert attempts(marker) == 1  # an InvalidInputError is never retried
    assert not (tmp_path / "ray" / "manifest.json").exists()
    return b


def test_bad_jsonl_line_reported_as_local(local_ray, tmp_path):
    src = tmp_path / "in"
    write_jsonl(src / "step_4.jsonl", [make_sample(index=i, group_index=i // 2) for i in range(6)], raw_lines={3: b'{"tokens": [1, 2'})
    b = _same_failure(tmp_path, src)
    assert "step_4.jsonl:line 4" in b.stderr and "invalid JSON" in b.stderr
    (tmp_path / "json").mkdir()
    b = _same_failure(tmp_path / "json", src, "--json")
    assert json.loads(b.stdout)["error"] == "InvalidInputError"


def test_invalid_input_raised_inside_a_task_reported_as_local(local_ray, tmp_path):
    src = tmp_path / "in"
    write_jsonl(src / "step_5.jsonl", [make_sample(index=i, group_index=None) for i in range(4)])
    b = _same_failure(tmp_path, src)
    assert "group_index: missing" in b.stderr


def test_nemo_rl_step_in_byte_ranges_identical_to_local(local_ray, tmp_path, split_small, submitted):
    """Prompt groups are keyed by their tokens in each range and numbered at the step's finish."""
    import random

    from framework_dumps import gen

    src = tmp_path / "logs" / "exp_001"
    rows = gen.random_conversations(random.Random(3), 40, 4, multi_turn=True)
    gen.write_batched_jsonl(gen.nemo_rl_batch(rows), src / "train_data_step2.jsonl")
    flags = ["--workers", "4", "--shards", "2", "--compression", "none"]
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([tmp_path / "logs"], a, "--engine", "local", *flags)
    assert r.exit_code == 0, r.output
    r = convert([tmp_path / "logs"], b, "--engine", "ray", *flags)
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)
    assert submitted.count("parse_part") >= 2  # the step was read in byte ranges
    import pyarrow.parquet as pq

    groups = [g for p in sorted((b / "data").rglob("*.parquet")) for g in pq.read_table(p).column("group_index").to_pylist()]
    assert sorted(set(groups)) == list(range(40))


def test_prime_rl_run_identical_to_local(local_ray, tmp_path, split_small, submitted):
    """A prime-rl step read as byte ranges on Ray tasks: the ids derived from episode and group
    ids do not depend on which part a line is in."""
    import importlib.util
    import random

    spec = importlib.util.spec_from_file_location("make_prime_rl", SAMPLE_DATA / "make_prime_rl.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rng = random.Random(11)
    records = []
    for g in range(15):
        task, gid = gen.task_record(g), gen.group_uuid(rng)
        for m in range(4):
            nodes = gen.single_turn(rng, 40, 2, 30 + m)
            records.append(gen.episode(rng, task, gid, 3, [gen.trace(rng, task, nodes, rewards={"r": {"score": float(m % 2), "weight": 1.0}})]))
    path = tmp_path / "in" / "rollouts" / "step_3" / "train" / "effective" / "traces.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(gen.dumps(records))
    flags = ["--workers", "4", "--shards", "2"]
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([tmp_path / "in"], a, "--engine", "local", *flags)
    assert r.exit_code == 0, r.output
    r = convert([tmp_path / "in"], b, "--engine", "ray", *flags)
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)
    assert submitted.count("parse_part") >= 3  # read as byte ranges in parallel
