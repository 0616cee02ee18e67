"""The local engines: inline and the process pool (fork server, or spawn where there is none)."""
from __future__ import annotations

import os
import sys

import pytest

from rollout_cli.run.engines.local import InlineEngine, PoolEngine
from rollout_cli.run.engines import worker_setup
from rollout_cli.run.engines.worker_setup import arrow_has_jemalloc
from rollout_cli.run.preload import WORKER_MODULES


def _array_then_modules() -> tuple[list[int], bool]:
    import pyarrow as pa

    values = pa.array([1, 2, 3]).to_pylist()  # pa.array looks for pandas types
    return values, "pandas" in sys.modules


def _import_pandas() -> str:
    try:
        import pandas  # noqa: F401
    except ImportError as e:
        return f"refused: {e}"
    return "imported"


def _pid() -> int:
    return os.getpid()


def _boom() -> None:
    raise ValueError("bad input")


def test_pool_workers_never_import_pandas():
    import pandas  # noqa: F401  (the test extra installs it)
    engine = PoolEngine(2)
    try:
        h = engine.submit(_array_then_modules)
        values, has_pandas = engine.result(engine.wait([h])[0])
        assert values == [1, 2, 3]
        assert has_pandas is False
        assert engine.result(engine.submit(_import_pandas)).startswith("refused")
    finally:
        engine.shutdown()


def test_the_preloaded_pipeline_leaves_out_pandas_and_arrow_compute():
    """What the fork server imports before the first worker starts: pyarrow.compute (50 ms) and
    pandas (0.3 s) would only delay the first parse."""
    import subprocess

    code = f"import sys; import {', '.join(WORKER_MODULES)}; print(sorted(m for m in ('pandas', 'pyarrow.compute', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_pool_workers_live_across_tasks_and_deliver_errors():
    engine = PoolEngine(2, WORKER_MODULES)
    try:
        pids = {engine.result(engine.submit(_pid)) for _ in range(6)}
        assert 1 <= len(pids) <= 2 and os.getpid() not in pids
        with pytest.raises(ValueError, match="bad input"):
            engine.result(engine.submit(_boom))
        assert engine.result(engine.submit(_pid)) in pids  # an error does not cost the worker
    finally:
        engine.shutdown()


def _slow_write(path: str) -> None:
    import time

    time.sleep(0.5)
    with open(path, "w") as f:
        f.write("done")


def test_pool_shutdown_waits_for_a_running_task(tmp_path):
    """A task still running when the pool stops (a run that failed) ends before shutdown
    returns: nothing goes on writing once the caller cleans up."""
    engine = PoolEngine(1)
    path = str(tmp_path / "late")
    engine.submit(_slow_write, path)
    engine.shutdown()
    assert open(path).read() == "done"


def test_inline_engine_runs_in_this_process():
    engine = InlineEngine()
    assert engine.result(engine.submit(_pid)) == os.getpid()
    h = engine.submit(_boom)
    with pytest.raises(ValueError, match="bad input"):
        engine.result(h)


def _modules_loaded() -> bool:
    return all(m in sys.modules for m in WORKER_MODULES)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_both_start_methods_give_workers_with_the_stages_imported(method):
    engine = PoolEngine(2, WORKER_MODULES, method=method)
    try:
        assert engine.result(engine.submit(_modules_loaded)) is True
        assert engine.result(engine.submit(_pid)) != os.getpid()
    finally:
        engine.shutdown()


def test_without_a_fork_server_the_pool_spawns(monkeypatch):
    import multiprocessing as mp

    from rollout_cli.run.engines import local

    monkeypatch.setattr(mp, "get_all_start_methods", lambda: ["spawn"])
    assert local.start_method() == "spawn"
    engine = PoolEngine(1)
    try:
        assert engine.method == "spawn" and engine.result(engine.submit(_pid)) != os.getpid()
    finally:
        engine.shutdown()
    monkeypatch.undo()
    assert local.start_method() == "forkserver"


def test_a_guarded_script_is_not_rerun_by_workers(tmp_path):
    """A script that calls convert under `if __name__ == "__main__":` (as any multiprocessing
    code must): its workers import it as `__mp_main__` and never run the guarded part."""
    import subprocess

    from conftest import make_sample, write_jsonl

    for step in (1, 2, 3):
        write_jsonl(tmp_path / "in" / f"step_{step}.jsonl", [make_sample(group_index=0, index=i) for i in range(4)])
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "from rollout_cli.run.convert import convert, ConvertOptions\n"
        "if __name__ == '__main__':\n"
        "    print('body', flush=True)\n"
        "    r = convert([sys.argv[1]], sys.argv[2], ConvertOptions(workers=2))\n"
        "    print('steps', r['counts']['steps'], flush=True)\n"
    )
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "in"), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["body", "steps", "3"]


