"""The local engines: inline and the fork-server process pool."""
from __future__ import annotations

import os
import sys

import pytest

from rollout_cli.run.engines.fork_server import start_early
from rollout_cli.run.engines.local import InlineEngine, PoolEngine
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


def test_pool_gives_each_task_a_fresh_process_and_delivers_errors():
    start_early(WORKER_MODULES)  # harmless when the fork server is already up
    engine = PoolEngine(2, WORKER_MODULES)
    try:
        pids = {engine.result(engine.submit(_pid)) for _ in range(3)}
        assert len(pids) == 3 and os.getpid() not in pids
        with pytest.raises(ValueError, match="bad input"):
            engine.result(engine.submit(_boom))
    finally:
        engine.shutdown()


def test_inline_engine_runs_in_this_process():
    engine = InlineEngine()
    assert engine.result(engine.submit(_pid)) == os.getpid()
    h = engine.submit(_boom)
    with pytest.raises(ValueError, match="bad input"):
        engine.result(h)


def test_an_unguarded_script_is_never_rerun_by_workers(tmp_path):
    """A script calling convert without `if __name__ == "__main__"`: its workers (including the
    fresh ones the pool starts after each task) must not run it again."""
    import subprocess

    from conftest import make_sample, write_jsonl

    for step in (1, 2, 3):
        write_jsonl(tmp_path / "in" / f"step_{step}.jsonl", [make_sample(group_index=0, index=i) for i in range(4)])
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "from rollout_cli.run.convert import convert, ConvertOptions\n"
        "print('body', flush=True)\n"
        "r = convert([sys.argv[1]], sys.argv[2], ConvertOptions(workers=2))\n"
        "print('steps', r['counts']['steps'], flush=True)\n"
    )
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "in"), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["body", "steps", "3"]


def test_one_slot_uses_the_early_fork_server_unless_told_to_run_inline(monkeypatch):
    from rollout_cli.run.engines import fork_server, local, make_engine

    monkeypatch.setattr(fork_server, "_started_early", False)
    assert isinstance(make_engine("local", 1), local.InlineEngine)
    start_early(WORKER_MODULES)
    assert fork_server.started_early()
    engine = make_engine("local", 1, preload=WORKER_MODULES)
    try:
        assert isinstance(engine, PoolEngine) and engine.result(engine.submit(_pid)) != os.getpid()
    finally:
        engine.shutdown()
    assert isinstance(make_engine("local", 1, inline=True), local.InlineEngine)


_SERVER_ENV_CODE = (
    "import os, sys\n"
    "from multiprocessing import forkserver\n"
    "from rollout_cli.run.engines.local import PoolEngine\n"
    "name = sys.argv[1]\n"
    "e = PoolEngine(1)\n"
    # a task first: until the server has exec'd, /proc shows the caller's initial environment
    "worker = e.result(e.submit(os.getenv, name))\n"
    "pid = forkserver._forkserver._forkserver_pid\n"
    "env = dict(kv.split('=', 1) for kv in open(f'/proc/{pid}/environ').read().split(chr(0)) if '=' in kv)\n"
    "print(env.get(name), os.environ.get(name), worker)\n"
    "e.shutdown()\n"
)


