"""Client settings: one frozen dataclass shared by ``Client``, ``AsyncClient`` and ``register``.

>>> ClientConfig(max_in_flight=4).max_in_flight
4
>>> ClientConfig(reply_dtype="float64")
Traceback (most recent call last):
...
ValueError: reply_dtype must be one of float32, float16, float32-repeated
>>> ClientConfig.of(None, timeout=5.0).timeout
5.0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from embedtext.connectors.security import TLSConfig
from embedtext.protocol import DEFAULT_MAX_MESSAGE_BYTES
from embedtext.protocol import embedding_pb2 as pb

# float32: raw little-endian bytes (zero copy); float16: half the bytes; float32-repeated: a
# protobuf `repeated float` (slow, for comparison).
REPLY_DTYPES = {
    "float32": pb.OUTPUT_DTYPE_FLOAT32,
    "float16": pb.OUTPUT_DTYPE_FLOAT16,
    "float32-repeated": pb.OUTPUT_DTYPE_FLOAT32_REPEATED,
}


LATENCY_CLASSES = {"interactive": pb.LATENCY_CLASS_INTERACTIVE, "bulk": pb.LATENCY_CLASS_BULK}


def check_latency_class(value: str | None) -> None:
    if value is not None and value not in LATENCY_CLASSES:
        raise ValueError(f"latency_class must be 'interactive', 'bulk' or None, not {value!r}")


@dataclass(frozen=True)
class ClientConfig:
    """How a client talks to its servers.

    Attributes:
        timeout: deadline in seconds for one ``embed`` call, all sub-batches together (None: none).
        max_batch_rows: rows per request; larger inputs are split (also by bytes, 16 MiB of text).
        max_in_flight: sub-batches in flight at once.
        max_message_bytes: the gRPC message limit, both ways.
        token: the server's ``--token``, sent as ``authorization: Bearer`` on every call
            (refused over plain TCP to a non-loopback host).
        tls: None (plain), True (TLS, system trust store), a CA file path, or a
            :class:`~embedtext.connectors.security.TLSConfig` (with a client certificate for mutual TLS).
        reply_dtype: ``"float32"`` (raw bytes, zero copy), ``"float16"`` (half the bytes) or
            ``"float32-repeated"`` (protobuf repeated float; slow, for comparison).
        latency_class: ``"interactive"`` (served ahead of bulk work), ``"bulk"`` (throughput,
            shared fairly among callers), or None: interactive for calls of at most
            ``embedtext.protocol.INTERACTIVE_MAX_ROWS`` rows, bulk for larger ones.
    """

    timeout: float | None = 300.0
    max_batch_rows: int = 2048
    max_in_flight: int = 8
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    token: str | None = field(default=None, repr=False)
    tls: TLSConfig | bool | str | None = None
    reply_dtype: str = "float32"
    latency_class: str | None = None

    def __post_init__(self) -> None:
        if self.max_batch_rows < 1 or self.max_in_flight < 1:
            raise ValueError("max_batch_rows and max_in_flight must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("timeout must be positive (or None for no deadline)")
        if self.reply_dtype not in REPLY_DTYPES:
            raise ValueError(f"reply_dtype must be one of {', '.join(REPLY_DTYPES)}")
        check_latency_class(self.latency_class)

    @property
    def output_dtype(self) -> int:
        return REPLY_DTYPES[self.reply_dtype]

    @classmethod
    def of(cls, config: ClientConfig | None, **settings) -> ClientConfig:
        """``config`` (or the defaults) with ``settings`` (ClientConfig fields) replaced."""
        base = config or cls()
        unknown = set(settings) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown client setting(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(base, **settings) if settings else base
