"""An in-process embedtext server on the NULL ENGINE, over a Unix socket: the client tests' peer.

The NULL ENGINE answers with vectors derived from each row's token count, not embeddings: these
tests check what the clients do (splitting, retries, deadlines, errors, assembly), which needs a
real gRPC server and real sockets but no model. It starts in about a second, without vLLM.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from embedtext.server.app import EmbeddingServer
from embedtext.server.config.settings import ServerConfig


class InProcessServer:
    """A real ``EmbeddingServer`` (null engine) on its own event loop thread; stop() ends it."""

    def __init__(self, socket: Path, **settings) -> None:
        self.target = f"unix:{socket}"
        self.config = ServerConfig(models=("default",), uds=str(socket), engine="null", **settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="null-server")
        self._thread.start()
        self.server = self._run(self._start())

    async def _start(self) -> EmbeddingServer:
        server = EmbeddingServer(self.config)
        await server.start()
        return server

    def _run(self, coroutine, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

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

    def start(socket: Path, **settings) -> InProcessServer:
        server = InProcessServer(socket, **settings)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
