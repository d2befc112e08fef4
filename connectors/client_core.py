"""The clients' core, with no I/O: what to send, where, how long each try may take, when to retry,
and how the replies become one array. :class:`~embedtext.connectors.client.Client` (blocking) and
:class:`~embedtext.connectors.client.AsyncClient` (asyncio) only do the waiting.

>>> core = ClientCore("unix:/tmp/none.sock", ClientConfig(max_batch_rows=2), open_channel=None)
>>> job = core.plan_texts(["a", "b", "c"], {"model": "tiny"}, output="ndarray")
>>> [(b.start, b.stop) for b in job.batches], job.batches[0].request.model
([(0, 2), (2, 3)], 'tiny')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import grpc
import numpy as np
import pyarrow as pa

from embedtext.connectors.client_config import ClientConfig
from embedtext.connectors.endpoints import Endpoint, EndpointSet, channel_options, embed_method, normalize_targets
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
from embedtext.connectors.security import ChannelSecurity
from embedtext.connectors.server_info import ServerInfo
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol import embedding_pb2_grpc as pb_grpc
from embedtext.protocol.errors import DeadlineExceededError, EmbedTextError, from_rpc_error

# A retry after UNAVAILABLE waits this long at most for a channel to (re)connect: a server
# restarting within it is invisible, and a dead one is a clear UnavailableError soon, not a hang.
RECONNECT_WAIT_S = 5.0
# How often wait_ready asks each endpoint's health service.
READY_POLL_S = 0.2


class EmbedOptions(TypedDict, total=False):
    """The keyword arguments of every ``embed*`` call of both clients.

    Attributes:
        model: served model name or alias (None: the server's default model).
        dimensions: Matryoshka size of the vectors (None: the model's full dim).
        normalize: L2-normalize (None: the model's own setting).
        truncate: cut texts to the model's max tokens (else a long row is an InvalidInputError).
        timeout: deadline in seconds for the whole call (default: the client's ``timeout``).
        on_rows: called with n as each sub-batch of n rows is answered (progress bars).
    """

    model: str | None
    dimensions: int | None
    normalize: bool | None
    truncate: bool
    timeout: float | None
    on_rows: Callable[[int], None] | None


_REQUEST_KEYS = ("model", "dimensions", "normalize", "truncate")


@dataclass(frozen=True)
class EmbedJob:
    """One ``embed*`` call, planned: its sub-batches, and how their replies become one result."""

    rows: int
    batches: list[SubBatch]
    options: RequestOptions
    output: Literal["ndarray", "arrow"]
    deadline: float | None
    on_rows: Callable[[int], None] | None = None

    @property
    def needs_info(self) -> bool:
        """No sub-batch to answer it: the result's dim must come from the server's Info."""
        return not self.batches

    def assemble(self, replies: Sequence[pb.EmbedResponse], info: ServerInfo | None) -> np.ndarray | pa.FixedSizeListArray:
        dim_if_empty = (self.options.dimensions or info.model(self.options.model).dim) if info is not None else 0
        counts = [b.stop - b.start for b in self.batches]
        if self.output == "arrow":
            return stack_arrow([reply_to_arrow(r, n) for r, n in zip(replies, counts)], dim_if_empty)
        return stack_ndarrays([reply_to_ndarray(r, n) for r, n in zip(replies, counts)], self.rows, dim_if_empty)


class Attempt:
    """One try of a sub-batch: a context manager that leases an endpoint for the try's rows."""

    def __init__(self, plan: CallPlan, number: int, timeout: float | None) -> None:
        self.plan = plan
        self.number = number
        self.timeout = timeout
        self._lease = None
        self.endpoint: Endpoint | None = None

    @property
    def call_options(self) -> dict[str, Any]:
        # After UNAVAILABLE, wait for the channel to reconnect instead of failing at once.
        return {"timeout": self.timeout, "metadata": self.plan.metadata, "wait_for_ready": self.number > 0}

    def __enter__(self) -> Endpoint:
        self._lease = self.plan.endpoints.lease(self.plan.rows, self.plan.avoid)
        self.endpoint = self._lease.__enter__()
        return self.endpoint

    def __exit__(self, *exc) -> None:
        self._lease.__exit__(*exc)

    def fail(self, error: grpc.RpcError) -> None:
        """Record a failed try: returns when the plan retries it, raises the typed error otherwise."""
        self.plan.failed(self, error)


class CallPlan:
    """The tries of one sub-batch.

    UNAVAILABLE means the call did not run to completion; embedding is idempotent, so it is
    retried once, on another endpoint if there is one, inside the caller's deadline. Every other
    failure is raised at once as its typed error.
    """

    TRIES = 2

    def __init__(self, endpoints: EndpointSet, rows: int, deadline: float | None, metadata) -> None:
        self.endpoints = endpoints
        self.rows = max(rows, 1)
        self.deadline = deadline
        self.metadata = metadata
        self.avoid: list[Endpoint] = []
        self.first: grpc.RpcError | None = None

    def __iter__(self) -> Iterator[Attempt]:
        for number in range(self.TRIES):
            yield Attempt(self, number, self._timeout(number))

    def _timeout(self, number: int) -> float | None:
        remaining = remaining_s(self.deadline, self.endpoints.pick(self.avoid).target)
        if number == 0:
            return remaining
        return RECONNECT_WAIT_S if remaining is None else min(remaining, RECONNECT_WAIT_S)

    def failed(self, attempt: Attempt, error: grpc.RpcError) -> None:
        endpoint = attempt.endpoint
        if error.code() == grpc.StatusCode.UNAVAILABLE and attempt.number < self.TRIES - 1:
            self.first = error
            endpoint.failures += 1
            self.avoid.append(endpoint)
            return
        if self.first is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            # The retry waited for a server that never came back: the cause is the first
            # failure (UNAVAILABLE), not the deadline.
            typed = from_rpc_error(self.first, target=endpoint.target)
            typed.message += f" (waited {attempt.timeout:.1f}s for it to come back)"
            raise typed from None
        raise from_rpc_error(error, target=endpoint.target) from None


def remaining_s(deadline: float | None, target: str) -> float | None:
    """Seconds left before ``deadline`` (None: no deadline); raises once it has passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceededError("the client deadline passed before all sub-batches were answered", target=target)
    return left


class ReadyWait:
    """``wait_ready``'s bookkeeping: every endpoint must answer SERVING before the deadline."""

    def __init__(self, endpoints: Sequence[Endpoint], timeout: float) -> None:
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def serving(self, endpoint: Endpoint, status: int | None) -> bool:
        """True once ``status`` (None: the check failed) is SERVING; raises after the deadline."""
        from grpc_health.v1 import health_pb2

        if status == health_pb2.HealthCheckResponse.SERVING:
            return True
        if time.monotonic() > self.deadline:
            raise DeadlineExceededError(f"server not ready after {self.timeout:.0f}s", target=endpoint.target)
        return False


def health_request():
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckRequest(service="")


@contextmanager
def typed_errors(target: str) -> Iterator[None]:
    """A failed call inside the block raises its :mod:`~embedtext.protocol.errors` class."""
    try:
        yield
    except grpc.RpcError as exc:
        raise from_rpc_error(exc, target=target) from None


class ClientCore:
    """Targets, channels' security, endpoints, the cached Info and the planning of calls.

    Args:
        target: ``host:port``, ``unix:PATH``, or a list of them.
        config: the client's settings.
        open_channel: ``(security, target, options) -> channel``, a sync or an aio channel
            (``ChannelSecurity.open_channel`` or ``.open_aio_channel``); None: no channels (planning only).
    """

    def __init__(self, target: str | Sequence[str] | None, config: ClientConfig, open_channel) -> None:
        self.config = config
        self.targets = normalize_targets(target)
        self.security = ChannelSecurity.from_args(config.tls, config.token)
        self.metadata = self.security.metadata
        options = channel_options(config.max_message_bytes)
        if open_channel is None:
            self.endpoints = EndpointSet([Endpoint(t, None, None, None) for t in self.targets])
        else:
            channels = {t: open_channel(self.security, t, options) for t in self.targets}
            self.endpoints = EndpointSet(
                [Endpoint(t, c, pb_grpc.EmbeddingStub(c), embed_method(c)) for t, c in channels.items()]
            )
        self.info: ServerInfo | None = None

    def deadline(self, timeout: float | None) -> float | None:
        t = self.config.timeout if timeout is None else timeout
        return time.monotonic() + t if t is not None else None

    def _job(self, planner, data, options: EmbedOptions, output) -> EmbedJob:
        unknown = set(options) - set(EmbedOptions.__annotations__)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        request_options = RequestOptions(
            **{k: options[k] for k in _REQUEST_KEYS if k in options}, output_dtype=self.config.output_dtype
        )
        rows, batches = planner(data, request_options, self.config.max_batch_rows)
        deadline = self.deadline(options.get("timeout"))
        return EmbedJob(rows, batches, request_options, output, deadline, options.get("on_rows"))

    def plan_texts(self, texts, options: EmbedOptions, output: Literal["ndarray", "arrow"]) -> EmbedJob:
        """Texts (a sequence of str or an Arrow string array) split by rows and by bytes."""
        return self._job(plan_text_requests, texts, options, output)

    def plan_tokens(self, token_ids: Sequence[Sequence[int]], options: EmbedOptions) -> EmbedJob:
        return self._job(plan_token_requests, token_ids, options, "ndarray")

    def attempts(self, batch: SubBatch, deadline: float | None) -> CallPlan:
        return CallPlan(self.endpoints, batch.stop - batch.start, deadline, self.metadata)

    def ready_wait(self, timeout: float) -> ReadyWait:
        return ReadyWait(self.endpoints.endpoints, timeout)


__all__ = ["ClientCore", "EmbedJob", "EmbedOptions", "EmbedTextError", "RECONNECT_WAIT_S", "READY_POLL_S"]
