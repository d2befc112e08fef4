"""Bounds enforced by the gRPC layer, before any engine work: concurrent calls.

The other bounds are tested against real engines: message size and rows per request in
test_bad_input.py, the queue in test_load.py. This one runs on a server with the NULL ENGINE
(fixed vectors, no model; `embedtext serve --engine null`): the bound is checked before a
request reaches an engine, and a real one would only add a minute of start-up.
"""

import asyncio

import grpc
import pytest

from embedtext.protocol import embedding_pb2 as pb

MAX_RPCS = 4


@pytest.fixture(scope="module")
def bounded_null_server(tiny_model_dir, tmp_path_factory):
    from embedtext.connectors.local_server import LocalServer

    server = LocalServer(
        [f"tiny={tiny_model_dir}"],
        args=["--engine", "null", "--max-concurrent-rpcs", str(MAX_RPCS)],
        log_path=tmp_path_factory.mktemp("bounds") / "null.log",
    ).start()
    try:
        server.wait_ready(120)
        yield server
    finally:
        server.stop()


def test_calls_beyond_max_concurrent_rpcs_are_refused(bounded_null_server):
    async def run():
        release = asyncio.Event()

        async def held_requests():
            yield pb.EmbedRequest(texts=pb.TextList(texts=["a"]), request_id=1)
            await release.wait()  # keep the stream (and its RPC slot) open

        async with grpc.aio.insecure_channel(bounded_null_server.target) as channel:
            stream = channel.stream_stream(
                "/embedtext.v1.Embedding/EmbedStream",
                request_serializer=pb.EmbedRequest.SerializeToString,
                response_deserializer=pb.EmbedStreamResponse.FromString,
            )
            calls = [stream(held_requests(), timeout=30) for _ in range(MAX_RPCS * 3)]

            async def first_reply(call):
                try:
                    return (await call.read()).WhichOneof("outcome")
                except grpc.aio.AioRpcError as exc:
                    return exc.code()

            outcomes = await asyncio.gather(*(first_reply(c) for c in calls))
            release.set()
            for call in calls:
                call.cancel()
            # and once they are gone, calls are admitted again
            embed = channel.unary_unary(
                "/embedtext.v1.Embedding/Embed",
                request_serializer=pb.EmbedRequest.SerializeToString,
                response_deserializer=pb.EmbedResponse.FromString,
            )
            await asyncio.sleep(0.5)
            reply = await embed(pb.EmbedRequest(texts=pb.TextList(texts=["b"])), timeout=30)
            return outcomes, reply.count

    outcomes, count = asyncio.run(run())
    assert outcomes.count("response") == MAX_RPCS
    assert outcomes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == len(outcomes) - MAX_RPCS
    assert count == 1
