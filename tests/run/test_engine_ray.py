"""The Ray engine: same bytes as the local engine, retries of lost tasks, errors as the local engine.

The test process's one local Ray (conftest's `local_ray`, 2 CPUs) serves the module; the engine
finds it initialised and reuses it (and must not shut it down). The init rules themselves are
checked against a stand-in module.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import ray
from pyarrow import fs as pafs

from typer.testing import CliRunner  # noqa: E402

from conftest import SAMPLE_DATA, make_sample, sample_generator, write_jsonl  # noqa: E402
from rollout_cli.cli.app import app  # noqa: E402
from rollout_cli.run.engines import ray as ray_engine  # noqa: E402

runner = CliRunner()


# ---------------------------------------------------------------- helpers


# Fault injection, from the tests alone: {function name: {"marker": path, "action": "exit" |
# "oserror" | "count", "times": n}}. The first task submitted to a Ray worker for that function
# runs it wrapped (and the spec is removed here): every attempt of that task appends a line to
# `marker`, and the first `times` attempts then kill their worker process (`exit`) or raise
# OSError(EIO) (`oserror`). `count` only records attempts.
FAULTS: dict[str, dict] = {}


def _faulty(fn, fault: dict):
    """`fn` preceded by the fault `fault`. A function local to this one, so that Ray's
    cloudpickle ships it by value (its workers cannot import the tests)."""
    def run(*args):
        import errno
        import os

        with open(fault["marker"], "a") as f:
            f.write(f"{os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())
        with open(fault["marker"]) as f:
            attempt = sum(1 for _ in f)
        if attempt <= fault.get("times", 1):
            action = fault.get("action", "exit")
            if action == "exit":
                os._exit(1)
            if action == "oserror":
                raise OSError(errno.EIO, "injected I/O fault (test hook)")
        return fn(*args)

    run.__name__ = fn.__name__  # the engine's label for an unlabelled task; not __qualname__ (by value)
    return run


@pytest.fixture(autouse=True)
def _faults(monkeypatch):
    """RayEngine.submit wrapping the first remote task of each function named in FAULTS."""
    FAULTS.clear()
    submit = ray_engine.RayEngine.submit

    def submit_with_fault(self, fn, *args, here: bool = False, **kw):
        fault = None if here else FAULTS.pop(getattr(fn, "__name__", ""), None)
        return submit(self, _faulty(fn, fault) if fault else fn, *args, here=here, **kw)

    monkeypatch.setattr(ray_engine.RayEngine, "submit", submit_with_fault)
    yield
    FAULTS.clear()


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

    def put(self, value):
        return value

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


@pytest.mark.parametrize("fmt, units", [("pipelinerl", 4), ("open_instruct", 4)])
def test_a_run_of_several_steps_per_file_identical_to_local(local_ray, tmp_path, fmt, units, submitted):
    """A format whose files each hold several steps: each step (its byte ranges) is a Ray task."""
    src = SAMPLE_DATA / fmt
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([src], a, "--engine", "local", "--workers", "2")
    assert r.exit_code == 0, r.output
    r = convert([src], b, "--engine", "ray", "--workers", "2")
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)
    assert submitted.count("finish_unit") == units


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
    FAULTS["parse_part"] = {"marker": str(parse_marker), "action": "exit", "times": 1}
    FAULTS["finish_unit"] = {"marker": str(finish_marker), "action": "exit", "times": 1}
    r = convert([src], b, "--engine", "ray", "--workers", "2")
    assert r.exit_code == 0, r.output
    assert attempts(parse_marker) == 2 and attempts(finish_marker) == 2  # killed once, then done
    assert_same_output(a, b)


def test_io_fault_is_retried(local_ray, tmp_path):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    a, b = tmp_path / "local", tmp_path / "ray"
    assert convert([src], a, "--workers", "2").exit_code == 0
    marker = tmp_path / "finish.attempts"
    FAULTS["finish_unit"] = {"marker": str(marker), "action": "oserror", "times": 2}
    r = convert([src], b, "--engine", "ray", "--workers", "2")
    assert r.exit_code == 0, r.output
    assert attempts(marker) == 3
    assert_same_output(a, b)


def test_step_that_keeps_failing_is_named_and_nothing_committed(local_ray, tmp_path, monkeypatch):
    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    out = tmp_path / "ray"
    marker = tmp_path / "finish.attempts"
    monkeypatch.setenv(ray_engine.MAX_RETRIES_ENV, "1")
    FAULTS["finish_unit"] = {"marker": str(marker), "action": "exit", "times": 99}
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
    FAULTS["parse_part"] = {"marker": str(marker), "action": "oserror", "times": 99}
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
    FAULTS["finish_unit"] = {"marker": str(marker), "action": "count"}
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
    import random

    gen = sample_generator("make_prime_rl")
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


def test_atropos_run_identical_to_local(local_ray, tmp_path):
    """Atropos' groups files, a step each, converted on Ray tasks as by the local pool."""
    flags = ["--workers", "2"]
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([SAMPLE_DATA / "atropos"], a, "--engine", "local", *flags)
    assert r.exit_code == 0, r.output
    r = convert([SAMPLE_DATA / "atropos"], b, "--engine", "ray", *flags)
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)


