"""Client and AsyncClient against a real gRPC server on the NULL ENGINE over Unix sockets.

Both clients are one core driven two ways; every case runs through both and must give the same
vectors and the same errors (a congruence test, as qdrant-client tests its two clients).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest

import embedtext
from embedtext.connectors import client_core
from embedtext.connectors.client_config import ClientConfig
from embedtext.connectors.client_core import ClientCore
from embedtext.connectors.splitting import TextChunks
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotFoundError,
    UnavailableError,
)

TEXTS = ["a cat", "a kitten", "the stock market fell", "a cat", "x " * 40, "é accented ünïcode"]
LONG_TEXTS = ["The cat sat on the mat. " * 12, "", "short", "Dogs bark.\n\nCats purr. " * 9, "   "]


def both(target, method: str, *args, settings=None, **kwargs):
    """Call ``method`` on a Client and on an AsyncClient: (sync result or error, async result or error)."""
    settings = settings or {}

    def sync():
        with embedtext.Client(target, **settings) as client:
            return getattr(client, method)(*args, **kwargs)

    async def run_async():
        async with embedtext.AsyncClient(target, **settings) as client:
            return await getattr(client, method)(*args, **kwargs)

    out = []
    for call in (sync, lambda: asyncio.run(run_async())):
        try:
            out.append(call())
        except Exception as exc:  # noqa: BLE001 - the error is the result compared
            out.append(exc)
    return out


def same(a, b) -> None:
    if isinstance(a, TextChunks):
        assert isinstance(b, TextChunks) and a.to_arrow().equals(b.to_arrow()), (a, b)
        np.testing.assert_array_equal(a.counts, b.counts)
        return
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b), (a, b)
        assert str(a) == str(b)
        return
    if isinstance(a, pa.Array):
        assert a.type == b.type and a.equals(b)
        return
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "settings"),
    [
        ("embed", (TEXTS,), {}, {}),
        ("embed", (TEXTS,), {}, {"max_batch_rows": 2, "max_in_flight": 2}),
        ("embed", (TEXTS,), {"dimensions": 64, "normalize": False}, {"max_batch_rows": 4}),
        ("embed", (pa.array(TEXTS),), {}, {"reply_dtype": "float16"}),
        ("embed_arrow", (TEXTS,), {}, {"max_batch_rows": 5}),
        ("embed_arrow", ([],), {}, {}),
        ("embed", ([],), {"dimensions": 32}, {}),
        ("embed_tokens", ([[101, 2000, 102], [101, 102]],), {}, {"max_batch_rows": 1}),
        ("split", (LONG_TEXTS,), {"max_tokens": 20, "overlap": 4}, {"max_batch_rows": 2}),
        ("split", ([],), {}, {}),
        ("embed_chunks", (LONG_TEXTS,), {"max_tokens": 32, "dimensions": 64}, {"max_batch_rows": 3}),
        ("embed_chunks", ([],), {"dimensions": 32}, {}),
    ],
    ids=[
        "whole",
        "split-by-rows",
        "matryoshka",
        "float16-arrow-input",
        "arrow",
        "empty-arrow",
        "empty-dims",
        "tokens",
        "split",
        "split-nothing",
        "embed-chunks",
        "embed-chunks-nothing",
    ],
)
def test_both_clients_give_the_same_vectors(null_server, method, args, kwargs, settings):
    sync, in_async = both(null_server.target, method, *args, settings=settings, **kwargs)
    assert not isinstance(sync, Exception), sync
    same(sync, in_async)
    unsplit = {k: v for k, v in settings.items() if k == "reply_dtype"}
    whole = both(null_server.target, method, *args, settings=unsplit, **kwargs)[0]
    same(sync, whole)  # splitting never changes a vector or the row order


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "error", "message"),
    [
        ("embed", (["a"],), {"model": "no-such-model"}, ModelNotFoundError, "no-such-model"),
        ("embed", (["a"],), {"dimensions": 4096}, InvalidInputError, "dimensions"),
        ("embed", (["a", None],), {}, ValueError, "row 1"),
        ("embed", (["word " * 400],), {"truncate": False}, InvalidInputError, "tokens"),
        ("embed", (["a"],), {"modle": "typo"}, TypeError, "modle"),
        ("embed_tokens", ([[]],), {}, InvalidInputError, "empty"),
        ("info", (), {"timeout": 5}, None, None),
        ("split", (["a"],), {"max_tokens": 10, "overlap": 10}, InvalidInputError, "overlap 10 must be less"),
        ("split", (["a"],), {"max_tokens": 300}, InvalidInputError, "leave 254 for a chunk's text"),
        ("split", (["a"],), {"prompt_name": "query"}, InvalidInputError, "no prompt 'query'"),
        ("split", (["a", None],), {}, ValueError, "row 1"),
        ("split", (["a"],), {"max_tokens": 0}, ValueError, "at least 1"),
    ],
    ids=[
        "unknown-model",
        "bad-dims",
        "null-text",
        "too-long",
        "unknown-keyword",
        "empty-token-row",
        "info",
        "split-overlap",
        "split-too-large",
        "split-unknown-prompt",
        "split-null-text",
        "split-zero-size",
    ],
)
def test_both_clients_raise_the_same_errors(null_server, method, args, kwargs, error, message):
    sync, in_async = both(null_server.target, method, *args, **kwargs)
    if error is None:
        assert _without_loop_lag(sync) == _without_loop_lag(in_async)
        return
    same(sync, in_async)
    assert isinstance(sync, error) and message in str(sync), sync


def test_both_clients_have_the_same_api():
    def public(cls):
        return {n for n in dir(cls) if not n.startswith("_")}

    assert public(embedtext.Client) == public(embedtext.AsyncClient)
    for name in public(embedtext.Client) - {"config", "targets"}:  # properties, shared
        sync, in_async = getattr(embedtext.Client, name), getattr(embedtext.AsyncClient, name)
        assert asyncio.iscoroutinefunction(in_async), name
        assert list(inspect.signature(sync).parameters) == list(inspect.signature(in_async).parameters), name


def test_on_rows_reports_every_sub_batch(null_server):
    seen_sync, seen_async = [], []
    with embedtext.Client(null_server.target, max_batch_rows=4) as client:
        client.embed_arrow(TEXTS * 2, on_rows=seen_sync.append)

    async def run():
        async with embedtext.AsyncClient(null_server.target, max_batch_rows=4) as client:
            await client.embed_arrow(TEXTS * 2, on_rows=seen_async.append)

    asyncio.run(run())
    assert sorted(seen_sync) == sorted(seen_async) == [4, 4, 4]


def test_embed_request_and_wait_ready(null_server):
    request = pb.EmbedRequest(texts=pb.TextList(texts=["a", "b"]), request_id=7)
    sync, in_async = both(null_server.target, "embed_request", request)
    assert sync.count == in_async.count == 2 and sync.embeddings_f32le == in_async.embeddings_f32le
    ready_sync, ready_async = both(null_server.target, "wait_ready", 10)
    assert _without_loop_lag(ready_sync) == _without_loop_lag(ready_async) and ready_sync.default_model


def test_waiting_for_every_engine_counts_the_engines_still_starting(null_server):
    """Both clients wait on each endpoint's Info: none still starting, or a deadline that says how many are."""
    from types import SimpleNamespace

    from embedtext.connectors.client_core import ReadyWait
    from embedtext.protocol.errors import DeadlineExceededError

    ready_sync, ready_async = both(null_server.target, "wait_ready", 10, every_engine=True)
    assert [m.starting_replicas for m in ready_sync.models] == [m.starting_replicas for m in ready_async.models]
    assert not any(m.starting_replicas for m in ready_sync.models)
    starting = dataclasses.replace(ready_sync, models=(dataclasses.replace(ready_sync.models[0], starting_replicas=2),))
    endpoint = SimpleNamespace(target=null_server.target)
    assert ReadyWait([], 60).engines_up(endpoint, ready_sync)
    assert not ReadyWait([], 60).engines_up(endpoint, starting)  # before the deadline: wait on
    past = ReadyWait([], 0)
    past.deadline -= 1  # the deadline has passed
    with pytest.raises(DeadlineExceededError, match=r"server ready, but 2 engine\(s\) still starting after 0s"):
        past.engines_up(endpoint, starting)


