"""The clients' core, with no I/O: what to send, where, how long each try may take, when to retry,
and how the replies become one array. :class:`~embedtext.connectors.client.Client` (blocking) and
:class:`~embedtext.connectors.client.AsyncClient` (asyncio) only do the waiting.

>>> core = ClientCore("unix:/tmp/none.sock", ClientConfig(max_batch_rows=2), open_channel=None)
>>> job = core.plan_texts(["a", "b", "c"], {"model": "tiny"}, output="ndarray")
>>> [(b.start, b.stop) for b in job.batches], job.batches[0].request.model
([(0, 2), (2, 3)], 'tiny')
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import grpc
import numpy as np
import pyarrow as pa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from embedtext.connectors.client_config import LATENCY_CLASSES, ClientConfig, check_latency_class
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
from embedtext.connectors.splitting import SplitJob, SplitOptions, plan_split_requests
from embedtext.protocol import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    INTERACTIVE_MAX_ROWS,
    RECONNECT_POLL_S,
    RECONNECT_WAIT_S,
    RETRY_PUSHBACK_KEY,
    codec,
)
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol import embedding_pb2_grpc as pb_grpc
from embedtext.protocol.errors import DeadlineExceededError, EmbedTextError, from_rpc_error, received_code

# A retry after UNAVAILABLE waits RECONNECT_WAIT_S at most for a channel to (re)connect: a server
# restarting within it is invisible, and a dead one is a clear UnavailableError soon, not a hang.
# Within that wait, RECONNECT_POLL_S is the pause before trying again when a try fails at once (its
# channel had not yet seen the old connection go, so it looked ready).
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
        latency_class: ``"interactive"`` or ``"bulk"`` (default: the client's ``latency_class``;
            if that is None, interactive for at most ``INTERACTIVE_MAX_ROWS`` rows).
        prompt_name: one of the model's prompts (``info().model().prompts``: "query", "document", ...),
            put before each text as sentence-transformers does (None: the model's default prompt, if any).
        prompt: a prompt's own text, in place of any named one (``""``: no prompt at all).
    """

    model: str | None
    dimensions: int | None
    normalize: bool | None
    truncate: bool
    timeout: float | None
    on_rows: Callable[[int], None] | None
    latency_class: Literal["interactive", "bulk"] | None
    prompt_name: str | None
    prompt: str | None


_REQUEST_KEYS = ("model", "dimensions", "normalize", "truncate", "prompt_name", "prompt")


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

    def assemble(
        self, replies: Sequence[pb.EmbedResponse], info: ServerInfo | None
    ) -> np.ndarray | pa.FixedSizeListArray:
        dim_if_empty = (self.options.dimensions or info.model(self.options.model).dim) if info is not None else 0
        counts = [b.stop - b.start for b in self.batches]
        if self.output == "arrow":
            return stack_arrow([reply_to_arrow(r, n) for r, n in zip(replies, counts)], dim_if_empty)
        return stack_ndarrays([reply_to_ndarray(r, n) for r, n in zip(replies, counts)], self.rows, dim_if_empty)


