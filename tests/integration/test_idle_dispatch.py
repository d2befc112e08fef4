"""Idle dispatch end to end: a single bulk row is not held back for a fuller batch while the engine
has nothing to do.

The server runs the NULL ENGINE (vectors from the token ids, no model; `--set engine=null`): what is tested is
the server's batching, which is the same code for every engine, and a real engine would only add
minutes of start-up. The batch delay is 60 s, so "waited for it" and "did not" differ by far more
than any machine's noise.
"""

import pytest

from embedtext.protocol import embedding_pb2 as pb

DELAY_MS = "60000"


@pytest.fixture(scope="module")
def delayed_null_server(tiny_model_dir, tmp_path_factory):
    from embedtext.connectors.local_server import LocalServer

    server = LocalServer(
        [f"tiny={tiny_model_dir}"],
        args=["--set", "engine=null", "--set", f"max_batch_delay_ms={DELAY_MS}"],
        log_path=tmp_path_factory.mktemp("idle-dispatch") / "idle-dispatch.log",
    )
    server.start()
    try:
        server.wait_ready(120)
        yield server
    finally:
        server.stop()


def test_a_single_row_goes_to_an_idle_engine_at_once(delayed_null_server):
    import grpc

    with grpc.insecure_channel(delayed_null_server.target) as channel:
        embed = channel.unary_unary(
            "/embedtext.v1.Embedding/Embed",
            request_serializer=pb.EmbedRequest.SerializeToString,
            response_deserializer=pb.EmbedResponse.FromString,
        )
        # Bulk: an interactive row never waits for a fuller batch, engine idle or not.
        request = pb.EmbedRequest(texts=pb.TextList(texts=["one lonely row"]), latency_class=pb.LATENCY_CLASS_BULK)
        reply = embed(request, timeout=20)  # DEADLINE_EXCEEDED: it sat out the 60 s delay
    assert reply.count == 1
    assert reply.queue_time_ns < 20e9