def test_one_slot_runs_inline_unless_told_to_use_the_pool():
    from rollout_cli.run.engines import local, make_engine

    assert isinstance(make_engine("local", 1), local.InlineEngine)
    engine = make_engine("local", 1, preload=WORKER_MODULES, inline=False)
    try:
        assert isinstance(engine, PoolEngine) and engine.result(engine.submit(_pid)) != os.getpid()
    finally:
        engine.shutdown()


_EXE_ENV_CODE = (
    "import os, sys\n"
    "from rollout_cli.run.engines.worker_setup import worker_environment\n"
    "from rollout_cli.run.engines.local import PoolEngine\n"
    "os.environ.update(worker_environment())\n"
    "e = PoolEngine(1)\n"
    "print(e.result(e.submit(os.getenv, 'ARROW_DEFAULT_MEMORY_POOL')), e.result(e.submit(os.getenv, 'ROLLOUT_CLI_PROBE')))\n"
    "e.shutdown()\n"
)


@pytest.mark.parametrize("caller", [None, "system"])
def test_workers_allocate_from_jemalloc_unless_the_caller_chose_a_pool(caller):
    import subprocess

    import pyarrow as pa

    has = "jemalloc" in pa.supported_memory_backends()
    assert arrow_has_jemalloc() == has  # read from the build's config header, without pyarrow
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if caller:
        env["ARROW_DEFAULT_MEMORY_POOL"] = caller
    env["ROLLOUT_CLI_PROBE"] = "seen"  # workers get the caller's environment
    out = subprocess.run([sys.executable, "-c", _EXE_ENV_CODE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [caller or ("jemalloc" if has else "None"), "seen"]
    engine = PoolEngine(1, preload=WORKER_MODULES)  # started in this (library) process too
    try:
        got = engine.result(engine.submit(_pool_backend))
    finally:
        engine.shutdown()
    assert got == ("jemalloc" if has else pa.default_memory_pool().backend_name)
    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ or os.environ["ARROW_DEFAULT_MEMORY_POOL"] == caller


_BLAS_CODE = (
    "import os\n"
    "from rollout_cli.run.engines.worker_setup import worker_environment\n"
    "from rollout_cli.run.engines.local import PoolEngine\n"
    "os.environ.update(worker_environment())\n"
    "import numpy\n"  # the executable's own numpy, after its environment is set
    "e = PoolEngine(1)\n"
    "print(os.getenv('OPENBLAS_NUM_THREADS'), e.result(e.submit(os.getenv, 'OPENBLAS_NUM_THREADS')))\n"
    "e.shutdown()\n"
)


@pytest.mark.parametrize("caller", [None, "3"])
def test_the_executable_and_its_workers_start_one_blas_thread_unless_the_caller_chose(caller):
    import subprocess

    before = os.environ.get("OPENBLAS_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if caller:
        env["OPENBLAS_NUM_THREADS"] = caller
    out = subprocess.run([sys.executable, "-c", _BLAS_CODE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    want = caller or worker_setup.BLAS_THREADS
    assert out.stdout.split() == [want, want]
    engine = PoolEngine(1, preload=WORKER_MODULES)  # a library caller's process keeps its own
    try:
        engine.result(engine.submit(os.getpid))
    finally:
        engine.shutdown()
    assert os.environ.get("OPENBLAS_NUM_THREADS") == before


def _pool_backend() -> str:
    import pyarrow as pa

    return pa.default_memory_pool().backend_name


def test_a_spawn_only_run_converts_the_same_bytes(tmp_path, monkeypatch):
    """Where the platform has no fork server the pool spawns its workers: same shards."""
    import multiprocessing as mp

    from conftest import SAMPLE_DATA, copts, shard_bytes
    from rollout_cli.run.convert import convert

    src = [str(SAMPLE_DATA / "jsonl")]
    inline = shard_bytes(convert(src, str(tmp_path / "inline"), copts(shards=2, mmap=True))["out"])
    monkeypatch.setattr(mp, "get_all_start_methods", lambda: ["spawn"])
    spawned = shard_bytes(convert(src, str(tmp_path / "spawned"), copts(workers=2, shards=2, mmap=True))["out"])
    assert inline and spawned == inline


def _refaults_after_free(nbytes: int, allocator: str = "arrow") -> tuple[int, int]:
    """(pages faulted in by a first buffer of `nbytes` from Arrow's default pool, or numpy's
    (the C library's malloc), by a second one after the first was freed)."""
    import resource

    import numpy as np
    import pyarrow as pa

    def faulted() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    out = []
    for _ in range(2):
        before = faulted()
        buf = pa.allocate_buffer(nbytes) if allocator == "arrow" else np.empty(nbytes, np.uint8)
        memoryview(buf).cast("B")[::4096] = b"\1" * len(range(0, nbytes, 4096))  # touch every page
        out.append(faulted() - before)
        del buf
    return out[0], out[1]


def test_workers_keep_freed_arrow_pages_for_the_next_step():
    import pyarrow as pa

    if "jemalloc" not in pa.supported_memory_backends() or not sys.platform.startswith("linux"):
        pytest.skip("pyarrow without jemalloc: the workers keep pyarrow's own pool")
    engine = PoolEngine(1, preload=WORKER_MODULES)
    try:
        first, second = engine.result(engine.submit(_refaults_after_free, 64 << 20))
        conf = engine.result(engine.submit(os.getenv, "JE_ARROW_MALLOC_CONF"))
    finally:
        engine.shutdown()
    assert first >= (64 << 20) // 4096 // 2  # the first buffer is new memory
    assert second < first // 10  # the second reuses the first's pages: no fault per page
    assert conf == os.environ.get("JE_ARROW_MALLOC_CONF", worker_setup.JEMALLOC_CONF)


def test_workers_keep_freed_c_heap_pages_for_the_next_step():
    """40 MiB: above the largest threshold the C library's own defaults adapt to, where each
    such buffer is a mapping of its own, faulted in afresh."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the C library's malloc settings are Linux's (glibc's mallopt)")
    engine = PoolEngine(1, preload=WORKER_MODULES)
    try:
        first, second = engine.result(engine.submit(_refaults_after_free, 40 << 20, "numpy"))
    finally:
        engine.shutdown()
    assert first > 100  # new memory (numpy asks for huge pages: fewer faults than pages)
    assert second < first // 10  # the C library's defaults fault it all in again


@pytest.mark.parametrize("tuned", [None, "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_malloc_settings_leave_an_environment_that_tunes_malloc_alone(monkeypatch, tuned):
    from rollout_cli.core import libc as libc_mod

    calls = []

    class Lib:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(libc_mod, "libc", lambda: Lib())
    for name in worker_setup._MALLOC_TUNED:
        monkeypatch.delenv(name, raising=False)
    if tuned:
        monkeypatch.setenv(tuned, "1")
    worker_setup.keep_freed_memory()
    want = [(worker_setup._M_MMAP_THRESHOLD, worker_setup.MMAP_THRESHOLD),
            (worker_setup._M_TRIM_THRESHOLD, worker_setup.TRIM_THRESHOLD)]
    assert calls == ([] if tuned else want)


_FORK_PROBE = r"""
import json, os, sys, threading
from rollout_cli.run.engines import local
from rollout_cli.run.engines.worker_setup import worker_environment
from rollout_cli.run.preload import WORKER_MODULES

def probe():
    return os.getppid(), all(m in sys.modules for m in WORKER_MODULES)

def main():
    os.environ.update(worker_environment())
    got = {"library": local.fork_ready()}
    local.claim_process()
    if sys.argv[1] == "thread":
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
    import gc
    engine = local.PoolEngine(2, WORKER_MODULES)
    parent, loaded = engine.result(engine.submit(probe))
    engine.shutdown()
    got.update(method=engine.method, forked_from_here=parent == os.getpid(), loaded=loaded,
               frozen=gc.get_freeze_count() > 0)
    print(json.dumps(got))


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("threads", ["one", "thread"])
def test_the_executable_forks_its_workers_only_while_it_runs_one_thread(tmp_path, threads):
    """The executable's pool forks it (its workers inherit the imported stages) only while it
    runs a single thread; a library caller's process is never forked."""
    import json
    import subprocess

    script = tmp_path / "probe.py"
    script.write_text(_FORK_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "JE_ARROW_MALLOC_CONF"}
    out = subprocess.run([sys.executable, str(script), threads], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["library"] is False and got["loaded"] is True
    if threads == "one" and sys.platform.startswith("linux"):
        assert got["method"] == "fork" and got["forked_from_here"] is True
        assert got["frozen"] is True  # its objects out of the collector's view before the fork
    else:
        assert got["method"] != "fork" and got["forked_from_here"] is False
        assert got["frozen"] is False


def test_a_forked_child_closes_its_copies_of_the_held_lock(tmp_path):
    """A worker forked while the writer lock is held keeps no descriptor of it: the lock ends
    with its holder (a killed converter's output is free for --resume at once)."""
    import fcntl

    from rollout_cli.output.lock import LocalLock

    out = tmp_path / "out"
    out.mkdir()
    lock = LocalLock(str(out / ".lock"), "convert", folder=str(out))
    assert lock.try_acquire() is None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        os.write(w, b"%d %d" % (lock.fd, lock.dir_fd))
        os._exit(0)
    os.close(w)
    assert os.read(r, 64) == b"-1 -1"
    os.waitpid(pid, 0)
    os.close(r)
    assert lock.fd >= 0 and lock.dir_fd >= 0  # the holder still holds it
    lock.release()
    fd = os.open(str(out), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the holder released it
    finally:
        os.close(fd)


def test_a_library_callers_pool_leaves_its_collector_as_it_was():
    import gc

    before = gc.get_freeze_count()
    engine = PoolEngine(1, preload=WORKER_MODULES)
    try:
        engine.result(engine.submit(os.getpid))
    finally:
        engine.shutdown()
    assert gc.get_freeze_count() == before