def _without_loop_lag(info):
    """Info less how late the server's event loop ran: a moving reading, which two calls may differ in."""
    return dataclasses.replace(info, event_loop_lag_p99_ms=0.0, event_loop_lag_max_ms=0.0, event_loop_ticks=0)


def test_a_retry_after_unavailable_moves_to_another_endpoint(null_server, spare_socket):
    """One endpoint has no server: each sub-batch sent there is retried once on the live one."""
    dead = f"unix:{spare_socket}"
    want = both(null_server.target, "embed", TEXTS)[0]
    for make in ("sync", "async"):
        if make == "sync":
            with embedtext.Client([dead, null_server.target], max_batch_rows=1, timeout=30) as client:
                got = client.embed(TEXTS)
                endpoints = client._core.endpoints
        else:

            async def run():
                async with embedtext.AsyncClient([dead, null_server.target], max_batch_rows=1, timeout=30) as client:
                    return await client.embed(TEXTS), client._core.endpoints

            got, endpoints = asyncio.run(run())
        np.testing.assert_array_equal(got, want)
        by_target = {e.target: e for e in endpoints.endpoints}
        assert by_target[dead].failures >= 1  # it was tried, failed, and is avoided from then on
        assert by_target[null_server.target].calls >= len(TEXTS)  # every row was answered there
        assert endpoints.inflight_rows == 0  # leases returned


