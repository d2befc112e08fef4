"""Bounds enforced by the gRPC layer, before any engine work: concurrent calls.

The other bounds are tested against real engines: message size and rows per request in
test_bad_input.py, the queue in test_load.py. This one runs on a server with the NULL ENGINE
(vectors derived from the token ids, no model; `embedtext serve --engine null`): the bound is checked before a
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
        args=["--set", "engine=null", "--set", f"max_concurrent_rpcs={MAX_RPCS}"],
        log_path=tmp_path_factory.mktemp("bounds") / "null.log",
    ).start()
    try:
        server.wait_ready(120)
        yield server
    finally:
        server.stop()


def test_calls_beyond_max_concurrent_rpcs_are_refused(bounded_null_server):
    """Streams (the reflection service's, which any client may open) are opened without sending
    anything until the refusals are in: grpc-aio's client
    reports a send that races the server's RESOURCE_EXHAUSTED as its own INTERNAL ("Failed
    execute_batch"), which would hide the server's answer (seen on a loaded 2-core CI box)."""
    refused_count = MAX_RPCS * 2

    from grpc_reflection.v1alpha import reflection_pb2

    async def run():
        send = asyncio.Event()

        async def held_requests():
            await send.wait()
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            await asyncio.Event().wait()  # keep the stream (and its RPC slot) open

        async with grpc.aio.insecure_channel(bounded_null_server.target) as channel:
            stream = channel.stream_stream(
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            calls = [stream(held_requests(), timeout=60) for _ in range(MAX_RPCS + refused_count)]
            codes = {asyncio.ensure_future(call.code()): call for call in calls}
            pending = set(codes)
            loop = asyncio.get_running_loop()
            give_up = loop.time() + 30
            while len(pending) > MAX_RPCS and loop.time() < give_up:
                _, pending = await asyncio.wait(
                    pending, timeout=give_up - loop.time(), return_when=asyncio.FIRST_COMPLETED
                )
            refused = [task.result() for task in codes if task not in pending]
            admitted = [codes[task] for task in pending]
            send.set()
            replies = [(await call.read()).WhichOneof("message_response") for call in admitted]
            for call in calls:
                call.cancel()
            for task in pending:
                task.cancel()
            # and once they are gone, calls are admitted again
            embed = channel.unary_unary(
                "/embedtext.v1.Embedding/Embed",
                request_serializer=pb.EmbedRequest.SerializeToString,
                response_deserializer=pb.EmbedResponse.FromString,
            )
            # The server frees a call's slot as it sees the cancellation: wait for that, not for a time.
            deadline = loop.time() + 30
            while True:
                try:
                    reply = await embed(pb.EmbedRequest(texts=pb.TextList(texts=["b"])), timeout=30)
                    break
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and loop.time() < deadline, exc
                    await asyncio.sleep(0.01)
            return refused, replies, reply.count

    refused, replies, count = asyncio.run(run())
    assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * refused_count
    assert replies == ["list_services_response"] * MAX_RPCS
    assert count == 1
