"""Who may call: TLS credentials (optionally mutual) and the bearer-token check.

Every call must carry ``authorization: Bearer <token>`` when the server has a token, except
the health service, which load balancers and orchestrators probe without credentials. The
token is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

import grpc

from embedtext.server.config.settings import ServerConfig
from embedtext.server.metrics import ServerMetrics

log = logging.getLogger(__name__)

# Methods anyone may call: health checks only.
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from --tls-cert/--tls-key; with --tls-client-ca, client certificates are required."""
    if not config.tls_cert:
        return None
    key = _read(config.tls_key, "--tls-key")
    cert = _read(config.tls_cert, "--tls-cert")
    client_ca = _read(config.tls_client_ca, "tls_client_ca") if config.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _deny(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that ends the call with UNAUTHENTICATED."""

    async def unary(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def streaming(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator

    codecs = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **codecs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming, **codecs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **codecs)
    return grpc.stream_stream_rpc_method_handler(streaming, **codecs)


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks the bearer token on every call but the health service's."""

    def __init__(self, token: str, metrics: ServerMetrics | None = None) -> None:
        if not token:
            raise ValueError("empty token")
        self._expected = f"Bearer {token}".encode()
        self._metrics = metrics

    def _authorized(self, metadata) -> tuple[bool, str]:
        values = [v for k, v in (metadata or ()) if k == "authorization"]
        if not values:
            return False, "this server requires a token: send 'authorization: Bearer <token>' (Client(token=...))"
        given = values[0].encode() if isinstance(values[0], str) else values[0]
        if len(values) == 1 and hmac.compare_digest(given, self._expected):
            return True, ""
        return False, "the token is not valid for this server"

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        ok, message = self._authorized(handler_call_details.invocation_metadata)
        if ok:
            return handler
        if self._metrics is not None:
            self._metrics.unauthenticated.inc()
        log.warning("refused %s: %s", handler_call_details.method, message)
        return _deny(handler, message)