def test_a_dead_server_is_a_clear_unavailable_error_within_the_deadline(spare_socket, monkeypatch):
    # a shorter reconnect wait than the default, so the test does not sit out 5 s per client
    monkeypatch.setattr(client_core, "RECONNECT_WAIT_S", 0.5)
    sync, in_async = both(f"unix:{spare_socket}", "embed", ["a"], settings={"timeout": 20})
    same(sync, in_async)
    assert isinstance(sync, UnavailableError) and "embedtext serve" in str(sync)
    # the retry's wait is bounded by RECONNECT_WAIT_S, not by the deadline or gRPC's reconnect backoff
    assert "waited 0.5s for it to come back" in str(sync)


def test_deadlines_are_kept(start_server, tmp_path):
    """A server whose engine takes 3 s a batch, and a 0.3 s deadline."""
    slow = start_server(tmp_path / "slow.sock", engine_s=3.0)
    sync, in_async = both(slow.target, "embed", ["a"], timeout=0.3, latency_class="bulk")
    # Without the deadline both would succeed once the batch closes: the error is the check.
    assert isinstance(sync, DeadlineExceededError) and isinstance(in_async, DeadlineExceededError)
    default_deadline = both(slow.target, "embed", ["a"], settings={"timeout": 0.3, "latency_class": "bulk"})
    assert all(isinstance(e, DeadlineExceededError) for e in default_deadline)


def test_planning_splits_by_rows_and_by_bytes():
    core = ClientCore("unix:/unused.sock", ClientConfig(max_batch_rows=3), open_channel=None)
    job = core.plan_texts([str(i) for i in range(10)], {}, "ndarray")
    assert [(b.start, b.stop) for b in job.batches] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    big = "b" * (6 * 1024 * 1024)
    job = core.plan_texts([big, big, big, "c"], {}, "arrow")  # 18 MiB of text: over one request's 16 MiB
    spans = [(b.start, b.stop) for b in job.batches]
    assert spans[0][0] == 0 and spans[-1][1] == 4 and len(spans) >= 2
    assert all(sum(len(t) for t in [big, big, big, "c"][a:b]) <= 16 * 1024 * 1024 for a, b in spans)
    assert all(b.request.truncation == pb.TRUNCATION_END for b in job.batches)


