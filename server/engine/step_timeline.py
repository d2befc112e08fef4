"""Where a query's time in a stepped engine goes (``embedtext serve --step-timeline FILE``).

A query's reply splits its latency into the queue, the engine and the rest (the reply's
``queue_time_ns`` and ``inference_time_ns``). The engine part holds several waits that the
server cannot see from outside its replica's worker; a stepped replica records them here, one JSON
line per batch with interactive rows, when the worker's event loop gets its vectors back:

* ``waited_ms``: from the worker's event loop handing the batch to the engine thread until that
  thread took it. The thread takes batches between steps, so this is the rest of the step that
  was running when the batch came;
* ``steps``, and of the last step that computed its rows: ``step_ms``, ``step_rows``,
  ``step_tokens`` and ``step_bulk_rows`` (the bulk rows it carried beside the interactive ones);
* ``to_loop_ms``: from the engine thread handing the vectors over until the worker's event loop
  took them (a thread hand-over, which waits for a core or for the GIL);
* ``worker_ms``: from the first of these moments to the last. The engine part of the reply is
  that plus the way to the worker and back;
* ``gc_ms``: how long Python's garbage collector ran in the worker meanwhile (``GcClock``). A
  collection holds the GIL, so it stalls the engine thread and the event loop alike;
* ``at`` (Unix time, to split a run into phases), ``replica``, ``rows``, ``interactive_rows``.

Diagnostics for benchmarks (bench/gpu/profile_server.py reads it): lines are appended as queries
come, and the file is never trimmed. Several replicas may share one file: each line is written
whole, with one ``write`` call, in append mode.
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


@dataclass
class BatchTimes:
    """One batch's moments (``time.monotonic()``) on its way through a stepped engine."""

    arrived: float  # the worker's event loop handed it to the engine thread
    gc_before: float = 0.0  # GcClock.total_s then
    taken: float | None = None  # the engine thread took it, between two steps
    steps: int = 0  # steps that computed some of its rows
    last_step: int = -1  # the number of the last of them, to count each step once
    step_started: float = 0.0  # the last of them
    step_ended: float = 0.0
    step_rows: int = 0
    step_tokens: int = 0
    step_bulk_rows: int = 0
    delivered: float | None = None  # the engine thread handed its vectors to the event loop

    def computed_in(self, step: int, started: float, ended: float, rows: int, tokens: int, bulk_rows: int) -> None:
        """Some of its rows finished in step number ``step``."""
        if step != self.last_step:
            self.steps += 1
            self.last_step = step
        self.step_started, self.step_ended = started, ended
        self.step_rows, self.step_tokens, self.step_bulk_rows = rows, tokens, bulk_rows


class GcClock:
    """The time Python's garbage collector has run in this process since the clock started.

    >>> clock = GcClock()
    >>> _ = gc.collect()
    >>> clock.collections >= 1 and clock.total_s > 0
    True
    >>> clock.close()
    """

    def __init__(self) -> None:
        self.total_s = 0.0
        self.collections = 0
        self._started: float | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict) -> None:
        # Runs in the thread that triggered the collection, which holds the GIL throughout.
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.total_s += time.perf_counter() - self._started
            self.collections += 1
            self._started = None

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


def timeline_line(
    replica: str, rows: int, interactive_rows: int, times: BatchTimes, settled: float, gc_s: float = 0.0
) -> dict:
    """One batch's line (durations in ms), from its moments and when the event loop took its vectors.

    >>> t = BatchTimes(arrived=1.000, taken=1.004, delivered=1.0105)
    >>> t.computed_in(7, started=1.004, ended=1.010, rows=12, tokens=600, bulk_rows=11)
    >>> line = timeline_line("m/0", 1, 1, t, settled=1.0115)
    >>> {k: line[k] for k in ("waited_ms", "steps", "step_ms", "step_bulk_rows", "to_loop_ms", "worker_ms")}
    {'waited_ms': 4.0, 'steps': 1, 'step_ms': 6.0, 'step_bulk_rows': 11, 'to_loop_ms': 1.0, 'worker_ms': 11.5}
    """

    def ms(seconds: float) -> float:
        return round(seconds * 1000, 3)

    taken = times.taken if times.taken is not None else times.arrived
    delivered = times.delivered if times.delivered is not None else settled
    return {
        "at": round(time.time(), 3),
        "replica": replica,
        "rows": rows,
        "interactive_rows": interactive_rows,
        "waited_ms": ms(taken - times.arrived),
        "steps": times.steps,
        "step_ms": ms(times.step_ended - times.step_started),
        "step_rows": times.step_rows,
        "step_tokens": times.step_tokens,
        "step_bulk_rows": times.step_bulk_rows,
        "to_loop_ms": ms(settled - delivered),
        "worker_ms": ms(settled - times.arrived),
        "gc_ms": ms(gc_s),
    }


class StepTimeline:
    """The file a stepped replica appends its interactive batches' lines to."""

    def __init__(self, path: str, replica: str) -> None:
        self.replica = replica
        self._file: TextIO | None = Path(path).open("a", encoding="utf-8")
        self.gc = GcClock()

    def batch_times(self, arrived: float) -> BatchTimes:
        """A new batch's moments, from ``arrived`` on."""
        return BatchTimes(arrived=arrived, gc_before=self.gc.total_s)

    def write(self, rows: int, interactive_rows: int, times: BatchTimes, settled: float) -> None:
        if self._file is None:
            return
        gc_s = self.gc.total_s - times.gc_before
        line = json.dumps(timeline_line(self.replica, rows, interactive_rows, times, settled, gc_s))
        self._file.write(line + "\n")
        self._file.flush()  # one whole line a write: replicas may share the file

    def close(self) -> None:
        self.gc.close()
        if self._file is not None:
            self._file.close()
            self._file = None
