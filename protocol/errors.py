"""The one error hierarchy of embedtext, and the ONE table between it and gRPC status codes.

The server raises these; ``servicer`` turns them into a status code with
:func:`to_status`; the client turns a failed call back into the same class with
:func:`from_rpc_error`. Nothing else maps errors, so both ends always agree.
"""

from __future__ import annotations

import grpc


class EmbedTextError(Exception):
    """Root of every error embedtext raises on purpose."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, target: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.target = target

    def __str__(self) -> str:
        if self.target:
            return f"{self.message} (server {self.target})"
        return self.message


class InvalidInputError(EmbedTextError, ValueError):
    """The request is malformed: bad offsets, a row too long with truncation off, bad dimensions."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class ModelNotFoundError(EmbedTextError, LookupError):
    """The request names a model the server does not serve."""

    code = grpc.StatusCode.NOT_FOUND


class OverloadedError(EmbedTextError):
    """The server's queue is full; back off and retry later.

    ``retry_after_s``: when the server expects room (sent as the ``grpc-retry-pushback-ms``
    trailer); the clients wait that long, with jitter, before they retry within their deadline.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, *, target: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, target=target)
        self.retry_after_s = retry_after_s


class UnavailableError(EmbedTextError, ConnectionError):
    """The server (or every replica of the model) cannot be reached right now."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(EmbedTextError, TimeoutError):
    """The call's deadline passed before the embeddings were ready."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class UnauthenticatedError(EmbedTextError, PermissionError):
    """A token is missing or wrong."""

    code = grpc.StatusCode.UNAUTHENTICATED


class InternalError(EmbedTextError, RuntimeError):
    """A bug or an engine failure on the server; the message says which."""

    code = grpc.StatusCode.INTERNAL


class ProtocolError(EmbedTextError):
    """The reply does not match the protocol (wrong byte count, unknown dtype)."""

    code = grpc.StatusCode.DATA_LOSS


_ERRORS: tuple[type[EmbedTextError], ...] = (
    InvalidInputError,
    ModelNotFoundError,
    OverloadedError,
    UnavailableError,
    DeadlineExceededError,
    UnauthenticatedError,
    InternalError,
    ProtocolError,
)

# The table: status code <-> exception class.
ERROR_FOR_CODE: dict[grpc.StatusCode, type[EmbedTextError]] = {cls.code: cls for cls in _ERRORS}
ERROR_FOR_CODE[grpc.StatusCode.UNKNOWN] = InternalError
ERROR_FOR_CODE[grpc.StatusCode.OUT_OF_RANGE] = InvalidInputError
ERROR_FOR_CODE[grpc.StatusCode.FAILED_PRECONDITION] = InvalidInputError
ERROR_FOR_CODE[grpc.StatusCode.PERMISSION_DENIED] = UnauthenticatedError
# The clients never cancel a call they still wait for, so a cancelled call was ended by a server
# going away (gRPC cancels the calls a stopping server holds: grpc/grpc#41785): it did not run to
# completion, as after UNAVAILABLE, and is retried the same way.
ERROR_FOR_CODE[grpc.StatusCode.CANCELLED] = UnavailableError


def to_status(error: EmbedTextError) -> tuple[grpc.StatusCode, str]:
    """The status code and message a server sends for ``error``."""
    return error.code, error.message


def from_status(code: grpc.StatusCode, message: str, *, target: str | None = None) -> EmbedTextError:
    """The exception a client raises for a failed call."""
    cls = ERROR_FOR_CODE.get(code, InternalError)
    return cls(message or code.name, target=target)


def _sent_code(error: grpc.RpcError) -> grpc.StatusCode:
    """The status code of a failed call (sync or aio), as gRPC reports it."""
    return error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN


def received_code(error: grpc.RpcError) -> grpc.StatusCode:
    """The status code a client acts on: a cancel it never asked for counts as UNAVAILABLE."""
    code = _sent_code(error)
    return grpc.StatusCode.UNAVAILABLE if code == grpc.StatusCode.CANCELLED else code


def from_rpc_error(error: grpc.RpcError, *, target: str | None = None) -> EmbedTextError:
    """Turn a ``grpc.RpcError`` (sync or aio) into the matching embedtext exception."""
    code = _sent_code(error)
    details = error.details() if callable(getattr(error, "details", None)) else str(error)
    if code == grpc.StatusCode.CANCELLED:
        details = f"{details or 'Cancelled'}: the server ended the call before it finished (it is stopping)"
        if target:
            details += f"; is `embedtext serve` running and reachable at {target}?"
    elif code == grpc.StatusCode.UNAVAILABLE and target and ("connect" in (details or "").lower() or not details):
        # The server could not be reached at all (not a server that answered UNAVAILABLE).
        details = f"{details}; is `embedtext serve` running and reachable at {target}?"
        if "socket closed" in details.lower() or "handshake" in details.lower():
            # What a TLS mismatch looks like from the client: plain vs TLS, an untrusted CA, or
            # a client certificate the server requires but did not get or does not trust.
            details += " If it uses TLS, check tls= (the server's CA, and a client certificate for mutual TLS)."
    return from_status(code, details or "", target=target)
