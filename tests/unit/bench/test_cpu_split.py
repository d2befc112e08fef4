"""CpuSplit finds the threads that step engines by their name and counts their own CPU apart."""

import os
import threading
import time

from embedtext.bench.measure import CpuSplit
from embedtext.server.engine.base import ENGINE_THREAD_NAME
from embedtext.server.host.naming import name_this_thread

BURN_S = 0.2  # of the thread's own CPU: ten times the clock tick /proc counts in


def _named_thread_burning(name: str, started, go, done, release) -> None:
    name_this_thread(name)
    started.set()
    go.wait()
    t0 = time.thread_time()
    while time.thread_time() - t0 < BURN_S:  # CPU spent, whatever else the host runs
        pass
    done.set()
    release.wait()  # alive while the split reads it, as an engine's thread is


def _split_around(name: str) -> dict[str, float]:
    started, go, done, release = (threading.Event() for _ in range(4))
    thread = threading.Thread(target=_named_thread_burning, args=(name, started, go, done, release))
    thread.start()
    started.wait()
    with CpuSplit({}, {"tree": os.getpid()}) as split:
        go.set()
        done.wait()
    release.set()
    thread.join()
    return split.seconds


def test_a_thread_named_as_an_engine_thread_is_counted_apart():
    seconds = _split_around(ENGINE_THREAD_NAME)
    assert seconds["tree:engine-thread"] >= 0
    assert seconds["tree"] >= seconds["tree:engine-thread"]  # a part of its process's


def test_other_threads_are_not_engine_threads():
    # Idle engines of servers this process started may be in its tree: they count, but spend nothing.
    assert _split_around("someone-else").get("tree:engine-thread", 0.0) < BURN_S / 2