def test_client_config_is_one_source(null_server):
    config = ClientConfig(max_batch_rows=7, timeout=12.0)
    with embedtext.Client(null_server.target, config, max_in_flight=3) as client:
        assert client.config == ClientConfig(max_batch_rows=7, timeout=12.0, max_in_flight=3)
    with pytest.raises(TypeError, match="max_batch"):
        embedtext.Client(null_server.target, max_batch=3)
    with pytest.raises(ValueError, match="at least 1"):
        embedtext.AsyncClient(null_server.target, max_in_flight=0)


def test_an_async_query_does_not_wait_behind_the_same_clients_bulk_sub_batches(start_server, tmp_path):
    """One AsyncClient, one slot: a bulk call's 20 sub-batches go one after another, and the server's
    engine holds the first until the test lets it go; a one-row query sent meanwhile has slots of
    its own, and is answered while the bulk call is held (with one shared bound it would queue
    behind the held sub-batch until its deadline)."""
    server = start_server(tmp_path / "held.sock", hold_bulk=True)
    registry = server.server.metrics.registry
    labels = {"model": "all-MiniLM-L6-v2", "replica": "0"}
    finished: list[str] = []

    async def run():
        async with embedtext.AsyncClient(server.target, max_in_flight=1, max_batch_rows=2, timeout=60) as client:

            async def call(name, texts, latency_class):
                await client.embed(texts, latency_class=latency_class)
                finished.append(name)

            bulk = asyncio.ensure_future(call("bulk", [f"row {i}" for i in range(40)], "bulk"))
            # Once its first sub-batch is held in the engine, the others wait on the client's one slot.
            waited = time.monotonic() + 30
            while registry.get_sample_value("embedtext_replica_inflight_batches", labels) != 1:
                assert time.monotonic() < waited, "the bulk call's first sub-batch never reached the engine"
                await asyncio.sleep(0.01)
            await call("query", ["which table holds the invoices"], "interactive")
            assert finished == ["query"]  # the bulk call is still held
            server.release_bulk()
            await bulk

    asyncio.run(run())
    assert finished == ["query", "bulk"]


def test_a_retry_on_a_slow_survivor_gets_the_whole_deadline(
    null_server, start_server, spare_socket, tmp_path, monkeypatch
):
    """The first endpoint has no server, the second answers each batch after 1.5 s: the retry waits
    at most RECONNECT_WAIT_S (1 s here: ample for a local health check, however busy the host) for
    a connection, then has the caller's whole deadline for its answer."""
    monkeypatch.setattr(client_core, "RECONNECT_WAIT_S", 1.0)
    slow = start_server(tmp_path / "slow.sock", engine_s=1.5)
    sync, in_async = both([f"unix:{spare_socket}", slow.target], "embed", ["a"], timeout=20)
    same(sync, in_async)
    np.testing.assert_array_equal(sync, both(null_server.target, "embed", ["a"])[0])
    # A deadline shorter than the survivor's answer is the caller's deadline, not a server gone.
    sync, in_async = both([f"unix:{spare_socket}", slow.target], "embed", ["a"], timeout=1.2)
    assert isinstance(sync, DeadlineExceededError) and isinstance(in_async, DeadlineExceededError)
    assert "come back" not in str(sync) and "come back" not in str(in_async)


def test_a_call_the_server_cancels_is_retried_like_unavailable(null_server, cancelling_server):
    """A call a stopping server cancels did not run to completion: it is retried on the other
    endpoint, as after UNAVAILABLE, not raised as a cancel its caller never asked for."""
    want = both(null_server.target, "embed", TEXTS, settings={"max_batch_rows": 1})[0]  # each row alone
    sync, in_async = both([cancelling_server, null_server.target], "embed", TEXTS, settings={"timeout": 30})
    same(sync, in_async)
    np.testing.assert_array_equal(sync, want)


