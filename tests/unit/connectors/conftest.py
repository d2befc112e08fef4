"""An in-process embedtext server on the NULL ENGINE, over a Unix socket: the client tests' peer.

The NULL ENGINE answers with vectors derived from each row's token count, not embeddings: these
tests check what the clients do (splitting, retries, deadlines, errors, assembly), which needs a
real gRPC server and real sockets but no model. It starts in about a second, without vLLM.

A server for tests of a slow or busy server (deadlines, backpressure) runs a STAND-IN: the null
engine taking a fixed time for each batch (``engine_s``), or holding every batch of bulk rows until
the test releases it (``hold_bulk``). Rows that come while it is busy wait in the server's queue, as
they would behind a real engine's batches.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent import futures
from pathlib import Path
from unittest import mock

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from embedtext.server.app import EmbeddingServer
from embedtext.server.config.settings import ServerConfig
from embedtext.server.engine import null_backend


def slow_null_engine(seconds: float) -> type[null_backend.NullBackend]:
    """The null engine taking ``seconds`` for each batch (a test stand-in: a busy engine)."""

    class SlowNullBackend(null_backend.NullBackend):
        async def embed(self, rows, interactive_rows=0):
            await asyncio.sleep(seconds)
            return await super().embed(rows, interactive_rows)

    return SlowNullBackend


def held_null_engine(bulk_released: asyncio.Event) -> type[null_backend.NullBackend]:
    """The null engine holding each batch of bulk rows only until ``bulk_released`` is set (a test
    stand-in: an engine busy with bulk work for exactly as long as the test needs); batches with
    query rows are answered at once."""

    class HeldNullBackend(null_backend.NullBackend):
        async def embed(self, rows, interactive_rows=0):
            if not interactive_rows:
                await bulk_released.wait()
            return await super().embed(rows, interactive_rows)

    return HeldNullBackend


class InProcessServer:
    """A real ``EmbeddingServer`` (null engine) on its own event loop thread; stop() ends it.
    With ``engine_s``, its engines take that long for each batch; with ``hold_bulk``, they hold
    each batch of bulk rows until release_bulk()."""

    def __init__(self, socket: Path, engine_s: float = 0.0, hold_bulk: bool = False, **settings) -> None:
        assert not (engine_s and hold_bulk), "a stand-in engine is slow or held, not both"
        self.target = f"unix:{socket}"
        self.config = ServerConfig(models=("default",), uds=str(socket), engine="null", **settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="null-server")
        self._thread.start()
        self._bulk_released = asyncio.Event()
        if hold_bulk:
            engine = held_null_engine(self._bulk_released)
        else:
            engine = slow_null_engine(engine_s) if engine_s else null_backend.NullBackend
        with mock.patch.object(null_backend, "NullBackend", engine):  # the engines start with the server
            self.server = self._run(self._start())

    async def _start(self) -> EmbeddingServer:
        server = EmbeddingServer(self.config)
        await server.start()
        return server

    def _run(self, coroutine, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def release_bulk(self) -> None:
        """Let the held bulk batches run, and every later one at once."""
        self._loop.call_soon_threadsafe(self._bulk_released.set)

    def stop(self) -> None:
        if self.server is not None:
            self._run(self.server.stop(grace=0.1))
            self.server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="session")
def null_server(tmp_path_factory):
    server = InProcessServer(tmp_path_factory.mktemp("null") / "embedtext.sock")
    yield server
    server.stop()


@pytest.fixture
def spare_socket(tmp_path):
    """A socket path nothing listens on (yet)."""
    return tmp_path / "spare.sock"


@pytest.fixture
def start_server():
    """Start more in-process servers in a test; each is stopped at its end."""
    started: list[InProcessServer] = []

    def start(socket: Path, engine_s: float = 0.0, hold_bulk: bool = False, **settings) -> InProcessServer:
        server = InProcessServer(socket, engine_s, hold_bulk, **settings)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def cancelling_server(tmp_path):
    """A TEST STAND-IN for a server in the middle of shutting down: it answers every Embed call
    CANCELLED, as gRPC does for the calls a stopping server holds that no handler has taken yet
    (grpc/grpc#41785: the real race cannot be reproduced on demand). Its health service serves."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    def cancelled(request, context):
        context.abort(grpc.StatusCode.CANCELLED, "Cancelled")

    handler = grpc.method_handlers_generic_handler(
        "embedtext.v1.Embedding", {"Embed": grpc.unary_unary_rpc_method_handler(cancelled)}
    )
    server.add_generic_rpc_handlers((handler,))
    socket = tmp_path / "cancelling.sock"
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    yield f"unix:{socket}"
    server.stop(0)
