#!/usr/bin/env python3
"""Run one command and measure it as a whole process tree.

* wall time: from spawn to reap (os.wait4), so interpreter start, imports and file close count;
* CPU time: user + sys of the child and everything it waited for (rusage from wait4);
* max RSS: the largest VmHWM (the kernel's per-process RSS high-water mark, read from
  /proc/<pid>/status by the sampler) of any process of the tree.  wait4's ru_maxrss is not
  used: it inherits the spawning (harness) process's high-water mark across fork+exec;
* peak PSS: a sampler thread reads /proc/<pid>/smaps_rollup of the child and all of its
  descendants (found via /proc/<pid>/task/<tid>/children) every ``interval`` seconds and
  keeps the largest sum; the largest summed RSS is kept too;
* with ``all_descendants=True``: this process becomes a child subreaper (Linux prctl), so a
  descendant whose parent exits without waiting for it (a pool's fork server, its workers) is
  handed to it; after the child exits, every remaining descendant is waited for, and CPU time
  (user and sys) is the rusage of all of them, exact however short-lived each process was (the
  sampler, which reads /proc/<pid>/stat every ``interval``, misses up to one interval of every
  process that exits between two reads, and whole processes shorter than that);
* foreign CPU: busy CPU time of the whole machine (/proc/stat) during the run, minus the
  child tree's and the sampler's own CPU, i.e. what other processes burned meanwhile; and
  the steal time (CPU the hypervisor gave to other VMs) over the run.

Standalone use:  python bench/procmon.py [--interval-ms 20] -- CMD ARGS...
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def process_tree(pid: int) -> list[int]:
    """pid and all of its live descendants."""
    seen = [pid]
    i = 0
    while i < len(seen):
        seen.extend(_children(seen[i]))
        i += 1
    return seen


def rollup_kb(pid: int) -> tuple[int, int] | None:
    """(Rss, Pss) in kB from /proc/<pid>/smaps_rollup, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rss = pss = None
    for line in data.split(b"\n", 4)[1:4]:
        if line.startswith(b"Rss:"):
            rss = int(line.split()[1])
        elif line.startswith(b"Pss:"):
            pss = int(line.split()[1])
    if rss is None or pss is None:  # zombie or kernel thread: empty rollup
        return None
    return rss, pss


def status_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in kB from /proc/<pid>/status (cheap: no page-table walk)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rss = hwm = None
    for line in data.split(b"\n"):
        if line.startswith(b"VmHWM:"):
            hwm = int(line.split()[1])
        elif line.startswith(b"VmRSS:"):
            rss = int(line.split()[1])
            break
    if rss is None:
        return None
    return rss, hwm or rss


def hwm_kb(pid: int) -> int:
    """VmHWM (peak RSS of the process's current address space) in kB, 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_times() -> tuple[float, float]:
    """Machine-wide (busy, steal) CPU seconds since boot; busy = user+nice+system+irq+softirq,
    steal = time the hypervisor gave this VM's CPUs to someone else."""
    with open("/proc/stat", "rb") as f:
        v = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in v[1:9])
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


def busy_cpu_s() -> float:
    return cpu_times()[0]


def wait_for_idle(max_wait_s: float, window_s: float = 0.5, max_busy_cores: float = 0.2) -> float:
    """Wait (at most max_wait_s) for a window in which the machine is nearly idle.

    Returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_wait_s:
        b0 = busy_cpu_s()
        time.sleep(window_s)
        if (busy_cpu_s() - b0) / window_s <= max_busy_cores:
            break
    return time.perf_counter() - t0


_SUBREAPER = False


def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (PR_SET_CHILD_SUBREAPER); False
    where the platform has no such thing."""
    global _SUBREAPER
    if not _SUBREAPER:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            return False
    return _SUBREAPER


def _reap_all(timeout_s: float) -> int:
    """Wait for every remaining child (orphans handed to this subreaper included); kill what is
    still there after timeout_s. Returns how many were reaped."""
    n = 0
    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid:
            n += 1
            continue
        if time.perf_counter() > deadline:
            for p in _children(os.getpid()):
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
            deadline = float("inf")
        time.sleep(0.002)