def _server_and_worker_env(name: str, caller: str | None) -> list[str]:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != name}
    if caller is not None:
        env[name] = caller
    out = subprocess.run([sys.executable, "-c", _SERVER_ENV_CODE, name], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the fork server's /proc environ")
def test_fork_server_keeps_openblas_to_one_thread_and_workers_get_the_callers_environment():
    assert _server_and_worker_env("OPENBLAS_NUM_THREADS", None) == ["1", "None", "None"]
    assert _server_and_worker_env("OPENBLAS_NUM_THREADS", "3") == ["3", "3", "3"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the fork server's /proc environ")
def test_fork_server_makes_jemalloc_arrows_default_pool_unless_the_caller_chose_one():
    import pyarrow as pa

    from rollout_cli.run.engines.fork_server import _arrow_has_jemalloc

    has = "jemalloc" in pa.supported_memory_backends()
    assert _arrow_has_jemalloc() == has  # read from the build's config header, without pyarrow
    assert _server_and_worker_env("ARROW_DEFAULT_MEMORY_POOL", None) == ["jemalloc" if has else "None", "None", "None"]
    assert _server_and_worker_env("ARROW_DEFAULT_MEMORY_POOL", "system") == ["system"] * 3


def test_pool_workers_allocate_from_jemalloc(monkeypatch):
    import pyarrow as pa

    engine = PoolEngine(1, preload=WORKER_MODULES)
    try:
        got = engine.result(engine.submit(_pool_backend))
    finally:
        engine.shutdown()
    assert got == ("jemalloc" if "jemalloc" in pa.supported_memory_backends() else pa.default_memory_pool().backend_name)


def _pool_backend() -> str:
    import pyarrow as pa

    return pa.default_memory_pool().backend_name


def _has_server_module() -> bool:
    return "rollout_cli.run.engines.server_setup" in sys.modules


def _gc_state() -> tuple[bool, bool, bool]:
    import gc

    return _has_server_module(), gc.isenabled(), gc.get_freeze_count() > 1000


def test_only_the_fork_server_and_its_workers_take_the_servers_settings():
    import gc

    engine = PoolEngine(1, preload=WORKER_MODULES)
    try:
        # a worker collects its own objects; what it inherited from the server is frozen
        assert engine.result(engine.submit(_gc_state)) == (True, True, True)
    finally:
        engine.shutdown()
    assert not _has_server_module()  # the caller must tear down (and flush) as usual
    assert gc.isenabled()


_TEARDOWN_CODE = (
    "import sys\n"
    "if sys.argv[1] == 'hooked':\n"
    "    import rollout_cli.run.engines.server_setup\n"
    "class Seen:\n"
    "    def __del__(self):\n"
    "        sys.stdout.write('torn down\\n'); sys.stdout.flush()\n"
    "seen = Seen()\n"
    "import gc\n"
    "print('ran, collecting:', gc.isenabled(), flush=True)\n"
)


@pytest.mark.parametrize("mode, expected", [("plain", "ran, collecting: True\ntorn down\n"),
                                            ("hooked", "ran, collecting: False\n")])
def test_the_server_settings_skip_collection_and_the_interpreters_teardown(mode, expected):
    import subprocess

    out = subprocess.run([sys.executable, "-c", _TEARDOWN_CODE, mode], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, expected), out.stderr


_TRACKER_CODE = (
    "import os\n"
    "from multiprocessing import forkserver, resource_tracker\n"
    "from rollout_cli.run.engines.fork_server import start_early\n"
    "from rollout_cli.run.engines.local import PoolEngine\n"
    "start_early(['rollout_cli.run.stages'])\n"
    "print(forkserver._forkserver._forkserver_pid is not None, resource_tracker._resource_tracker._pid is not None)\n"
    "e = PoolEngine(1)\n"
    "print(e.result(e.submit(os.getpid)) != os.getpid(), resource_tracker._resource_tracker._pid is not None)\n"
    "e.shutdown()\n"
)


def test_the_early_start_leaves_the_resource_tracker_to_the_pool():
    import subprocess

    out = subprocess.run([sys.executable, "-c", _TRACKER_CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True", "True"]


def _counting_spawns(engine) -> list:
    spawned: list = []
    spawn = engine.pool._spawn_process

    def counted():
        spawned.append(1)
        spawn()

    engine.pool._spawn_process = counted
    return spawned


def test_a_worker_that_ended_is_replaced_only_when_work_waits():
    engine = PoolEngine(1, preload=WORKER_MODULES)
    spawned = _counting_spawns(engine)
    try:
        first = engine.result(engine.submit(_pid))
    finally:
        engine.shutdown()  # waits for the pool's thread, which has seen the worker end
    assert len(spawned) == 1 and first != os.getpid()


def test_each_task_still_gets_a_fresh_worker():
    engine = PoolEngine(1, preload=WORKER_MODULES)
    spawned = _counting_spawns(engine)
    try:
        pids = [engine.result(engine.submit(_pid)) for _ in range(3)]
    finally:
        engine.shutdown()
    assert len(set(pids)) == 3 and os.getpid() not in pids and len(spawned) == 3
