"""Shared helpers for the rollout-cli test suite.

* puts tests/helpers/ (and tests/) on sys.path so every test, in whichever folder, imports the
  helper modules by their bare names: the slime oracle (``slime_reference``) and its cases
  (``slime_cases``), the sample builders and dump writers (``inspect_samples``, ``train_dumps``,
  ``framework_dumps``, ``slime_sample``, ``old_outputs``) and the headless browser
  (``cdp_browser``); tests/README.md describes the layout;
* builders for small valid sample dicts and writers for JSONL / .pt / Parquet inputs;
* readers for a converted output directory;
* what keeps the suite quick, for every test (tests/README.md, "Running the tests"): one local
  Ray per test process (`local_ray`; the tests that use it share one xdist group, so one
  worker starts it), and no input watched for a change that cannot come (`SETTLE_SECONDS`).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, settings

TESTS = Path(__file__).resolve().parent
HELPERS = TESTS / "helpers"
for _path in (TESTS, HELPERS):  # HELPERS ends up first
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

# Every property test's settings start from this profile (loaded before the test modules make
# theirs): no deadline and no "too slow" health check, which would fail a test for the
# machine's load (tests run in parallel; speed is measured in bench/, not here). The number of
# examples stays each test's own.
settings.register_profile("rollout-cli", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rollout-cli")

ROOT = TESTS.parent
SAMPLE_DATA = ROOT / "sample_data"
SAMPLE_JSONL = SAMPLE_DATA / "jsonl" / "rollout_data"


@pytest.fixture(scope="session")
def sample_out_clean(tmp_path_factory) -> Path:
    """sample_data/jsonl (3 train steps + 1 eval step) converted in 2 shards per step, with mmap
    copies, once per session. Never modified: tests take a copy (`sample_out`)."""
    from typer.testing import CliRunner

    from rollout_cli.cli.app import app

    out = tmp_path_factory.mktemp("sample_out") / "clean"
    res = CliRunner().invoke(app, ["convert", str(SAMPLE_JSONL), str(out), "--shards", "2", "--workers", "1", "-q"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture
def sample_out(sample_out_clean, tmp_path) -> Path:
    """A fresh copy of the clean sample output, for a test to damage."""
    dst = tmp_path / "out"
    shutil.copytree(sample_out_clean, dst)
    return dst


def sample_generator(name: str):
    """sample_data/<name>.py, the writer of a framework's sample run, imported once (under
    its own name, so objects it pickles can be found again)."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SAMPLE_DATA / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


# The fixtures that start Ray: every test that uses one is put in the xdist group "ray"
# (with `--dist loadgroup`, one worker runs them all, so the run starts each of them once)
RAY_FIXTURES = ("local_ray", "ray_cluster")
_ray_started = False


def start_local_ray():
    """Ray, initialised once for this test process (2 CPUs, no dashboard) and shut down when the
    session ends; one already running is used as it is. Skipped where Ray is not installed."""
    global _ray_started
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        _ray_started = True
    return ray


@pytest.fixture(scope="session")
def local_ray():
    """The test process's local Ray (start_local_ray): the Ray engine finds it initialised,
    reuses it and leaves it running."""
    return start_local_ray()


def pytest_sessionfinish(session, exitstatus):
    if _ray_started:
        import ray

        ray.shutdown()