def _cpu_ticks(pid: int) -> int | None:
    """utime + stime of a process, in clock ticks (also counts grandchildren that the child
    never waits for, such as a process pool's workers)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


class _Sampler(threading.Thread):
    def __init__(self, pid: int, interval: float, pss: bool):
        super().__init__(daemon=True)
        self.pid, self.interval, self.pss = pid, interval, pss
        self.stop = threading.Event()
        self.peak_pss_kb = self.peak_rss_kb = 0
        self.max_procs = 0
        self.max_hwm_kb = 0
        self.n = 0
        self.cpu_ticks: dict[int, int] = {}  # last utime+stime seen per process of the tree

    def run(self):
        while True:
            t = time.perf_counter()
            pss = rss = 0
            procs = 0
            for p in process_tree(self.pid):
                ticks = _cpu_ticks(p)
                if ticks is not None:
                    self.cpu_ticks[p] = max(ticks, self.cpu_ticks.get(p, 0))
                if self.pss:
                    r = rollup_kb(p)
                    hwm = hwm_kb(p) if r is not None else 0
                else:
                    st = status_kb(p)
                    r = None if st is None else (st[0], 0)
                    hwm = 0 if st is None else st[1]
                if r is not None:
                    rss += r[0]
                    pss += r[1]
                    procs += 1
                    self.max_hwm_kb = max(self.max_hwm_kb, hwm)
            self.n += 1
            self.peak_pss_kb = max(self.peak_pss_kb, pss)
            self.peak_rss_kb = max(self.peak_rss_kb, rss)
            self.max_procs = max(self.max_procs, procs)
            if self.stop.wait(max(0.0, self.interval - (time.perf_counter() - t))):
                return


def measure(cmd, interval: float = 0.02, pss: bool = True, env=None, cwd=None, capture: bool = True,
            all_descendants: bool = False) -> dict:
    """Run cmd to completion; return timings and memory of its whole process tree.

    pss=True reads smaps_rollup (Rss and Pss) each sample.  The kernel walks the page
    tables for that, which costs several ms per read for a process of a few hundred MiB
    and grows with its size, so that sampler takes a noticeable share of a core.
    pss=False reads only /proc/<pid>/status (RSS and its high-water mark): a timing run."""
    if all_descendants:
        all_descendants = become_subreaper()
        _reap_all(5.0)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    busy0, steal0 = cpu_times()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.STDOUT if capture else None)
    sampler = _Sampler(proc.pid, interval, pss)
    sampler.start()
    output = b""
    if capture:  # drain the pipe so the child never blocks on it
        output = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    reaped = _reap_all(10.0) if all_descendants else 0
    sampler.stop.set()
    sampler.join()
    busy1, steal1 = cpu_times()
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if capture:
        proc.stdout.close()
    # wait4 covers the child and the descendants it reaped; the sampler also saw the others
    tree_cpu = sum(sampler.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
    child_cpu = max(ru.ru_utime + ru.ru_stime, tree_cpu)
    user_s, sys_s = ru.ru_utime, ru.ru_stime
    if all_descendants:
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        user_s, sys_s = kids1.ru_utime - kids0.ru_utime, kids1.ru_stime - kids0.ru_stime
        child_cpu = max(user_s + sys_s, tree_cpu)
    own_cpu = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
    return {
        "rc": proc.returncode,
        "wall_s": wall,
        "user_s": user_s,
        "sys_s": sys_s,
        "orphans_reaped": reaped,
        "cpu_s": child_cpu,
        "max_rss_mib": sampler.max_hwm_kb / 1024,
        "peak_pss_mib": sampler.peak_pss_kb / 1024 if pss else None,
        "peak_rss_tree_mib": sampler.peak_rss_kb / 1024,
        "max_procs": sampler.max_procs,
        "mem_samples": sampler.n,
        "sampler_cpu_s": own_cpu,
        "foreign_cpu_s": max(0.0, (busy1 - busy0) - child_cpu - own_cpu),
        "steal_s": steal1 - steal0,
        "output": output.decode("utf-8", "replace")[-4000:],
    }


def measure_quiet(cmd, prepare, *, retries: int, idle_wait: float, noisy_frac: float, **kw) -> dict:
    """measure(cmd, **kw) after `prepare()` and up to `idle_wait` s for an idle machine, run
    again (up to `retries` times) while other processes took more than `noisy_frac` of a core
    during it. The result carries `attempt`, `idle_wait_s` and `noisy`."""
    for attempt in range(retries + 1):
        prepare()
        waited = wait_for_idle(idle_wait)
        r = measure(cmd, **kw)
        r.update(attempt=attempt, idle_wait_s=waited, noisy=r["foreign_cpu_s"] > noisy_frac * r["wall_s"])
        if r["rc"] != 0 or not r["noisy"]:
            break
    return r


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run one command and measure it as a whole process tree "
                                                 "(wall, CPU, max RSS, peak PSS); the figures go to stderr as JSON.")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="the sampler's period (default 20)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the command to measure")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given")
    r = measure(cmd, interval=args.interval_ms / 1000, pss=True, capture=False)
    r.pop("output")
    print(json.dumps(r, indent=1), file=sys.stderr)
    sys.exit(r["rc"])


if __name__ == "__main__":
    main()