def test_roll_dumps_identical_to_local(local_ray, tmp_path):
    """ROLL's pickled batches read on Ray tasks by the restricted unpickler, as by the local pool."""
    flags = ["--workers", "2"]
    a, b = tmp_path / "local", tmp_path / "ray"
    r = convert([SAMPLE_DATA / "roll"], a, "--engine", "local", *flags)
    assert r.exit_code == 0, r.output
    r = convert([SAMPLE_DATA / "roll"], b, "--engine", "ray", *flags)
    assert r.exit_code == 0, r.output
    assert_same_output(a, b)


# ---------------------------------------------------------------- storage seen by the tasks


def test_tasks_take_the_storage_variables_of_the_engine_s_process(s3, local_ray, tmp_path, monkeypatch):
    """A task reaches URIs as the process that made the engine does, whatever its worker's own
    environment: under a closed endpoint the fingerprint of an S3 input fails as the driver's
    would (InputUnavailableError naming the URI and that endpoint, not retried); under the
    server's it succeeds, in the same workers."""
    from rollout_cli.core import storage
    from rollout_cli.core.errors import InputUnavailableError
    from rollout_cli.output.manifest import file_fingerprint

    uri = "s3://bkt/dumps/jsonl/rollout_data/1.jsonl"
    good = os.environ["AWS_ENDPOINT_URL"]
    down = f"127.0.0.1:{_free_port()}"
    marker = tmp_path / "attempts"
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{down}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # refused at once: not retried for seconds
    storage._filesystem.cache_clear()
    engine = ray_engine.RayEngine()
    try:
        FAULTS["file_fingerprint"] = {"marker": str(marker), "action": "count"}
        with pytest.raises(InputUnavailableError) as e:
            engine.result(engine.submit(file_fingerprint, uri, label="fingerprint"))
        assert str(e.value).startswith(f"{uri}: cannot read this input from its storage (network, credentials or permission): ")
        assert f"Failed to connect to {down}" in str(e.value) and e.value.exit_code == 9
        assert attempts(marker) == 1  # a store's refusal is the SDK's to retry (AWS_MAX_ATTEMPTS), not Ray's
    finally:
        engine.shutdown()
    monkeypatch.setenv("AWS_ENDPOINT_URL", good)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    storage._filesystem.cache_clear()
    engine = ray_engine.RayEngine()
    try:
        fp = engine.result(engine.submit(file_fingerprint, uri, label="fingerprint"))
    finally:
        engine.shutdown()
    assert fp["size"] == (SAMPLE_DATA / "jsonl" / "rollout_data" / "1.jsonl").stat().st_size