class Attempt:
    """One try of a sub-batch: a context manager that leases an endpoint for the try's rows.

    The driver first waits ``delay_s`` (the backoff after an overloaded server). On a retry after
    UNAVAILABLE (``reconnect``) it then asks the endpoint's health service with ``ready_options``,
    which wait at most for the rest of the reconnect window, and calls ``connected()`` once that
    answers; then it makes the call.
    """

    def __init__(self, plan: CallPlan, timeout: float | None, delay_s: float, ready_wait_s: float | None) -> None:
        self.plan = plan
        self.timeout = timeout
        self.delay_s = delay_s
        self.ready_wait_s = ready_wait_s
        self.is_connected = False
        self._lease = None
        self.endpoint: Endpoint | None = None

    @property
    def reconnect(self) -> bool:
        return self.ready_wait_s is not None

    @property
    def ready_options(self) -> dict[str, Any]:
        # wait_for_ready: wait for the channel to (re)connect instead of failing at once.
        return {"timeout": self.ready_wait_s, "metadata": self.plan.metadata, "wait_for_ready": True}

    @property
    def call_options(self) -> dict[str, Any]:
        return {"timeout": self.timeout, "metadata": self.plan.metadata}

    def connected(self) -> None:
        """The endpoint answered its health check: from here the call has the whole deadline."""
        self.is_connected = True

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
    """The tries of one sub-batch. Embedding is idempotent, so a call that did not succeed may
    be sent again, always inside the caller's deadline:

    * UNAVAILABLE, or CANCELLED by a stopping server (the call did not run to completion): once
      more, on another endpoint if there is one;
    * RESOURCE_EXHAUSTED from a busy server (its queue is full, or its concurrent-call bound):
      again and again, after jittered exponential backoff that waits at least the server's
      ``grpc-retry-pushback-ms``, until the deadline leaves too little for the next wait.

    gRPC's own retry policy stops at 5 attempts, too few to ride out a long bulk job, so the
    backoff is here. Every other failure is raised at once as its typed error.
    """

    NO_DEADLINE_OVERLOAD_S = 300.0  # without a deadline, how long an overloaded server is retried

    def __init__(self, endpoints: EndpointSet, rows: int, deadline: float | None, metadata) -> None:
        self.endpoints = endpoints
        self.rows = max(rows, 1)
        self.deadline = deadline
        self.metadata = metadata
        self.avoid: list[Endpoint] = []
        self.first: grpc.RpcError | None = None
        self.first_target = ""  # the endpoint that gave ``first``
        self.overloaded = 0  # RESOURCE_EXHAUSTED answers so far
        self.started = time.monotonic()
        self._delay_s = 0.0
        self._reconnect = False
        self._reconnect_until = 0.0  # monotonic: when the wait for a server to come back ends

    def __iter__(self) -> Iterator[Attempt]:
        while True:  # ends when a try succeeds or ``failed`` raises
            delay, self._delay_s = self._delay_s, 0.0
            timeout = self._timeout(delay)
            ready_wait = None
            if self._reconnect:
                # The window bounds the wait for a connection only: the call itself has the whole
                # deadline, so a surviving server that is slow to answer is not taken for a dead one.
                ready_wait = max(self._reconnect_until - time.monotonic() - delay, 1e-3)
                ready_wait = ready_wait if timeout is None else min(timeout, ready_wait)
            yield Attempt(self, timeout, delay, ready_wait)

    def _timeout(self, delay: float) -> float | None:
        remaining = remaining_s(self.deadline, self.endpoints.pick(self.avoid).target)
        return None if remaining is None else max(remaining - delay, 1e-3)

    def failed(self, attempt: Attempt, error: grpc.RpcError) -> None:
        endpoint = attempt.endpoint
        code = received_code(error)
        if code == grpc.StatusCode.UNAVAILABLE and self.first is None:
            self.first = error
            self.first_target = endpoint.target
            self._reconnect = True
            self._reconnect_until = time.monotonic() + RECONNECT_WAIT_S
            endpoint.failures += 1
            self.avoid.append(endpoint)
            return
        if code == grpc.StatusCode.UNAVAILABLE and attempt.reconnect:
            if time.monotonic() + RECONNECT_POLL_S < self._reconnect_until:
                self._delay_s = RECONNECT_POLL_S
                return
            raise self._not_back() from None
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _busy(error):
            self._back_off(attempt, error)
            return
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and attempt.reconnect and not attempt.is_connected:
            raise self._not_back() from None
        raise from_rpc_error(error, target=endpoint.target) from None

    def _not_back(self) -> EmbedTextError:
        """The retry waited for a server that never came back: the cause is the first failure
        (UNAVAILABLE) and the server that gave it, not the last try's."""
        typed = from_rpc_error(self.first, target=self.first_target)
        typed.message += f" (waited {RECONNECT_WAIT_S:.1f}s for it to come back)"
        return typed

    def _back_off(self, attempt: Attempt, error: grpc.RpcError) -> None:
        """Plan the wait before the next try, or raise if the deadline leaves no room for it."""
        endpoint = attempt.endpoint
        pushback = _pushback_s(error)
        backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**self.overloaded)
        # Jitter: callers refused together do not all come back together.
        delay = max(pushback or 0.0, backoff) * random.uniform(1.0, 1.5)
        now = time.monotonic()
        left = (self.deadline if self.deadline is not None else self.started + self.NO_DEADLINE_OVERLOAD_S) - now
        if delay >= left:
            typed = from_rpc_error(error, target=endpoint.target)
            typed.message += (
                f" (still overloaded after {self.overloaded + 1} tries over {now - self.started:.1f}s; "
                f"the deadline leaves {max(left, 0.0):.1f}s, less than the next wait of {delay:.1f}s)"
            )
            raise typed from None
        self.overloaded += 1
        self._reconnect = False
        self._delay_s = delay
        if len(self.endpoints.endpoints) > 1 and endpoint not in self.avoid:
            self.avoid.append(endpoint)  # try a less busy server next, if there is one


def _pushback_s(error: grpc.RpcError) -> float | None:
    """The server's ``grpc-retry-pushback-ms`` trailer, in seconds (None: absent or unreadable)."""
    trailers = error.trailing_metadata() if callable(getattr(error, "trailing_metadata", None)) else None
    for key, value in trailers or ():
        if key == RETRY_PUSHBACK_KEY:
            try:
                return max(0.0, int(value) / 1000.0)
            except ValueError:
                return None
    return None


