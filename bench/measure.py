"""Timing, latency percentiles, and what processes spend: peak memory (RSS of a process and its
children) and CPU seconds."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable

import numpy as np

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc(pid: int, name: str) -> str:
    """``/proc/{pid}/{name}``, or "" once the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            return fh.read()
    except OSError:
        return ""


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, each once (parents before their children)."""
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            out.append(p)
            try:
                tasks = os.listdir(f"/proc/{p}/task")
            except OSError:
                tasks = []  # gone
            todo += [int(c) for tid in tasks for c in _proc(p, f"task/{tid}/children").split()]
    return out


def _rss_kib(pid: int) -> int:
    return next((int(line.split()[1]) for line in _proc(pid, "status").splitlines() if line.startswith("VmRSS:")), 0)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (0 once gone)."""
    fields = _proc(pid, "stat").rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if len(fields) > 12 else 0.0  # utime, stime


def named_thread_cpu_seconds(name: str, pid: int | None = None) -> float:
    """User + system CPU seconds so far of the thread of ``pid`` (by default this process) whose
    name (its ``comm``: 15 characters at most) is ``name``; LookupError where none is.

    >>> named_thread_cpu_seconds(_proc(os.getpid(), "comm").strip()) >= 0.0  # the main thread's
    True
    """
    pid = os.getpid() if pid is None else pid
    for tid in os.listdir(f"/proc/{pid}/task"):
        if _proc(pid, f"task/{tid}/comm").strip() == name[:15]:
            return _cpu_seconds(int(tid))  # /proc/TID/stat: that thread's own times
    raise LookupError(f"no thread named {name!r} in process {pid}")


class ProcessWatch:
    """What processes spend inside the block: ``peaks`` (MB of RSS, sampled in a thread) and
    ``cpu_seconds`` for ``pids`` alone and ``trees`` with their descendants. CPU is counted per
    process, named ``label/process-name`` below a tree's root (a server's engines run in worker
    processes). A tree is walked again only every ``TREE_EVERY_S``: walking it 20 times a second
    cost the client ~5% of a core, taken from the model on 2 cores.

    >>> with ProcessWatch({}, {"tree": os.getpid()}) as watch:
    ...     _ = sum(range(10**6))
    >>> watch.peaks["tree"] > 0 and watch.cpu_seconds["tree"] >= 0
    True
    """

    TREE_EVERY_S = 1.0

    def __init__(
        self, pids: dict[str, int | None], trees: dict[str, int | None] | None = None, interval: float = 0.2
    ) -> None:
        self.pids = {k: v for k, v in pids.items() if v}
        self.trees = {k: v for k, v in (trees or {}).items() if v}
        self.interval = interval
        self.peaks = {k: 0.0 for k in (*self.pids, *self.trees)}
        self.cpu_seconds: dict[str, float] = {}
        self._cpu_before: dict[int, float] = {}
        self._members: dict[str, list[int]] = {}
        self._walked = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def _sample(self, walk: bool = False) -> None:
        for name, pid in self.pids.items():
            self.peaks[name] = max(self.peaks[name], _rss_kib(pid) / 1024)
        if walk or time.monotonic() - self._walked >= self.TREE_EVERY_S:
            self._members = {name: _tree(pid) for name, pid in self.trees.items()}
            self._walked = time.monotonic()
        for name, members in self._members.items():
            self.peaks[name] = max(self.peaks[name], sum(_rss_kib(p) for p in members) / 1024)

    def _cpu_snapshot(self) -> dict[int, tuple[str, float]]:
        """Each process's CPU seconds, over the trees' members as the last walk found them."""
        out: dict[int, tuple[str, float]] = {}
        for label, root in self.trees.items():
            for pid in self._members.get(label, [root]):
                name = label if pid == root else f"{label}/{_proc(pid, 'comm').strip() or '?'}"
                out.setdefault(pid, (name, _cpu_seconds(pid)))
        for label, pid in self.pids.items():
            out[pid] = (label, _cpu_seconds(pid))
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> ProcessWatch:
        self._sample(walk=True)
        self._cpu_before = {pid: cpu for pid, (_, cpu) in self._cpu_snapshot().items()}
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(walk=True)
        for pid, (name, cpu) in self._cpu_snapshot().items():
            spent = cpu - self._cpu_before.get(pid, 0.0)
            self.cpu_seconds[name] = round(self.cpu_seconds.get(name, 0.0) + spent, 2)


def percentiles_ms(seconds: Iterable[float]) -> tuple[float | None, float | None]:
    values = np.asarray(list(seconds), dtype=np.float64)
    if values.size == 0:
        return None, None
    p50, p99 = np.percentile(values, [50, 99]) * 1000
    return round(float(p50), 2), round(float(p99), 2)


def make_case(
    name: str,
    suite: str,
    *,
    rows: int,
    seconds: float,
    tokens_per_row: float | None,
    latencies: Iterable[float] = (),
    peak_rss_mb: float | None = None,
    **extra,
) -> dict:
    """One row of the report: throughput, latency percentiles, memory, and anything else."""
    rows_per_s = rows / seconds if seconds > 0 else None
    p50, p99 = percentiles_ms(latencies)
    return {
        "name": name,
        "suite": suite,
        "rows": rows,
        "tokens_per_row": tokens_per_row,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows_per_s, 1) if rows_per_s else None,
        "tokens_per_s": round(rows_per_s * tokens_per_row, 1) if rows_per_s and tokens_per_row else None,
        "p50_ms": p50,
        "p99_ms": p99,
        "peak_rss_mb": round(peak_rss_mb, 1) if peak_rss_mb else None,
        **extra,
    }


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out
