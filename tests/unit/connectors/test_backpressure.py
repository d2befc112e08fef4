"""An overloaded server: it refuses with a retry hint, and both clients back off and retry inside
their deadline. Against the in-process server on the NULL ENGINE (client behaviour only)."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import grpc
import numpy as np
import pytest

import embedtext
from embedtext.protocol import RETRY_PUSHBACK_KEY
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol import embedding_pb2_grpc as pb_grpc
from embedtext.protocol.errors import OverloadedError

BOUND = 16  # the server's queue bound, in rows


def _refusals(server) -> float:
    registry = server.server.metrics.registry
    return (
        registry.get_sample_value("embedtext_refusals_total", {"model": "all-MiniLM-L6-v2", "reason": "queue_full"})
        or 0.0
    )


def _in_a_thread(work, into: dict) -> threading.Thread:
    """Run ``work()`` in a thread: its result lands in ``into["result"]``, or its error in ``into["error"]``."""

    def run():
        try:
            into["result"] = work()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            into["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _embed_in_a_thread(target: str, texts: list[str], into: dict) -> threading.Thread:
    def embed():
        with embedtext.Client(target, timeout=60) as client:
            return client.embed(texts, latency_class="bulk")

    return _in_a_thread(embed, into)


def _wait_until(what: str, condition) -> None:
    waited = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < waited, what
        time.sleep(0.01)


class _Threads:
    def __init__(self, *threads: threading.Thread) -> None:
        self.threads = threads

    def join(self, timeout: float) -> None:
        for thread in self.threads:
            thread.join(timeout)


@pytest.fixture
def held_queue(start_server, tmp_path):
    """A server whose queue is full: its engine (one batch at a time) holds a one-row call until the
    test calls ``server.release_bulk()``, and one bulk caller's BOUND rows wait behind it."""
    server = start_server(tmp_path / "busy.sock", hold_bulk=True, max_queued_rows=BOUND, max_batches_per_replica=1)
    registry = server.server.metrics.registry
    labels = {"model": "all-MiniLM-L6-v2", "replica": "0"}
    blocker = _embed_in_a_thread(server.target, ["the engine's one batch"], {})
    _wait_until(
        "the blocker never reached the engine",
        lambda: registry.get_sample_value("embedtext_replica_inflight_batches", labels) == 1,
    )
    filler = {}
    thread = _embed_in_a_thread(server.target, [f"row {i}" for i in range(BOUND)], filler)
    with embedtext.Client(server.target) as probe:
        _wait_until(
            "the filler's rows never reached the queue",
            lambda: probe.info(refresh=True).model().queued_bulk_rows >= BOUND,
        )
    return server, _Threads(blocker, thread), filler


def test_info_shows_the_queue_by_class(held_queue):
    server, thread, _ = held_queue
    with embedtext.Client(server.target) as client:
        model = client.info(refresh=True).model()
    assert (model.queued_bulk_rows, model.waiting_bulk_callers, model.queued_interactive_rows) == (BOUND, 1, 0)
    server.release_bulk()
    thread.join(30)


def test_a_full_queue_refuses_with_a_retry_hint(held_queue):
    server, thread, _ = held_queue
    request = pb.EmbedRequest(texts=pb.TextList(texts=["one more"]), latency_class=pb.LATENCY_CLASS_BULK)
    with grpc.insecure_channel(server.target) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.EmbeddingStub(channel).Embed(request, timeout=10)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    hints = [int(v) for k, v in refused.value.trailing_metadata() if k == RETRY_PUSHBACK_KEY]
    assert len(hints) == 1 and hints[0] > 0
    server.release_bulk()
    thread.join(30)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_overload_is_retried_until_every_row_is_served(held_queue, kind):
    server, thread, filler = held_queue
    texts = [f"late {i}" for i in range(4)]
    if kind == "sync":

        def embed():
            with embedtext.Client(server.target, timeout=60) as client:
                return client.embed(texts, latency_class="bulk")

    else:

        def embed():
            async def run():
                async with embedtext.AsyncClient(server.target, timeout=60) as client:
                    return await client.embed(texts, latency_class="bulk")

            return asyncio.run(run())

    late = {}
    late_thread = _in_a_thread(embed, late)
    # it was refused while the queue was full; only then does the queue drain, and it must retry
    _wait_until("the late call was never refused", lambda: _refusals(server) >= 1)
    server.release_bulk()
    late_thread.join(60)
    thread.join(30)
    assert "error" not in late, late.get("error")
    with embedtext.Client(server.target, max_batch_rows=1) as client:  # each row alone: a reply per row
        np.testing.assert_array_equal(late["result"], client.embed(texts))
    assert filler["result"].shape[0] == BOUND


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_overload_that_outlasts_the_deadline_fails_saying_so(held_queue, kind):
    server, thread, _ = held_queue
    if kind == "sync":
        with embedtext.Client(server.target, timeout=0.5) as client, pytest.raises(OverloadedError) as failed:
            client.embed(["late"], latency_class="bulk")
    else:

        async def run():
            async with embedtext.AsyncClient(server.target, timeout=0.5) as client:
                await client.embed(["late"], latency_class="bulk")

        with pytest.raises(OverloadedError) as failed:
            asyncio.run(run())
    assert "still overloaded after" in str(failed.value) and "the deadline leaves" in str(failed.value)
    # Bookkeeping, not timing: each try the message counts was refused by the server (how many fit
    # in the deadline depends on the host; retrying to the end is test_overload_is_retried_...).
    tries = int(re.search(r"still overloaded after (\d+) tries", str(failed.value)).group(1))
    assert tries >= 1 and _refusals(server) >= tries
    server.release_bulk()
    thread.join(30)