# ---------------------------------------------------------------- a cluster started before the command


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(1)
    raise AssertionError(f"ray start did not come up: {path.read_text(errors='replace')[-3000:] if path.exists() else ''}")


def _stop(proc, timeout: float = 30) -> None:
    """End one `ray start --block` and every process it started (its own session), by id:
    `ray stop` would stop every Ray of this machine's user, not only this one. SIGTERM goes to
    `ray start` alone, which stops its node's processes in a second or two; sent to the whole
    session, each of them drains on its own for up to 30 s."""
    import signal
    import subprocess

    for kill, sig, wait in ((os.kill, signal.SIGTERM, timeout), (os.killpg, signal.SIGKILL, 10)):
        try:
            kill(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what it left behind in its session
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def ray_cluster():
    """Two raylets of one CPU each (a head and a second node on this machine), started before
    any command with environments that hold no storage variables: the head has none, the
    second node points at another store (a closed port) with other keys. Workers import this
    checkout's rollout_cli, as an installed one. Yields the cluster's address and its folder
    (sessions and logs)."""
    import shutil
    import subprocess
    import sys
    import tempfile

    root = str(Path(ray_engine.__file__).resolve().parents[3])
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base.update(PYTHONPATH=root, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    other = dict(base, AWS_ENDPOINT_URL=f"http://127.0.0.1:{_free_port()}", AWS_ACCESS_KEY_ID="node-key",
                 AWS_SECRET_ACCESS_KEY="node-secret", AWS_DEFAULT_REGION="eu-west-3")
    tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # Ray's socket paths must stay short
    port = _free_port()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    procs = []
    try:
        for name, args, env in (
            ("head", ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={tmp}/t"], base),
            ("node", [f"--address=127.0.0.1:{port}", f"--temp-dir={tmp}/n"], other),
        ):
            log = Path(tmp) / f"{name}.log"
            with open(log, "w") as f:
                procs.append(subprocess.Popen([ray_bin, "start", "--num-cpus=1", "--block", *args], env=env, stdout=f,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            _wait_for(log, "Ray runtime started", procs[-1], 180)
        yield f"127.0.0.1:{port}", Path(tmp)
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def _command(*args: str, env: dict | None = None, drop: tuple[str, ...] = (), timeout: float = 600):
    """rollout-cli in its own process, with this process's environment (the S3 variables
    included) less `drop` and with `env` on top."""
    import subprocess
    import sys

    full = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **(env or {}))
    for k in drop:
        full.pop(k, None)
    root = str(Path(ray_engine.__file__).resolve().parents[3])
    full["PYTHONPATH"] = os.pathsep.join([root] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], env=full, capture_output=True, text=True,
                          timeout=timeout)


def _remote_shards(s3, prefix: str, dest: Path) -> dict[str, bytes]:
    """Every shard of an output on the S3 server, by its layout path (the generation folder
    left out)."""
    from conftest import s3_download, shard_bytes
    from rollout_cli.core import layout

    s3_download(s3, prefix, dest)
    return {layout.split_generation(k)[1]: v for k, v in shard_bytes(dest).items()}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_cluster_without_the_storage_variables_converts_s3_as_the_local_engine(s3, ray_cluster, tmp_path, fmt):
    """The command's S3 endpoint and keys reach the tasks on nodes whose environments lack
    them (or name another store): exit 0, the output verifies, and its shards are the local
    engine's bytes."""
    from conftest import shard_bytes

    address, folder = ray_cluster
    secret = f"secret-{fmt}-5e1d0c9a"  # the server takes any key: one that can be looked for
    local = tmp_path / "local"
    assert convert([SAMPLE_DATA / fmt], local, "--workers", "1").exit_code == 0
    out = f"s3://bkt/cluster-{fmt}"
    r = _command("convert", f"s3://bkt/dumps/{fmt}", out, "--engine", "ray", "--ray-address", address, "--workers", "2",
                 "-q", env={"AWS_SECRET_ACCESS_KEY": secret})
    assert r.returncode == 0, r.stderr[-3000:]
    v = runner.invoke(app, ["verify", out])
    assert v.exit_code == 0, v.output
    remote = _remote_shards(s3, f"bkt/cluster-{fmt}", tmp_path / "remote")
    assert remote and remote == shard_bytes(local)
    # the secret is in no message, no file of the output, no log of the cluster
    assert secret not in r.stdout + r.stderr
    for root in (tmp_path / "remote", folder):
        for p in root.rglob("*"):
            if p.is_file() and not p.is_socket():
                assert secret.encode() not in p.read_bytes(), p


@pytest.mark.parametrize("fault", ["unreachable", "refused"])
def test_cluster_input_the_store_will_not_serve_is_an_input_error_naming_it(s3, ray_cluster, tmp_path, monkeypatch, fault):
    """The command's endpoint is down, or the store refuses its key: exit 9 naming the URI,
    not "invalid input" (3); nothing written."""
    from moto import settings as moto_settings

    if fault == "unreachable":
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}", "AWS_MAX_ATTEMPTS": "1"}  # no retries
        says = "AWS Error NETWORK_CONNECTION"
    else:
        monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # the server checks every signature
        env, says = {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWNUNKNOWN01"}, "AWS Error ACCESS_DENIED"
    r = _command("convert", "s3://bkt/dumps/jsonl", "s3://bkt/cluster-down", "--engine", "ray", "--ray-address",
                 ray_cluster[0], "-q", env=env, timeout=300)
    assert r.returncode == 9, r.stderr[-3000:]
    assert "error: s3://bkt/dumps/jsonl: cannot read this input from its storage (network, credentials or permission)" in r.stderr
    assert says in r.stderr and "invalid" not in r.stderr.lower()
    monkeypatch.undo()
    assert not s3.get_file_info(pafs.FileSelector("bkt/cluster-down", allow_not_found=True, recursive=True))


def test_cluster_tasks_use_the_command_s_aws_profile(s3, ray_cluster, tmp_path, monkeypatch):
    """The command's keys are in a profile of its ~/.aws/credentials, not in variables; the
    nodes have no such file. The store checks every signature against the one user it knows:
    the tasks read the inputs with the profile's keys, and the output is the local engine's.
    (The inputs are named one by one and OUT is local: moto's check of a listing's signature
    refuses pyarrow's.)"""
    import boto3
    from conftest import shard_bytes
    from moto import settings as moto_settings

    iam = boto3.client("iam", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    user = f"converter-{_free_port()}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    doc = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})
    arn = iam.create_policy(PolicyName=f"{user}-s3", PolicyDocument=doc)["Policy"]["Arn"]
    iam.attach_user_policy(UserName=user, PolicyArn=arn)
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[default]\naws_access_key_id = {key['AccessKeyId']}\naws_secret_access_key = {key['SecretAccessKey']}\n")
    names = ["1.jsonl", "2.jsonl"]
    local, out = tmp_path / "local", tmp_path / "ray"
    assert convert([SAMPLE_DATA / "jsonl" / "rollout_data" / n for n in names], local, "--workers", "1").exit_code == 0

    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # every request is checked from here
    r = _command("convert", *[f"s3://bkt/dumps/jsonl/rollout_data/{n}" for n in names], str(out), "--engine", "ray",
                 "--ray-address", ray_cluster[0], "--workers", "2", "-q", env={"HOME": str(home)},
                 drop=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    monkeypatch.undo()
    assert r.returncode == 0, r.stderr[-3000:]
    assert key["SecretAccessKey"] not in r.stdout + r.stderr
    assert shard_bytes(out) and shard_bytes(out) == shard_bytes(local)