def _busy(error: grpc.RpcError) -> bool:
    """RESOURCE_EXHAUSTED because the server was busy (worth a retry), not because the message
    was too large (the same code, which no retry can fix)."""
    details = (error.details() if callable(getattr(error, "details", None)) else "") or ""
    return _pushback_s(error) is not None or "concurrent rpc limit" in details.lower()


def remaining_s(deadline: float | None, target: str) -> float | None:
    """Seconds left before ``deadline`` (None: no deadline); raises once it has passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceededError("the client deadline passed before all sub-batches were answered", target=target)
    return left


class ReadyWait:
    """``wait_ready``'s bookkeeping: every endpoint must answer SERVING before the deadline (and,
    asked to, have every engine up: a CPU server is ready with its first engine per model)."""

    def __init__(self, endpoints: Sequence[Endpoint], timeout: float) -> None:
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def serving(self, endpoint: Endpoint, status: int | None) -> bool:
        """True once ``status`` (None: the check failed) is SERVING; raises after the deadline."""
        return self._done_in_time(status == health_pb2.HealthCheckResponse.SERVING, endpoint, "server not ready")

    def engines_up(self, endpoint: Endpoint, info: ServerInfo) -> bool:
        """True once ``info`` (the endpoint's) has no engine still starting; raises after the deadline."""
        starting = sum(model.starting_replicas for model in info.models)
        return self._done_in_time(not starting, endpoint, f"server ready, but {starting} engine(s) still starting")

    def _done_in_time(self, done: bool, endpoint: Endpoint, not_yet: str) -> bool:
        if done:
            return True
        if time.monotonic() > self.deadline:
            raise DeadlineExceededError(f"{not_yet} after {self.timeout:.0f}s", target=endpoint.target)
        return False


def health_request():
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
            self.endpoints = EndpointSet([Endpoint(t, None, None, None, None) for t in self.targets])
        else:
            channels = {t: open_channel(self.security, t, options) for t in self.targets}
            self.endpoints = EndpointSet(
                [
                    Endpoint(t, c, pb_grpc.EmbeddingStub(c), embed_method(c), health_pb2_grpc.HealthStub(c).Check)
                    for t, c in channels.items()
                ]
            )
        self.info: ServerInfo | None = None
        # Random, one per client: the server shares bulk throughput fairly among callers.
        self.caller = secrets.token_hex(8)

    def deadline(self, timeout: float | None) -> float | None:
        t = self.config.timeout if timeout is None else timeout
        return time.monotonic() + t if t is not None else None

    def _job(self, planner, data, options: EmbedOptions, output) -> EmbedJob:
        unknown = set(options) - set(EmbedOptions.__annotations__)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        request_options = RequestOptions(
            **{k: options[k] for k in _REQUEST_KEYS if k in options},
            output_dtype=self.config.output_dtype,
            caller=self.caller,
        )
        rows, batches = planner(data, request_options, self.config.max_batch_rows)
        latency_class = options.get("latency_class") or self.config.latency_class
        check_latency_class(latency_class)
        if latency_class is None:
            latency_class = "interactive" if rows <= INTERACTIVE_MAX_ROWS else "bulk"
        for batch in batches:
            batch.request.latency_class = LATENCY_CLASSES[latency_class]
        deadline = self.deadline(options.get("timeout"))
        return EmbedJob(rows, batches, request_options, output, deadline, options.get("on_rows"))

    def plan_texts(self, texts, options: EmbedOptions, output: Literal["ndarray", "arrow"]) -> EmbedJob:
        """Texts (a sequence of str or an Arrow string array) split by rows and by bytes."""
        return self._job(plan_text_requests, texts, options, output)

    def plan_tokens(self, token_ids: Sequence[Sequence[int]], options: EmbedOptions) -> EmbedJob:
        return self._job(plan_token_requests, token_ids, options, "ndarray")

    def plan_split(self, texts, options: SplitOptions, timeout: float | None) -> SplitJob:
        """Texts (a sequence of str or an Arrow string array) to split, by rows and by bytes."""
        arr = codec.as_string_array(texts)
        batches = plan_split_requests(arr, options, self.config.max_batch_rows)
        return SplitJob(arr.to_pylist(), batches, self.deadline(timeout))

    def attempts(self, batch: SubBatch, deadline: float | None) -> CallPlan:
        return CallPlan(self.endpoints, batch.stop - batch.start, deadline, self.metadata)

    def ready_wait(self, timeout: float) -> ReadyWait:
        return ReadyWait(self.endpoints.endpoints, timeout)


__all__ = ["ClientCore", "EmbedJob", "EmbedOptions", "EmbedTextError", "RECONNECT_WAIT_S", "READY_POLL_S"]