# `pytest -m quick`, the first check (under 90 s on 2 cores): the step rules, the readers of
# slime's formats, validation, the writer, the conversion and its failures, verify's checks
# and hostile input, on local files (a test that needs the S3 server is left to the full run)
QUICK = (
    "pipeline/",
    "inputs/test_discover.py", "inputs/test_registry.py", "inputs/test_columns.py", "inputs/test_completeness.py",
    "inputs/jsonl/test_jsonl.py", "inputs/slime_pt/test_pt_pickle.py", "inputs/test_columnar_formats.py",
    "core/test_errors.py", "core/test_layout.py", "core/test_schema.py", "core/test_sample_fields.py",
    "output/test_write.py", "output/test_manifest.py", "output/test_partition.py",
    "run/test_convert.py", "run/test_failures.py", "run/test_live.py", "run/test_resume.py",
    "cli/test_convert_cli.py", "cli/test_app.py",
    "verification/test_verification_rows.py", "verification/test_files.py", "verification/test_rejects.py", "verification/test_verification_manifest.py",
    "test_hostile_input.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        names = getattr(item, "fixturenames", ())
        where = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
        if where.startswith(QUICK) and "s3" not in names:
            item.add_marker(pytest.mark.quick)
        if xdist and any(name in RAY_FIXTURES for name in names):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(autouse=True, scope="session")
def _inputs_are_not_watched():
    """A .pt or Parquet input that does not open is watched for SETTLE_SECONDS (1 s) before it
    is called broken rather than still being written (run/live.py). A test writes its inputs
    before it converts them, so the watch would only wait: it is cut to nothing (the tests of
    the watch make their writes happen during it)."""
    from rollout_cli.run import live

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(live, "SETTLE_SECONDS", 0.0)
        yield


def converted_locally_and_on_ray(run, tmp_path) -> tuple[list[dict], list[dict]]:
    """The rows of `run` converted with --engine local and with --engine ray (2 workers each),
    on the test process's local Ray (a test that calls this takes the `local_ray` fixture, so
    it runs beside the other Ray tests); skipped where Ray is not installed."""
    from typer.testing import CliRunner

    from rollout_cli.cli.app import app

    start_local_ray()
    for engine in ("local", "ray"):
        r = CliRunner().invoke(app, ["convert", str(run), str(tmp_path / engine), "--engine", engine,
                                     "--workers", "2", "-q"])
        assert r.exit_code == 0, r.output
    return read_rows(tmp_path / "local"), read_rows(tmp_path / "ray")


def copts(**kw):
    """ConvertOptions for tests: one worker (in-process; a process pool costs seconds to start
    on a 2-core machine) and no Arrow IPC sidecar, unless a test asks for them."""
    from rollout_cli.run.convert import ConvertOptions

    kw.setdefault("workers", 1)
    kw.setdefault("mmap", False)
    return ConvertOptions(**kw)


def make_sample(
    *,
    index: int | None = 0,
    group_index: int | None = 0,
    rollout_id=None,
    reward=1.0,
    response_length: int = 2,
    prompt_len: int = 3,
    loss_mask="ones",
    status: str = "completed",
    remove_sample: bool = False,
    metadata: dict | None = None,
    log_probs: bool = False,
    **extra,
) -> dict:
    """A small valid ``Sample.to_dict()``-style dict (only the keys the converter reads)."""
    base = 1000 + 10 * (index or 0)
    tokens = [7 + j for j in range(prompt_len)] + [base + j for j in range(response_length)]
    if loss_mask == "ones":
        loss_mask = [1] * response_length
    d = {
        "group_index": group_index,
        "index": index,
        "rollout_id": rollout_id,
        "tokens": tokens,
        "response_length": response_length,
        "reward": reward,
        "loss_mask": loss_mask,
        "rollout_log_probs": [-0.5] * response_length if log_probs else None,
        "remove_sample": remove_sample,
        "status": status,
        "metadata": {} if metadata is None else metadata,
    }
    d.update(extra)
    return d


def write_jsonl(path, samples: list, raw_lines: dict[int, bytes] | None = None) -> Path:
    """Write one sample per line; ``raw_lines[i]`` replaces line i (0-based) with raw bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, s in enumerate(samples):
        if raw_lines and i in raw_lines:
            lines.append(raw_lines[i])
        else:
            lines.append(orjson.dumps(s, option=orjson.OPT_SERIALIZE_NUMPY))
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def write_pt(path, samples: list, step) -> Path:
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": step, "samples": samples}, str(path))
    return path


def read_jsonl(path) -> list[dict]:
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


def shard_paths(out, split: str = "train", step: int | None = None) -> list[Path]:
    top = Path(out) / ("data" if split == "train" else "eval")
    if not top.exists():
        return []
    pattern = f"step-{step:06d}/*.parquet" if step is not None else "step-*/*.parquet"
    return sorted(top.glob(pattern))


def read_rows(out, split: str = "train", step: int | None = None) -> list[dict]:
    """Every row of the output (shards in order), as Python dicts."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for p in shard_paths(out, split, step):
        rows.extend(pq.read_table(p).to_pylist())
    return rows


def tree_digest(root) -> dict[str, tuple[int, str]]:
    """relative path -> (mtime_ns, sha256) of every file below ``root`` (hidden ones included)."""
    out = {}
    root = Path(root)
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            out[str(p.relative_to(root))] = (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def tree_state(root) -> dict[str, tuple]:
    """Every folder and file below ``root`` (hidden ones included): a folder as ("dir",), a file
    as ("file", mtime_ns, sha256). What a refused command must leave exactly as it found."""
    out: dict[str, tuple] = {}
    root = Path(root)
    for dirpath, dirs, names in os.walk(root):
        for d in dirs:
            out[str((Path(dirpath) / d).relative_to(root))] = ("dir",)
        for n in names:
            p = Path(dirpath) / n
            out[str(p.relative_to(root))] = ("file", p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def shard_bytes(out) -> dict[str, bytes]:
    """relative path -> bytes of every shard file (Parquet and Arrow IPC) of an output."""
    res = {}
    root = Path(out)
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in (".parquet", ".arrow") and ".staging" not in p.parts:
            res[str(p.relative_to(root))] = p.read_bytes()
    return res


def chunk_record(chunk, i: int) -> dict | None:
    """Record i of a reader's chunk as a dict of its non-null fields (None when unparseable)."""
    if i in chunk.problems:
        return None
    if chunk.records is not None:
        return chunk.records[i]
    if i in chunk.rows:
        return chunk.rows[i]
    out = {}
    for name, col in (chunk.columns or {}).items():
        v = col[i] if isinstance(col, list) else col[i].as_py()
        if v is not None:
            out[name] = v
    return out


@pytest.fixture(scope="session")
def s3():
    """A moto S3 server on loopback, its bucket `bkt` holding sample_data under `dumps/`; the
    endpoint reaches pyarrow (and child processes) through AWS_ENDPOINT_URL. Yields a pyarrow
    S3FileSystem on it."""
    import logging
    import socket

    from moto.server import ThreadedMotoServer
    from pyarrow import fs as pafs

    from rollout_cli.core import storage

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        # writer leases (output/lock.py) that a killed test run leaves expire in seconds
        "ROLLOUT_CLI_LEASE_SECONDS": "3",
        "ROLLOUT_CLI_LEASE_CONFIRM_SECONDS": "0.05",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    storage._filesystem.cache_clear()
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True)
    fs.create_dir("bkt")
    pafs.copy_files(str(SAMPLE_DATA), "bkt/dumps", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    yield fs
    server.stop()
    storage._filesystem.cache_clear()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def s3_download(fs, prefix: str, dest) -> None:
    """Copy everything under `prefix` of the S3 filesystem to the local folder `dest`."""
    from pyarrow import fs as pafs

    pafs.copy_files(prefix, str(dest), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


class _Dead(OSError):
    """The process died here: this write never happened, and nothing after it does."""


def _crashing_handler(fs, limit: float):
    """A pyarrow filesystem handler over the test's S3 filesystem that lets `limit` writes and
    deletes through, fails the next one and every call after it (as a killed process would).
    The writer lease's calls are not counted (they fail once the process is dead)."""
    from pyarrow import fs as pafs

    class Crashing(pafs.FileSystemHandler):
        def __init__(self):
            self.writes, self.reads, self.dead = [], [], False

        def _op(self, name, path, write=True):
            if self.dead:
                raise _Dead("the process is gone")
            if isinstance(path, str) and path.endswith("/.lock"):
                return  # the writer lease: renewed at times of its own, so not counted
            if name.startswith("open_input"):
                self.reads.append(path)
            if write:
                if len(self.writes) >= limit:
                    self.dead = True
                    raise _Dead(f"killed at {name} {path!r}")
                self.writes.append((name, path))

        def get_type_name(self):
            return "crashing-s3"

        def normalize_path(self, path):
            return fs.normalize_path(path)

        def equals(self, other):
            return self is other

        def get_file_info(self, paths):
            self._op("get_file_info", paths, write=False)
            return fs.get_file_info(paths)

        def get_file_info_selector(self, selector):
            self._op("get_file_info_selector", selector.base_dir, write=False)
            return fs.get_file_info(selector)

        def open_input_stream(self, path):
            self._op("open_input_stream", path, write=False)
            return fs.open_input_stream(path)

        def open_input_file(self, path):
            self._op("open_input_file", path, write=False)
            return fs.open_input_file(path)

        def create_dir(self, path, recursive):
            self._op("create_dir", path)
            fs.create_dir(path, recursive=recursive)

        def delete_dir(self, path):
            self._op("delete_dir", path)
            fs.delete_dir(path)

        def delete_dir_contents(self, path, missing_dir_ok=False):
            self._op("delete_dir_contents", path)
            fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

        def delete_root_dir_contents(self):
            self._op("delete_root_dir_contents", "")
            fs.delete_dir_contents("", accept_root_dir=True)

        def delete_file(self, path):
            self._op("delete_file", path)
            fs.delete_file(path)

        def move(self, src, dest):
            self._op("move", src)
            fs.move(src, dest)

        def copy_file(self, src, dest):
            self._op("copy_file", dest)
            fs.copy_file(src, dest)

        def open_output_stream(self, path, metadata):
            self._op("open_output_stream", path)
            return fs.open_output_stream(path, metadata=metadata)

        def open_append_stream(self, path, metadata):
            self._op("open_append_stream", path)
            return fs.open_append_stream(path, metadata=metadata)

    return Crashing()


def crashing_s3(monkeypatch, s3, limit: float = float("inf")):
    """Route rollout-cli's object-store calls through _crashing_handler (undone with the
    monkeypatch); returns the handler, whose `writes` lists the writes and deletes made."""
    from pyarrow import fs as pafs

    from rollout_cli.core import storage

    handler = _crashing_handler(s3, limit)
    wrapped = pafs.PyFileSystem(handler)
    monkeypatch.setattr(storage, "_filesystem", lambda prefix: wrapped)
    return handler


def card_without_generations(data: bytes) -> bytes:
    """An object-store output's dataset card with its generation ids left out (they are random)."""
    import re

    return re.sub(rb"gen/[0-9a-f]{8,64}/", b"gen/*/", data)
