"""Idle dispatch end to end: a single bulk row is not held back for a fuller batch while the engine
has nothing to do (`embedtext serve --idle-dispatch`, the default), and `--no-idle-dispatch`
brings the wait back.

Both servers run the NULL ENGINE (fixed vectors, no model; `embedtext serve --engine null`):
what is tested is the server's batching, which is the same code for every engine, and a real
engine would only add minutes of start-up. The batch delay is 60 s, so "waited for it" and
"did not" differ by far more than any machine's noise.
"""

import grpc
import pytest

from embedtext.protocol import embedding_pb2 as pb

DELAY_MS = "60000"


@pytest.fixture(scope="module")
def delayed_null_servers(tiny_model_dir, tmp_path_factory):
    from embedtext.connectors.local_server import LocalServer

    logs = tmp_path_factory.mktemp("idle-dispatch")
    servers = {
        dispatch: LocalServer(
            [f"tiny={tiny_model_dir}"],
            args=[
                "--set",
                "engine=null",
                "--set",
                f"max_batch_delay_ms={DELAY_MS}",
                "--set",
                f"idle_dispatch={dispatch}",
            ],
            log_path=logs / f"idle-dispatch-{dispatch}.log",
        )
        for dispatch in ("on", "off")
    }
    for server in servers.values():
        server.start()
    try:
        for server in servers.values():
            server.wait_ready(120)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _embed_one(target: str, timeout: float) -> pb.EmbedResponse:
    with grpc.insecure_channel(target) as channel:
        embed = channel.unary_unary(
            "/embedtext.v1.Embedding/Embed",
            request_serializer=pb.EmbedRequest.SerializeToString,
            response_deserializer=pb.EmbedResponse.FromString,
        )
        # Bulk: an interactive row never waits for a fuller batch, engine idle or not.
        request = pb.EmbedRequest(texts=pb.TextList(texts=["one lonely row"]), latency_class=pb.LATENCY_CLASS_BULK)
        return embed(request, timeout=timeout)


def test_a_single_row_goes_to_an_idle_engine_at_once(delayed_null_servers):
    reply = _embed_one(delayed_null_servers["on"].target, timeout=20)
    assert reply.count == 1
    assert reply.queue_time_ns < 20e9  # it did not sit out the 60 s delay


def test_without_idle_dispatch_a_single_row_waits_for_the_batch_delay(delayed_null_servers):
    with pytest.raises(grpc.RpcError) as raised:
        _embed_one(delayed_null_servers["off"].target, timeout=3)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
