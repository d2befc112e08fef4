"""``embedtext.Client`` and ``embedtext.AsyncClient``: embeddings from an embedtext server.

Both split large inputs into sub-batches kept in flight concurrently (the GIL is released
while waiting), spread them over several endpoints by rows in flight, and retry a
sub-batch once on another endpoint when a server is UNAVAILABLE, within the deadline.
Failures raise the typed exceptions of :mod:`embedtext.protocol.errors`.

Example (needs a running ``embedtext serve``)::

    >>> import embedtext
    >>> with embedtext.Client("127.0.0.1:50051") as client:   # doctest: +SKIP
    ...     vectors = client.embed(["a cat", "a kitten"])
    ...     vectors.shape
    (2, 384)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
import numpy as np
import pyarrow as pa

from embedtext.connectors.endpoints import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Endpoint,
    EndpointSet,
    channel_options,
    embed_method,
    normalize_targets,
)
from embedtext.connectors.requests import (
    RequestOptions,
    SubBatch,
    plan_text_requests,
    plan_token_requests,
    reply_to_arrow,
    reply_to_ndarray,
    stack_arrow,
    stack_ndarrays,
)
from embedtext.connectors.security import ChannelSecurity, TLSConfig
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol import embedding_pb2_grpc as pb_grpc
from embedtext.protocol.errors import (
    DeadlineExceededError,
    EmbedTextError,
    InvalidInputError,
    ModelNotFoundError,
    from_rpc_error,
)

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_BATCH_ROWS = 2048
DEFAULT_IN_FLIGHT = 8
RECONNECT_WAIT_S = 5.0
# float32: raw little-endian bytes (zero copy); float16: half the bytes; float32-repeated: a
# protobuf `repeated float` (slow, for comparison).
_REPLY_DTYPES = {
    "float32": pb.OUTPUT_DTYPE_FLOAT32,
    "float16": pb.OUTPUT_DTYPE_FLOAT16,
    "float32-repeated": pb.OUTPUT_DTYPE_FLOAT32_REPEATED,
}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    aliases: tuple[str, ...]
    dim: int
    max_tokens: int
    matryoshka_dimensions: tuple[int, ...]
    normalize_default: bool
    pooling: str
    replicas: int

    def output_dim(self, dimensions: int | None) -> int:
        """The size of the vectors asked for: ``dimensions`` (Matryoshka) or the full dim."""
        if dimensions is not None and not 0 < dimensions <= self.dim:
            raise InvalidInputError(f"dimensions={dimensions} is not available: model {self.name} has {self.dim}")
        return dimensions or self.dim


@dataclass(frozen=True)
class ServerInfo:
    protocol_version: str
    server_version: str
    default_model: str
    models: tuple[ModelInfo, ...]
    max_batch_rows: int
    max_message_bytes: int

    def model(self, name: str | None = None) -> ModelInfo:
        """The served model called ``name`` (or an alias of it); the default model for None."""
        wanted = name or self.default_model
        for m in self.models:
            if wanted == m.name or wanted in m.aliases:
                return m
        served = ", ".join(m.name for m in self.models)
        raise ModelNotFoundError(f"model {wanted!r} is not served; served models: {served}")

    @classmethod
    def from_proto(cls, r: pb.InfoResponse) -> ServerInfo:
        return cls(
            protocol_version=r.protocol_version,
            server_version=r.server_version,
            default_model=r.default_model,
            models=tuple(
                ModelInfo(
                    name=m.name,
                    aliases=tuple(m.aliases),
                    dim=m.dim,
                    max_tokens=m.max_tokens,
                    matryoshka_dimensions=tuple(m.matryoshka_dimensions),
                    normalize_default=m.normalize_default,
                    pooling=m.pooling,
                    replicas=m.replicas,
                )
                for m in r.models
            ),
            max_batch_rows=r.max_batch_rows,
            max_message_bytes=r.max_message_bytes,
        )


class _ClientBase:
    def __init__(
        self,
        target: str | Sequence[str] | None,
        *,
        timeout: float | None,
        max_batch_rows: int,
        max_in_flight: int,
        max_message_bytes: int,
        token: str | None,
        tls: TLSConfig | bool | str | None,
        reply_dtype: str,
    ) -> None:
        if max_batch_rows < 1 or max_in_flight < 1:
            raise ValueError("max_batch_rows and max_in_flight must be at least 1")
        if reply_dtype not in _REPLY_DTYPES:
            raise ValueError(f"reply_dtype must be one of {', '.join(_REPLY_DTYPES)}")
        self.targets = normalize_targets(target)
        self.security = ChannelSecurity.from_args(tls, token)
        self._metadata = self.security.metadata
        self._output_dtype = _REPLY_DTYPES[reply_dtype]
        self.timeout = timeout
        self.max_batch_rows = max_batch_rows
        self.max_in_flight = max_in_flight
        self._options = channel_options(max_message_bytes)
        self._info: ServerInfo | None = None

    def _deadline(self, timeout: float | None) -> float | None:
        t = self.timeout if timeout is None else timeout
        return time.monotonic() + t if t is not None else None

    @staticmethod
    def _remaining(deadline: float | None, target: str) -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError("the client deadline passed before all sub-batches were answered", target=target)
        return left

    def _attempt_timeout(self, deadline: float | None, target: str, attempt: int) -> float | None:
        """The timeout of one attempt.

        UNAVAILABLE means the call did not run to completion; embedding is idempotent, so it
        is retried once, on another endpoint if there is one. The retry waits for the channel
        to (re)connect, but at most RECONNECT_WAIT_S: a server restarting within that time is
        invisible, and a dead one is a clear UnavailableError soon, not a hang.
        """
        remaining = self._remaining(deadline, target)
        if attempt == 0:
            return remaining
        return RECONNECT_WAIT_S if remaining is None else min(remaining, RECONNECT_WAIT_S)

    @staticmethod
    def _call_error(exc: grpc.RpcError, first: grpc.RpcError | None, waited: float | None, target: str) -> EmbedTextError:
        if first is not None and exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            # The retry waited for a server that never came back: the cause is the first
            # failure (UNAVAILABLE), not the deadline.
            error = from_rpc_error(first, target=target)
            error.message += f" (waited {waited:.1f}s for it to come back)"
            return error
        return from_rpc_error(exc, target=target)

    def _request_options(self, model, dimensions, normalize, truncate) -> RequestOptions:
        return RequestOptions(model, dimensions, normalize, truncate, output_dtype=self._output_dtype)

    def _empty_dim(self, info: ServerInfo, options: RequestOptions) -> int:
        return options.dimensions or info.model(options.model).dim


class Client(_ClientBase):
    """Blocking client. Thread-safe; one instance can serve a whole program.

    Args:
        target: ``host:port``, ``unix:PATH``, or a list of them (spread by load).
        timeout: deadline in seconds for one ``embed`` call, all sub-batches together.
        max_batch_rows: rows per request; larger inputs are split.
        max_in_flight: sub-batches in flight at once.
        token: the server's ``--token``, sent as ``authorization: Bearer`` on every call
            (refused over plain TCP to a non-loopback host).
        tls: None (plain), True (TLS, system trust store), a CA file path, or a
            :class:`~embedtext.connectors.security.TLSConfig` (with a client certificate for mutual TLS).
        reply_dtype: ``"float32"`` (raw bytes, zero copy), ``"float16"`` (half the bytes) or
            ``"float32-repeated"`` (protobuf repeated float; slow, for comparison).
    """

    def __init__(
        self,
        target: str | Sequence[str] | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_batch_rows: int = DEFAULT_BATCH_ROWS,
        max_in_flight: int = DEFAULT_IN_FLIGHT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        token: str | None = None,
        tls: TLSConfig | bool | str | None = None,
        reply_dtype: str = "float32",
    ) -> None:
        super().__init__(
            target,
            timeout=timeout,
            max_batch_rows=max_batch_rows,
            max_in_flight=max_in_flight,
            max_message_bytes=max_message_bytes,
            token=token,
            tls=tls,
            reply_dtype=reply_dtype,
        )
        endpoints = []
        for t in self.targets:
            channel = self.security.open_channel(t, self._options)
            endpoints.append(Endpoint(t, channel, pb_grpc.EmbeddingStub(channel), embed_method(channel)))
        self._endpoints = EndpointSet(endpoints)
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="embedtext-client")

    # --- public API ----------------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str] | pa.Array | pa.ChunkedArray,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> np.ndarray:
        """Embed texts; returns a float32 array of shape (len(texts), dim), rows in input order."""
        options = self._request_options(model, dimensions, normalize, truncate)
        n, batches = plan_text_requests(texts, options, self.max_batch_rows)
        replies = self._run(batches, timeout)
        parts = [reply_to_ndarray(r, b.stop - b.start) for r, b in zip(replies, batches)]
        return stack_ndarrays(parts, n, self._empty_dim(self.info(), options) if not parts else 0)

    def embed_arrow(
        self,
        texts: Sequence[str] | pa.Array | pa.ChunkedArray,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
        on_rows: Callable[[int], None] | None = None,
    ) -> pa.FixedSizeListArray:
        """Embed texts; returns ``FixedSizeList<float32>[dim]`` built on the reply bytes.

        ``on_rows(n)`` is called as each sub-batch of n rows is answered (progress bars).
        """
        options = self._request_options(model, dimensions, normalize, truncate)
        _, batches = plan_text_requests(texts, options, self.max_batch_rows)
        replies = self._run(batches, timeout, on_rows)
        parts = [reply_to_arrow(r, b.stop - b.start) for r, b in zip(replies, batches)]
        return stack_arrow(parts, self._empty_dim(self.info(), options) if not parts else 0)

    def embed_tokens(
        self,
        token_ids: Sequence[Sequence[int]],
        *,
        model: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> np.ndarray:
        """Embed pre-tokenized rows (the model's own token ids)."""
        options = self._request_options(model, dimensions, normalize, truncate)
        n, batches = plan_token_requests(token_ids, options, self.max_batch_rows)
        replies = self._run(batches, timeout)
        parts = [reply_to_ndarray(r, b.stop - b.start) for r, b in zip(replies, batches)]
        return stack_ndarrays(parts, n, self._empty_dim(self.info(), options) if not parts else 0)

    def embed_request(self, request: pb.EmbedRequest, *, timeout: float | None = None) -> pb.EmbedResponse:
        """Send one raw ``EmbedRequest`` as it is (no splitting); for tools and tests."""
        return self._call(SubBatch(0, 0, request), self._deadline(timeout))

    def info(self, *, refresh: bool = False, timeout: float | None = 10.0) -> ServerInfo:
        """What the server serves (cached after the first call)."""
        if self._info is None or refresh:
            endpoint = self._endpoints.pick()
            try:
                reply = endpoint.stub.Info(pb.InfoRequest(), timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, target=endpoint.target) from None
            self._info = ServerInfo.from_proto(reply)
        return self._info

    def wait_ready(self, timeout: float = 300.0) -> ServerInfo:
        """Block until every endpoint reports SERVING on the health service."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout
        for endpoint in self._endpoints.endpoints:
            stub = health_pb2_grpc.HealthStub(endpoint.channel)
            while True:
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise DeadlineExceededError(f"server not ready after {timeout:.0f}s", target=endpoint.target)
                time.sleep(0.2)
        return self.info(refresh=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for endpoint in self._endpoints.endpoints:
            endpoint.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- calls ---------------------------------------------------------------------------

    def _call(self, batch: SubBatch, deadline: float | None) -> pb.EmbedResponse:
        avoid: list[Endpoint] = []
        rows = max(batch.stop - batch.start, 1)
        first: grpc.RpcError | None = None
        for attempt in range(2):
            with self._endpoints.lease(rows, avoid) as endpoint:
                timeout = self._attempt_timeout(deadline, endpoint.target, attempt)
                try:
                    return endpoint.embed(
                        batch.request, timeout=timeout, metadata=self._metadata, wait_for_ready=attempt > 0
                    )
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.UNAVAILABLE and attempt == 0:
                        first = exc
                        endpoint.failures += 1
                        avoid.append(endpoint)
                        continue
                    raise self._call_error(exc, first, timeout, endpoint.target) from None
        raise AssertionError("unreachable")

    def _run(
        self, batches: list[SubBatch], timeout: float | None, on_rows: Callable[[int], None] | None = None
    ) -> list[pb.EmbedResponse]:
        deadline = self._deadline(timeout)
        if len(batches) == 1:
            reply = self._call(batches[0], deadline)
            if on_rows is not None:
                on_rows(batches[0].stop - batches[0].start)
            return [reply]
        futures = [self._pool.submit(self._call, b, deadline) for b in batches]
        if on_rows is not None:
            for future, batch in zip(futures, batches):
                future.add_done_callback(
                    lambda f, n=batch.stop - batch.start: on_rows(n) if not f.cancelled() and f.exception() is None else None
                )
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


class AsyncClient(_ClientBase):
    """The asyncio twin of :class:`Client`; create and use it inside a running event loop."""

    def __init__(
        self,
        target: str | Sequence[str] | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_batch_rows: int = DEFAULT_BATCH_ROWS,
        max_in_flight: int = DEFAULT_IN_FLIGHT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        token: str | None = None,
        tls: TLSConfig | bool | str | None = None,
        reply_dtype: str = "float32",
    ) -> None:
        super().__init__(
            target,
            timeout=timeout,
            max_batch_rows=max_batch_rows,
            max_in_flight=max_in_flight,
            max_message_bytes=max_message_bytes,
            token=token,
            tls=tls,
            reply_dtype=reply_dtype,
        )
        endpoints = []
        for t in self.targets:
            channel = self.security.open_aio_channel(t, self._options)
            endpoints.append(Endpoint(t, channel, pb_grpc.EmbeddingStub(channel), embed_method(channel)))
        self._endpoints = EndpointSet(endpoints)
        self._slots = asyncio.Semaphore(max_in_flight)

    async def embed(
        self,
        texts: Sequence[str] | pa.Array | pa.ChunkedArray,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> np.ndarray:
        options = self._request_options(model, dimensions, normalize, truncate)
        n, batches = plan_text_requests(texts, options, self.max_batch_rows)
        replies = await self._run(batches, timeout)
        parts = [reply_to_ndarray(r, b.stop - b.start) for r, b in zip(replies, batches)]
        return stack_ndarrays(parts, n, self._empty_dim(await self.info(), options) if not parts else 0)

    async def embed_arrow(
        self,
        texts: Sequence[str] | pa.Array | pa.ChunkedArray,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> pa.FixedSizeListArray:
        options = self._request_options(model, dimensions, normalize, truncate)
        _, batches = plan_text_requests(texts, options, self.max_batch_rows)
        replies = await self._run(batches, timeout)
        parts = [reply_to_arrow(r, b.stop - b.start) for r, b in zip(replies, batches)]
        return stack_arrow(parts, self._empty_dim(await self.info(), options) if not parts else 0)

    async def embed_tokens(
        self,
        token_ids: Sequence[Sequence[int]],
        *,
        model: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> np.ndarray:
        options = self._request_options(model, dimensions, normalize, truncate)
        n, batches = plan_token_requests(token_ids, options, self.max_batch_rows)
        replies = await self._run(batches, timeout)
        parts = [reply_to_ndarray(r, b.stop - b.start) for r, b in zip(replies, batches)]
        return stack_ndarrays(parts, n, self._empty_dim(await self.info(), options) if not parts else 0)

    async def info(self, *, refresh: bool = False, timeout: float | None = 10.0) -> ServerInfo:
        if self._info is None or refresh:
            endpoint = self._endpoints.pick()
            try:
                reply = await endpoint.stub.Info(pb.InfoRequest(), timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, target=endpoint.target) from None
            self._info = ServerInfo.from_proto(reply)
        return self._info

    async def close(self) -> None:
        for endpoint in self._endpoints.endpoints:
            await endpoint.channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, batch: SubBatch, deadline: float | None) -> pb.EmbedResponse:
        avoid: list[Endpoint] = []
        rows = max(batch.stop - batch.start, 1)
        async with self._slots:
            first: grpc.RpcError | None = None
            for attempt in range(2):
                with self._endpoints.lease(rows, avoid) as endpoint:
                    timeout = self._attempt_timeout(deadline, endpoint.target, attempt)
                    try:
                        return await endpoint.embed(
                            batch.request, timeout=timeout, metadata=self._metadata, wait_for_ready=attempt > 0
                        )
                    except grpc.RpcError as exc:
                        if exc.code() == grpc.StatusCode.UNAVAILABLE and attempt == 0:
                            first = exc
                            endpoint.failures += 1
                            avoid.append(endpoint)
                            continue
                        raise self._call_error(exc, first, timeout, endpoint.target) from None
        raise AssertionError("unreachable")

    async def _run(self, batches: list[SubBatch], timeout: float | None) -> list[pb.EmbedResponse]:
        deadline = self._deadline(timeout)
        tasks = [asyncio.ensure_future(self._call(b, deadline)) for b in batches]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


def embed_rows_separately(
    embed: Callable[[pa.Array], pa.FixedSizeListArray], texts: pa.Array
) -> tuple[list[int], pa.FixedSizeListArray | None, dict[int, str]]:
    """After the server refused a batch: embed each row on its own to find the rows it refuses.

    Returns the indices of the rows embedded, their vectors (in that order; None if none
    was), and ``{row: error}`` for the rows refused. Only InvalidInputError marks a row as
    refused; anything else (a dead server) propagates.
    """
    embedded: list[int] = []
    vectors: list[pa.FixedSizeListArray] = []
    refused: dict[int, str] = {}
    for i in range(len(texts)):
        try:
            vectors.append(embed(texts.slice(i, 1)))
            embedded.append(i)
        except InvalidInputError as exc:
            refused[i] = str(exc)
    return embedded, (pa.concat_arrays(vectors) if vectors else None), refused


__all__ = ["AsyncClient", "Client", "EmbedTextError", "ModelInfo", "ServerInfo", "embed_rows_separately"]
