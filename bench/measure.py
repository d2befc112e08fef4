"""Timing, latency percentiles and peak memory (RSS of a process and its children)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable

import numpy as np


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, each once (parents before their children)."""
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            out.append(p)
            todo += _children(p)
    return out


def _comm(pid: int) -> str | None:
    """The process name, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return None


def tree_rss_by_process(pid: int) -> dict[str, float]:
    """RSS (MB) of ``pid`` and each descendant, keyed ``name[pid]``: which process holds the memory."""
    names = {p: name for p in _tree(pid) if (name := _comm(p)) is not None}
    return {f"{name}[{p}]": round(_rss_kib(p) / 1024, 1) for p, name in names.items()}


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (0 once gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0.0


class CpuSplit:
    """CPU seconds spent inside the block, per process: where a path's CPU goes (on a machine
    whose cores the model already fills, every CPU-second of the rest is taken from the model).

    ``pids`` are counted alone (the client: its children are servers counted apart), ``trees``
    with their descendants, each named ``label/process-name`` (``server/replica-worker``: a
    server's engines run in worker processes of their own). ``seconds`` holds the totals once the
    block ends.

    >>> with CpuSplit({}, {"tree": os.getpid()}) as split:
    ...     _ = sum(range(10**6))
    >>> split.seconds["tree"] >= 0
    True
    """

    def __init__(self, pids: dict[str, int | None], trees: dict[str, int | None] | None = None) -> None:
        self.pids = {k: v for k, v in pids.items() if v}
        self.trees = {k: v for k, v in (trees or {}).items() if v}
        self.seconds: dict[str, float] = {}
        self._before: dict[int, float] = {}

    def _snapshot(self) -> dict[int, tuple[str, float]]:
        out: dict[int, tuple[str, float]] = {}
        for label, root in self.trees.items():
            for pid in _tree(root):
                name = label if pid == root else f"{label}/{_comm(pid) or '?'}"
                out.setdefault(pid, (name, _cpu_seconds(pid)))
        for label, pid in self.pids.items():
            out[pid] = (label, _cpu_seconds(pid))
        return out

    def __enter__(self) -> CpuSplit:
        self._before = {pid: cpu for pid, (_, cpu) in self._snapshot().items()}
        return self

    def __exit__(self, *exc) -> None:
        for pid, (name, cpu) in self._snapshot().items():
            spent = cpu - self._before.get(pid, 0.0)
            self.seconds[name] = round(self.seconds.get(name, 0.0) + spent, 2)


class PeakRss:
    """Samples RSS in a thread; ``peaks`` holds the maxima (MB) per name.

    ``pids`` are measured alone (the client process: its children are servers measured apart),
    ``trees`` with all their descendants (a server and its engine processes).

    The sampler runs in the measuring process, beside the path it measures, so it must be cheap:
    a tree is walked again only every ``TREE_EVERY_S`` (finding a process's children reads a file
    per thread, and vLLM's processes have dozens; walking the server's tree 20 times a second cost
    the client ~5% of a core during the 512-token runs, CPU a 2-core machine's model was short of).

    >>> with PeakRss({"client": os.getpid()}) as rss:
    ...     _ = bytearray(10)
    >>> rss.peaks["client"] > 0
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
        self._members: dict[str, list[int]] = {}
        self._walked = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def _sample(self, walk: bool = False) -> None:
        for name, pid in self.pids.items():
            self.peaks[name] = max(self.peaks[name], _rss_kib(pid) / 1024)
        if walk or time.monotonic() - self._walked >= self.TREE_EVERY_S:
            self._members = {name: _tree(pid) for name, pid in self.trees.items()}
            self._walked = time.monotonic()
        for name, members in self._members.items():
            self.peaks[name] = max(self.peaks[name], sum(_rss_kib(p) for p in members) / 1024)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakRss:
        self._sample(walk=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(walk=True)


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


def median_seconds(runs: Iterable[float]) -> float:
    """The median run: short runs on a shared machine swing; every path gets the same number.

    >>> median_seconds([3.0, 1.0, 2.0])
    2.0
    """
    return float(np.median(list(runs)))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out