def test_a_call_cancelled_by_the_only_server_is_an_unavailable_error(cancelling_server, monkeypatch):
    monkeypatch.setattr(client_core, "RECONNECT_WAIT_S", 0.5)
    sync, in_async = both(cancelling_server, "embed", ["a"], settings={"timeout": 30})
    same(sync, in_async)
    assert isinstance(sync, UnavailableError), sync
    message = str(sync)
    assert "before it finished" in message and "embedtext serve" in message and cancelling_server in message
    assert "waited 0.5s for it to come back" in message


def test_chunks_are_the_texts_spans_and_embed_as_their_texts(null_server):
    """The chunks' texts are their spans of the inputs, in order, and each chunk's vector is the
    vector of its text (the null engine's vectors differ per text: a swapped chunk shows), also when
    the texts go in several split requests (two texts each here)."""
    with embedtext.Client(null_server.target, max_batch_rows=2) as client:
        chunks = client.embed_chunks(LONG_TEXTS, max_tokens=16, overlap=3)
        assert chunks.counts.tolist()[1:3] == [0, 1] and chunks.counts[4] == 0
        assert chunks.counts[0] > 1 and chunks.counts[3] > 1
        assert chunks.row.tolist() == sorted(chunks.row.tolist())
        for row, index, start, end, text in zip(chunks.row, chunks.index, chunks.start, chunks.end, chunks.text):
            assert LONG_TEXTS[row][start:end] == text and text == text.strip()
        assert [i for r, i in zip(chunks.row, chunks.index) if r == 0] == list(range(chunks.counts[0]))
        np.testing.assert_array_equal(chunks.vectors, client.embed(chunks.text))
        means = chunks.mean_vectors(normalize=True)
        assert np.isnan(means[1]).all() and not np.isnan(means[0]).any()
        np.testing.assert_allclose(means[2], client.embed(["short"])[0], rtol=1e-6)
        want = chunks.vectors[chunks.row == 0].mean(0)
        np.testing.assert_allclose(means[0], want / np.linalg.norm(want), rtol=1e-5)
        table = chunks.to_arrow()
        assert table.column_names == ["row", "chunk_index", "start", "end", "tokens", "text", "embedding"]


def test_a_chunk_text_that_repeats_is_embedded_once(null_server):
    """A chunk's text that repeats (a document given twice, a sentence repeated in one) goes to the
    server once, and every chunk still gets its own text's vector, in both clients."""
    texts = [LONG_TEXTS[0], "short", LONG_TEXTS[0]]
    with embedtext.Client(null_server.target) as client:
        sent: list[int] = []
        embed = client.embed

        def counted(texts, **options):
            sent.append(len(texts))
            return embed(texts, **options)

        with mock.patch.object(client, "embed", counted):
            chunks = client.embed_chunks(texts, max_tokens=16)
        assert sent == [len(set(chunks.text))] and len(chunks) > sent[0]
        np.testing.assert_array_equal(chunks.vectors, client.embed(chunks.text))
    same(chunks, both(null_server.target, "embed_chunks", texts, max_tokens=16)[1])


def test_split_requests_keep_to_their_byte_budget():
    from embedtext.connectors import splitting

    texts = pa.array(["x" * 60, "y" * 60, "z" * 30, "w" * 30])
    options = splitting.SplitOptions(max_tokens=8, overlap=2)
    batches = splitting.plan_split_requests(texts, options, max_rows=10, max_bytes=100)
    assert [(b.start, b.stop) for b in batches] == [(0, 1), (1, 2), (2, 4)]  # halved until under 100 bytes
    assert [b.request.request_id for b in batches] == [0, 1, 2]
    assert batches[0].request.max_tokens == 8 and batches[0].request.overlap_tokens == 2
