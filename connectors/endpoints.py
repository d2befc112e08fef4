"""Client-side targets: parse them, open channels, and spread calls by load.

A target is ``host:port``, ``unix:PATH`` (or ``unix:///abs/path``), or a bare path to an
existing socket file. Load is counted in rows in flight, added and removed in one place
(``lease``) so it cannot drift.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from embedtext.protocol import DEFAULT_TARGET, KEEPALIVE_MS, reply_wire
from embedtext.protocol import embedding_pb2 as pb


def normalize_target(target: str) -> str:
    target = target.strip()
    if not target:
        raise ValueError("empty target; use host:port or unix:PATH")
    if target.startswith("unix:") or target.startswith("unix-abstract:"):
        return target
    if target.startswith("/") or (os.path.exists(target) and not os.path.isdir(target)):
        return f"unix:{os.path.abspath(target)}"
    if target.startswith("http://") or target.startswith("https://"):
        raise ValueError(f"target {target!r}: give host:port (gRPC), not a URL")
    return target


def normalize_targets(target: str | Sequence[str] | None) -> list[str]:
    if target is None:
        return [DEFAULT_TARGET]
    if isinstance(target, str):
        targets = [t for t in target.split(",") if t.strip()]
    else:
        targets = list(target)
    if not targets:
        raise ValueError("no target given")
    return [normalize_target(t) for t in targets]


def channel_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_permit_without_calls", 0),
        # Retries are ours (client_core.CallPlan: UNAVAILABLE once, RESOURCE_EXHAUSTED with backoff).
        ("grpc.enable_retries", 0),
        # Reconnect to a restarted server within a second, not after gRPC's default backoff
        # (which grows to two minutes).
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]


EMBED_METHOD = "/embedtext.v1.Embedding/Embed"


def embed_method(channel: Any) -> Any:
    """Embed on ``channel`` (sync or aio), replies parsed by ``reply_wire.parse_reply``: the
    embeddings stay in the received bytes instead of being copied out by protobuf."""
    return channel.unary_unary(
        EMBED_METHOD,
        request_serializer=pb.EmbedRequest.SerializeToString,
        response_deserializer=reply_wire.parse_reply,
        _registered_method=True,
    )


@dataclass(eq=False)
class Endpoint:
    target: str
    channel: Any
    stub: Any  # the generated stub: Info, Split
    embed: Any  # embed_method(channel)
    check: Any  # the health service's Check: is the server there (and serving)?
    inflight_rows: int = 0
    calls: int = 0
    failures: int = 0

    def method_for(self, request: pb.EmbedRequest | pb.SplitRequest) -> Any:
        """The RPC that answers ``request``."""
        return self.embed if isinstance(request, pb.EmbedRequest) else self.stub.Split


class EndpointSet:
    """The endpoints of a client; picks the one with the fewest rows in flight."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        self.endpoints = endpoints

    def pick(self, avoid: Sequence[Endpoint] = ()) -> Endpoint:
        pool = [e for e in self.endpoints if e not in avoid] or self.endpoints
        return min(pool, key=lambda e: (e.inflight_rows, e.failures, e.calls))

    @contextmanager
    def lease(self, rows: int, avoid: Sequence[Endpoint] = ()) -> Iterator[Endpoint]:
        """Count ``rows`` against the least-loaded endpoint for the duration of the block."""
        endpoint = self.pick(avoid)
        endpoint.inflight_rows += rows
        endpoint.calls += 1
        try:
            yield endpoint
        finally:
            endpoint.inflight_rows -= rows

    @property
    def inflight_rows(self) -> int:
        return sum(e.inflight_rows for e in self.endpoints)
