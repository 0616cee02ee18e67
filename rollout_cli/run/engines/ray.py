"""Ray engine: the pipeline's stage functions run as Ray tasks, on a cluster or on a local Ray.

The driver (the `convert` process) submits the same functions the local engines run; they write
their staged files and shards under `OUT/.staging/run/` on storage every node mounts at the same
path, and hand back small summaries. Only the driver writes the manifest, so a failed run
commits nothing.

Failures:
* a task lost to the system (its worker process or node died, its result object was lost) is
  retried by Ray up to `max_retries` times (default 3, env `ROLLOUT_CLI_RAY_MAX_RETRIES`);
* a task that raised `OSError` (a transient fault of the shared filesystem) is retried the same way;
* the pipeline's own errors (`RolloutCliError` such as `InvalidInputError`, and the pipeline's
  internal control-flow exceptions) are never retried: the same input fails the same way. They
  reach the driver unchanged, so `convert` reports them exactly as with the local engine;
* anything else, and a retried failure that persists, raises `StepFailedError` with the task's
  label (which the driver gives: the stage and the step's input).

A task submitted with `here=True` (the parse of stdin, which only the driver has) runs in the
driver. Every submitted function must be idempotent (overwrite its own staged files), so that a
retry is safe.

Storage: every task first takes the driver's storage variables (`AWS_*`: endpoint, region,
keys, session token, profile; core/storage.py) and the contents of its AWS shared files (the
profiles), in place of its node's, so its URIs reach the store the command reached, as the
command's identity, whatever the nodes' environments and files hold.
They travel as one object in Ray's object store, handed to each task as an argument: not in a
`runtime_env`, which Ray keeps in its job table and shows on its dashboard and in `ray list
jobs`, and which cannot be set on a Ray the caller already initialised. Nor as a pickled
pyarrow filesystem: an S3FileSystem pickles its endpoint but not credentials it found in the
environment.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from ...core import storage
from ...core.errors import ExitCode, RolloutCliError, UsageError

DEFAULT_MAX_RETRIES = 3
MAX_RETRIES_ENV = "ROLLOUT_CLI_RAY_MAX_RETRIES"
# Application exceptions Ray retries: I/O faults (NFS hiccups, a stale handle, EIO). Known
# pipeline errors are never OSError subclasses, and readers turn unreadable input into
# InvalidInputError, so a bad file is not re-read in vain.
RETRY_EXCEPTIONS: tuple[type[BaseException], ...] = (OSError,)

class StepFailedError(RolloutCliError):
    """A stage of one step failed for a reason other than invalid input (a crash, an I/O fault
    that persisted through the retries, an unexpected exception)."""

    exit_code = ExitCode.INTERNAL


def _call(fn: Callable, env: tuple[dict[str, str], dict[str, bytes]], *args: Any) -> Any:
    """What a Ray task runs: one stage function, unchanged, under the driver's storage
    variables and AWS shared files `env`."""
    storage.use_environment(*env)
    return fn(*args)


def _package_root() -> str:
    """The directory that holds the `rollout_cli` package (what `import rollout_cli` needs)."""
    here = os.path.abspath(__file__)  # .../rollout_cli/run/engines/ray.py
    for _ in range(4):
        here = os.path.dirname(here)
    return here


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'rollout-cli[ray]' (or 'ray[default]')") from None
    return ray


def _check_reachable(address: str, timeout: float = 10.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on (ray.init itself retries for minutes)."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "local" and the like: let Ray resolve them
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise UsageError(f"--ray-address {address}: cannot connect: {e.strerror or e}") from None


def _ours(exc: BaseException | None) -> bool:
    """A deliberate pipeline error: reported as the local engine reports it, never retried."""
    if exc is None:
        return False
    return isinstance(exc, RolloutCliError) or type(exc).__module__.split(".")[0] == "rollout_cli"


class RayEngine:
    """Runs stage functions as Ray tasks. Joins the cluster at `address`, else reuses a Ray this
    process already initialised, else starts a local one with `workers` CPUs (and stops it at
    shutdown; a Ray it did not start is left running)."""

    remote = True  # tasks may run on other nodes: inputs are fingerprinted there too

    def __init__(self, address: str | None = None, workers: int | None = None, max_retries: int | None = None):
        ray = self._ray = _import_ray()
        if max_retries is None:
            env = os.environ.get(MAX_RETRIES_ENV)
            try:
                max_retries = int(env) if env else DEFAULT_MAX_RETRIES
            except ValueError:
                raise UsageError(f"{MAX_RETRIES_ENV}: expected an integer, got {env!r}") from None
        if max_retries < 0:
            raise UsageError(f"{MAX_RETRIES_ENV}: expected 0 or more")
        self.max_retries = max_retries
        self.started = False  # we called ray.init (and so call ray.shutdown)
        self.startup_seconds = 0.0
        t0 = time.perf_counter()
        if address:
            if not ray.is_initialized():
                _check_reachable(address)
                try:
                    ray.init(address=address, log_to_driver=False)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise UsageError(f"--ray-address {address}: cannot connect: {e}") from None
                self.started = True  # our connection: disconnect at shutdown (the cluster stays up)
        elif not ray.is_initialized():
            self._start_local(workers)
            self.started = True
        self.startup_seconds = time.perf_counter() - t0
        self._task = ray.remote(_call).options(
            max_retries=self.max_retries,
            retry_exceptions=list(RETRY_EXCEPTIONS),
            num_cpus=1,
        )
        # handed to every task (secrets: never logged)
        self._env = ray.put((storage.environment(), storage.shared_files()))
        self._labels: dict = {}  # ref -> label, for every task not yet collected by result()
        self._local_errors: dict = {}  # ref -> exception of a stage run in this process

    def slots(self) -> int:
        """CPUs in the cluster: how many parts the work is cut into."""
        try:
            return max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        except Exception:  # an unreachable GCS already failed in __init__; be conservative
            return 1

    def _start_local(self, workers: int | None) -> None:
        """A local Ray whose workers can import this rollout_cli, also when it is not installed
        (run from a checkout): its directory goes first on the workers' PYTHONPATH, through
        Ray's runtime environment (this process's environment is left as it is). On a real
        cluster, install rollout-cli on every node instead."""
        root = _package_root()
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
        self._ray.init(num_cpus=workers or None, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                       runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([root] + paths)}})

    def submit(self, fn: Callable, *args: Any, label: str = "", here: bool = False) -> Any:
        name = getattr(fn, "__name__", repr(fn))
        if here:
            # a task only this process can run (it reads this process's stdin); what it stages
            # lands on the shared storage as usual
            ref = self._run_here(fn, args)
        else:
            ref = self._task.remote(fn, self._env, *args)
        self._labels[ref] = label or name
        return ref

    def _run_here(self, fn: Callable, args: tuple) -> Any:
        try:
            return self._ray.put(fn(*args))
        except Exception as e:  # delivered by result(), as a task's error would be
            ref = self._ray.put(None)
            self._local_errors[ref] = e
            return ref

    def wait(self, handles: list) -> list:
        ray = self._ray
        ready, _ = ray.wait(handles, num_returns=1)
        more, _ = ray.wait(handles, num_returns=len(handles), timeout=0)
        return list(dict.fromkeys(ready + more))

    def result(self, handle: Any) -> Any:
        ray = self._ray
        label = self._labels.pop(handle, "task")
        if handle in self._local_errors:
            raise self._local_errors.pop(handle)
        try:
            return ray.get(handle)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if _ours(cause):
                raise cause from None
            if cause is None:
                raise StepFailedError(f"{label} failed: {e}") from e
            tries = f" (after {self.max_retries + 1} attempts)" if isinstance(cause, RETRY_EXCEPTIONS) and self.max_retries else ""
            raise StepFailedError(f"{label} failed{tries}: {type(cause).__name__}: {cause}") from cause
        except ray.exceptions.RayError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            tries = f" (after {self.max_retries + 1} attempts)" if self.max_retries else " (retries disabled)"
            raise StepFailedError(f"{label} failed{tries}: {type(e).__name__}: {first}") from e

    def shutdown(self) -> None:
        ray = self._ray
        if self._labels and ray.is_initialized():
            # A failed run: stop the tasks still running so nothing keeps writing to staging.
            for ref in list(self._labels):
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass
        self._labels.clear()
        self._local_errors.clear()
        if self.started and ray.is_initialized():
            ray.shutdown()
        self.started = False
