"""``embedtext.Client`` and ``embedtext.AsyncClient``: embeddings from an embedtext server.

Both split large inputs into sub-batches kept in flight concurrently (the GIL is released
while waiting), spread them over several endpoints by rows in flight, and retry a
sub-batch once on another endpoint when a server is UNAVAILABLE, within the deadline.
Failures raise the typed exceptions of :mod:`embedtext.protocol.errors`. Both have the same
methods, the same settings (:class:`~embedtext.connectors.client_config.ClientConfig`) and the
same core (:mod:`embedtext.connectors.client_core`); they differ only in how they wait.

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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Unpack

import numpy as np
import pyarrow as pa
from grpc import RpcError

from embedtext.connectors.client_config import ClientConfig
from embedtext.connectors.client_core import (
    READY_POLL_S,
    ClientCore,
    EmbedJob,
    EmbedOptions,
    health_request,
    typed_errors,
)
from embedtext.connectors.requests import SubBatch
from embedtext.connectors.security import ChannelSecurity
from embedtext.connectors.server_info import ModelInfo, ServerInfo
from embedtext.connectors.splitting import SplitOptions, TextChunks
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import EmbedTextError

Texts = Sequence[str] | pa.Array | pa.ChunkedArray


class Client:
    """Blocking client. Thread-safe; one instance can serve a whole program.

    Args:
        target: ``host:port``, ``unix:PATH``, or a list of them (spread by load).
        config: a :class:`~embedtext.connectors.client_config.ClientConfig`.
        **settings: any ClientConfig field, replacing the config's (``timeout``,
            ``max_batch_rows``, ``max_in_flight``, ``max_message_bytes``, ``token``, ``tls``,
            ``reply_dtype``).
    """

    def __init__(
        self, target: str | Sequence[str] | None = None, config: ClientConfig | None = None, **settings
    ) -> None:
        self._core = ClientCore(target, ClientConfig.of(config, **settings), ChannelSecurity.open_channel)
        self._pool = ThreadPoolExecutor(max_workers=self.config.max_in_flight, thread_name_prefix="embedtext-client")

    @property
    def config(self) -> ClientConfig:
        return self._core.config

    @property
    def targets(self) -> list[str]:
        return self._core.targets

    def embed(self, texts: Texts, **options: Unpack[EmbedOptions]) -> np.ndarray:
        """Embed texts; returns a float32 array of shape (len(texts), dim), rows in input order."""
        return self._finish(self._core.plan_texts(texts, options, "ndarray"))

    def embed_arrow(self, texts: Texts, **options: Unpack[EmbedOptions]) -> pa.FixedSizeListArray:
        """Embed texts; returns ``FixedSizeList<float32>[dim]`` built on the reply bytes."""
        return self._finish(self._core.plan_texts(texts, options, "arrow"))

    def embed_tokens(self, token_ids: Sequence[Sequence[int]], **options: Unpack[EmbedOptions]) -> np.ndarray:
        """Embed pre-tokenized rows (the model's own token ids)."""
        return self._finish(self._core.plan_tokens(token_ids, options))

    def split(
        self,
        texts: Texts,
        *,
        max_tokens: int | None = None,
        overlap: int = 0,
        model: str | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        timeout: float | None = None,
    ) -> TextChunks:
        """Cut texts into chunks of at most ``max_tokens`` of the model's tokens, ``overlap`` shared
        with the chunk before; cuts fall at paragraph, line, sentence and word ends where they can.

        ``max_tokens`` None: the most the model takes beside its special tokens and the prompt
        (``prompt_name``/``prompt``, as the chunks will be embedded with). Returns the chunks'
        spans and texts (:class:`~embedtext.connectors.splitting.TextChunks`).
        """
        options = SplitOptions(model, max_tokens, overlap, prompt_name, prompt)
        job = self._core.plan_split(texts, options, timeout)
        return job.assemble(self._run(job))

    def embed_chunks(
        self, texts: Texts, *, max_tokens: int | None = None, overlap: int = 0, **options: Unpack[EmbedOptions]
    ) -> TextChunks:
        """:meth:`split`, then each chunk's text embedded (``embed``'s options): ``.vectors`` a row per
        chunk; ``.mean_vectors(normalize=...)`` one per text."""
        chunks = self.split(texts, max_tokens=max_tokens, overlap=overlap, **_split_keys(options))
        distinct, places = chunks.distinct_texts()
        return chunks.with_vectors(self.embed(distinct, **options)[places])

    def embed_request(self, request: pb.EmbedRequest, *, timeout: float | None = None) -> pb.EmbedResponse:
        """Send one raw ``EmbedRequest`` as it is (no splitting); for tools and tests."""
        return self._call(SubBatch(0, 0, request), self._core.deadline(timeout))

    def info(self, *, refresh: bool = False, timeout: float | None = 10.0) -> ServerInfo:
        """What the server serves (cached after the first call)."""
        if self._core.info is None or refresh:
            self._core.info = self._info_of(self._core.endpoints.pick(), timeout)
        return self._core.info

    def _info_of(self, endpoint, timeout: float | None) -> ServerInfo:
        with typed_errors(endpoint.target):
            reply = endpoint.stub.Info(pb.InfoRequest(), timeout=timeout, metadata=self._core.metadata)
        return ServerInfo.from_proto(reply)

    def wait_ready(self, timeout: float = 300.0, *, every_engine: bool = False) -> ServerInfo:
        """Block until every endpoint reports SERVING on the health service.

        A server on a CPU is ready once each model's first engine is up, and starts its others
        behind it; ``every_engine=True`` also waits until none is still starting (``Info``'s
        ``starting_replicas``), as before a benchmark. Raises DeadlineExceededError after ``timeout``.
        """
        wait = self._core.ready_wait(timeout)
        for endpoint in wait.endpoints:
            check = endpoint.check
            while not wait.serving(endpoint, _status(lambda: check(health_request(), timeout=5))):
                time.sleep(READY_POLL_S)
            while every_engine and not wait.engines_up(endpoint, self._info_of(endpoint, 10.0)):
                time.sleep(READY_POLL_S)
        return self.info(refresh=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for endpoint in self._core.endpoints.endpoints:
            endpoint.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _finish(self, job: EmbedJob):
        replies = self._run(job)
        return job.assemble(replies, self.info() if job.needs_info else None)

    def _call(self, batch: SubBatch, deadline: float | None) -> pb.EmbedResponse:
        for attempt in self._core.attempts(batch, deadline):
            if attempt.delay_s:
                time.sleep(attempt.delay_s)  # backoff: the server was overloaded
            with attempt as endpoint:
                try:
                    if attempt.reconnect:
                        endpoint.check(health_request(), **attempt.ready_options)
                        attempt.connected()
                    return endpoint.method_for(batch.request)(batch.request, **attempt.call_options)
                except RpcError as exc:
                    attempt.fail(exc)
        raise AssertionError("unreachable: the last attempt raises")

    def _run(self, job: EmbedJob) -> list[pb.EmbedResponse]:
        if len(job.batches) == 1:
            reply = self._call(job.batches[0], job.deadline)
            _report_rows(job, job.batches[0])
            return [reply]
        futures = [self._pool.submit(self._call, b, job.deadline) for b in job.batches]
        for future, batch in zip(futures, job.batches):
            future.add_done_callback(
                lambda f, b=batch: _report_rows(job, b) if not f.cancelled() and f.exception() is None else None
            )
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


class AsyncClient:
    """The asyncio client: :class:`Client`'s methods and settings, each one awaited.

    Create and use it inside a running event loop. ``max_in_flight`` bounds the sub-batches
    in flight over all its calls together: its bulk ones, and apart from them its interactive ones,
    so that a query never waits behind the sub-batches of a bulk call on the same client.
    """

    def __init__(
        self, target: str | Sequence[str] | None = None, config: ClientConfig | None = None, **settings
    ) -> None:
        self._core = ClientCore(target, ClientConfig.of(config, **settings), ChannelSecurity.open_aio_channel)
        self._slots = asyncio.Semaphore(self.config.max_in_flight)
        self._interactive_slots = asyncio.Semaphore(self.config.max_in_flight)

    config = Client.config
    targets = Client.targets

    async def embed(self, texts: Texts, **options: Unpack[EmbedOptions]) -> np.ndarray:
        """As :meth:`Client.embed`."""
        return await self._finish(self._core.plan_texts(texts, options, "ndarray"))

    async def embed_arrow(self, texts: Texts, **options: Unpack[EmbedOptions]) -> pa.FixedSizeListArray:
        """As :meth:`Client.embed_arrow`."""
        return await self._finish(self._core.plan_texts(texts, options, "arrow"))

    async def embed_tokens(self, token_ids: Sequence[Sequence[int]], **options: Unpack[EmbedOptions]) -> np.ndarray:
        """As :meth:`Client.embed_tokens`."""
        return await self._finish(self._core.plan_tokens(token_ids, options))

    async def split(
        self,
        texts: Texts,
        *,
        max_tokens: int | None = None,
        overlap: int = 0,
        model: str | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        timeout: float | None = None,
    ) -> TextChunks:
        """As :meth:`Client.split`."""
        options = SplitOptions(model, max_tokens, overlap, prompt_name, prompt)
        job = self._core.plan_split(texts, options, timeout)
        return job.assemble(await self._run(job))

    async def embed_chunks(
        self, texts: Texts, *, max_tokens: int | None = None, overlap: int = 0, **options: Unpack[EmbedOptions]
    ) -> TextChunks:
        """As :meth:`Client.embed_chunks`."""
        chunks = await self.split(texts, max_tokens=max_tokens, overlap=overlap, **_split_keys(options))
        distinct, places = chunks.distinct_texts()
        return chunks.with_vectors((await self.embed(distinct, **options))[places])

    async def embed_request(self, request: pb.EmbedRequest, *, timeout: float | None = None) -> pb.EmbedResponse:
        """As :meth:`Client.embed_request`."""
        return await self._call(SubBatch(0, 0, request), self._core.deadline(timeout))

    async def info(self, *, refresh: bool = False, timeout: float | None = 10.0) -> ServerInfo:
        """As :meth:`Client.info`."""
        if self._core.info is None or refresh:
            self._core.info = await self._info_of(self._core.endpoints.pick(), timeout)
        return self._core.info

    async def _info_of(self, endpoint, timeout: float | None) -> ServerInfo:
        with typed_errors(endpoint.target):
            reply = await endpoint.stub.Info(pb.InfoRequest(), timeout=timeout, metadata=self._core.metadata)
        return ServerInfo.from_proto(reply)

    async def wait_ready(self, timeout: float = 300.0, *, every_engine: bool = False) -> ServerInfo:
        """As :meth:`Client.wait_ready`."""
        wait = self._core.ready_wait(timeout)
        for endpoint in wait.endpoints:
            check = endpoint.check
            while not wait.serving(endpoint, await _status_async(check(health_request(), timeout=5))):
                await asyncio.sleep(READY_POLL_S)
            while every_engine and not wait.engines_up(endpoint, await self._info_of(endpoint, 10.0)):
                await asyncio.sleep(READY_POLL_S)
        return await self.info(refresh=True)

    async def close(self) -> None:
        for endpoint in self._core.endpoints.endpoints:
            await endpoint.channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _finish(self, job: EmbedJob):
        replies = await self._run(job)
        return job.assemble(replies, await self.info() if job.needs_info else None)

    async def _call(self, batch: SubBatch, deadline: float | None) -> pb.EmbedResponse:
        interactive = getattr(batch.request, "latency_class", 0) == pb.LATENCY_CLASS_INTERACTIVE
        async with self._interactive_slots if interactive else self._slots:
            for attempt in self._core.attempts(batch, deadline):
                if attempt.delay_s:
                    await asyncio.sleep(attempt.delay_s)  # backoff: the server was overloaded
                with attempt as endpoint:
                    try:
                        if attempt.reconnect:
                            await endpoint.check(health_request(), **attempt.ready_options)
                            attempt.connected()
                        return await endpoint.method_for(batch.request)(batch.request, **attempt.call_options)
                    except RpcError as exc:
                        attempt.fail(exc)
        raise AssertionError("unreachable: the last attempt raises")

    async def _one(self, job: EmbedJob, batch: SubBatch) -> pb.EmbedResponse:
        reply = await self._call(batch, job.deadline)
        _report_rows(job, batch)
        return reply

    async def _run(self, job: EmbedJob) -> list[pb.EmbedResponse]:
        tasks = [asyncio.ensure_future(self._one(job, b)) for b in job.batches]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


def _split_keys(options: EmbedOptions) -> dict:
    """Of ``embed``'s options, those a split needs: the model, the prompt, the deadline."""
    return {k: options[k] for k in ("model", "prompt_name", "prompt", "timeout") if k in options}


def _report_rows(job: EmbedJob, batch: SubBatch) -> None:
    if job.on_rows is not None:
        job.on_rows(batch.stop - batch.start)


def _status(check) -> int | None:
    """A health check's status; None when the check itself failed (not up yet)."""
    try:
        return check().status
    except RpcError:
        return None


async def _status_async(call) -> int | None:
    try:
        return (await call).status
    except RpcError:
        return None


__all__ = ["AsyncClient", "Client", "ClientConfig", "EmbedTextError", "ModelInfo", "ServerInfo", "TextChunks"]
