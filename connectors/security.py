"""Client-side transport security: TLS (optionally mutual) and the bearer token.

The token travels as ``authorization: Bearer <token>`` metadata on every call. It is never
sent in clear text over a network: without TLS it is allowed only to loopback and Unix-socket
targets (where it still guards a shared host).

>>> ChannelSecurity(token="s3cret").metadata
(('authorization', 'Bearer s3cret'),)
>>> ChannelSecurity(token="s3cret").check_target("10.0.0.5:50051")
Traceback (most recent call last):
    ...
ValueError: refusing to send the token to 10.0.0.5:50051 without TLS; pass tls=... (the server's CA), or use a loopback or unix: target
"""  # noqa: E501 - the error's whole line, as doctest compares it

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from embedtext.protocol.addresses import is_loopback_host


def _pem(value: str | bytes | os.PathLike | None, what: str) -> bytes | None:
    """PEM bytes from bytes, PEM text, or a file path."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    text = str(value)
    if "-----BEGIN" in text:
        return text.encode()
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"{what}: {text} is not a file (give a PEM file path or PEM bytes)")
    return path.read_bytes()


@dataclass(frozen=True)
class TLSConfig:
    """TLS settings of a client.

    Args:
        ca: the CA certificate(s) that signed the server's certificate (PEM path or bytes);
            None = the system's trust store.
        cert, key: the client's certificate and key, for servers that require mutual TLS.
        server_name: the name to check the server's certificate against, when it differs
            from the target's host (an IP address target, a test certificate).
    """

    ca: str | bytes | os.PathLike | None = None
    cert: str | bytes | os.PathLike | None = None
    key: str | bytes | os.PathLike | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("mutual TLS needs both cert and key")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca, "tls ca"),
            private_key=_pem(self.key, "tls key"),
            certificate_chain=_pem(self.cert, "tls cert"),
        )


def as_tls_config(tls: TLSConfig | bool | str | os.PathLike | None) -> TLSConfig | None:
    """``tls=`` as users give it: None/False (plain), True (system roots), a CA path, or TLSConfig."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return TLSConfig()
    if isinstance(tls, TLSConfig):
        return tls
    return TLSConfig(ca=tls)


def _is_local_target(target: str) -> bool:
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    return is_loopback_host(target.rsplit(":", 1)[0])


def _env_token() -> str | None:
    token = os.environ.get("EMBEDTEXT_TOKEN")
    if not token and os.environ.get("EMBEDTEXT_TOKEN_FILE"):
        token = Path(os.environ["EMBEDTEXT_TOKEN_FILE"]).read_text(encoding="utf-8")
    return token.strip() if token else None


def _env_tls() -> TLSConfig | None:
    env = os.environ
    if not any(env.get(k) for k in ("EMBEDTEXT_TLS_CA", "EMBEDTEXT_TLS_CLIENT_CERT")):
        return None
    return TLSConfig(
        ca=env.get("EMBEDTEXT_TLS_CA") or None,
        cert=env.get("EMBEDTEXT_TLS_CLIENT_CERT") or None,
        key=env.get("EMBEDTEXT_TLS_CLIENT_KEY") or None,
        server_name=env.get("EMBEDTEXT_TLS_SERVER_NAME") or None,
    )


@dataclass(frozen=True)
class ChannelSecurity:
    """How a client's channels are opened: plain or TLS, with or without a token.

    ``tls_on_unix``: whether TLS applies to ``unix:`` targets too (when given explicitly);
    TLS settings taken from the environment apply to TCP targets only, so a private
    co-deployed server on a Unix socket keeps working in a shell set up for a remote one.
    """

    tls: TLSConfig | None = None
    token: str | None = field(default=None, repr=False)
    tls_on_unix: bool = True

    @classmethod
    def from_args(cls, tls=None, token: str | None = None) -> ChannelSecurity:
        """Explicit arguments win; None reads EMBEDTEXT_TOKEN (or EMBEDTEXT_TOKEN_FILE) and
        EMBEDTEXT_TLS_CA, EMBEDTEXT_TLS_CLIENT_CERT, EMBEDTEXT_TLS_CLIENT_KEY, EMBEDTEXT_TLS_SERVER_NAME."""
        if token is None:
            token = _env_token()
        elif not token.strip():
            raise ValueError("empty token")
        if tls is None:
            return cls(_env_tls(), token, tls_on_unix=False)
        return cls(as_tls_config(tls), token)

    def tls_for(self, target: str) -> TLSConfig | None:
        if target.startswith(("unix:", "unix-abstract:")) and not self.tls_on_unix:
            return None
        return self.tls

    @property
    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        return (("authorization", f"Bearer {self.token}"),) if self.token else None

    def check_target(self, target: str) -> None:
        if self.token and self.tls_for(target) is None and not _is_local_target(target):
            raise ValueError(
                f"refusing to send the token to {target} without TLS; pass tls=... (the server's CA), "
                "or use a loopback or unix: target"
            )

    def _channel_args(self, target: str, options: list[tuple[str, Any]]):
        self.check_target(target)
        tls = self.tls_for(target)
        if tls is None:
            return None, options
        if tls.server_name:
            options = [*options, ("grpc.ssl_target_name_override", tls.server_name)]
        return tls.credentials(), options

    def open_channel(self, target: str, options: list[tuple[str, Any]]) -> grpc.Channel:
        credentials, options = self._channel_args(target, options)
        if credentials is None:
            return grpc.insecure_channel(target, options=options)
        return grpc.secure_channel(target, credentials, options=options)

    def open_aio_channel(self, target: str, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
        credentials, options = self._channel_args(target, options)
        if credentials is None:
            return grpc.aio.insecure_channel(target, options=options)
        return grpc.aio.secure_channel(target, credentials, options=options)
