"""Request bytes -> what the runtime needs, refusing anything malformed with a clear message.

gRPC's own deserialization failure ends a call with INTERNAL "Exception deserializing
request!", which tells a caller nothing. The service is therefore registered (servicer.add_service)
with tolerant deserializers: bytes that are not a valid message become a ``MalformedRequest`` that the
servicer answers with INVALID_ARGUMENT (or, on a stream, an error item; the stream goes on).
``decode_inputs`` and ``decode_options`` check every field a client controls; their only
exception is ``InvalidInputError`` (tests/unit/server/test_decoding_fuzz.py fuzzes them).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from embedtext.protocol import codec
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import InvalidInputError
from embedtext.server.models.prompts import MAX_PROMPT_CHARS
from embedtext.server.rows import TokenRows
from embedtext.server.scheduler.options import EmbedOptions, SplitOptions

_OUTPUT_DTYPES = frozenset(
    (pb.OUTPUT_DTYPE_UNSPECIFIED, pb.OUTPUT_DTYPE_FLOAT32, pb.OUTPUT_DTYPE_FLOAT16, pb.OUTPUT_DTYPE_FLOAT32_REPEATED)
)
_TRUNCATIONS = frozenset((pb.TRUNCATION_UNSPECIFIED, pb.TRUNCATION_END, pb.TRUNCATION_NONE))
_INTERACTIVE = {pb.LATENCY_CLASS_UNSPECIFIED: None, pb.LATENCY_CLASS_INTERACTIVE: True, pb.LATENCY_CLASS_BULK: False}
MAX_CALLER_CHARS = 128  # the queue keeps one entry per waiting caller: names stay short


@dataclass(frozen=True)
class MalformedRequest:
    """Bytes that did not parse as the expected message."""

    message_type: str
    size: int
    reason: str

    def error(self) -> InvalidInputError:
        return InvalidInputError(
            f"malformed request: {self.size} bytes are not a valid {self.message_type} ({self.reason}); "
            "build requests with the generated embedtext.v1 code"
        )


def tolerant(message_cls):
    """A deserializer that returns ``MalformedRequest`` instead of raising."""

    def deserialize(data: bytes):
        try:
            return message_cls.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            return MalformedRequest(message_cls.DESCRIPTOR.full_name, len(data), str(exc) or type(exc).__name__)

    return deserialize


def decode_options(request: pb.EmbedRequest) -> EmbedOptions:
    if request.output_dtype not in _OUTPUT_DTYPES:
        raise InvalidInputError(
            f"unknown output_dtype {request.output_dtype}; expected one of {sorted(_OUTPUT_DTYPES)}"
        )
    if request.truncation not in _TRUNCATIONS:
        raise InvalidInputError(f"unknown truncation {request.truncation}; expected one of {sorted(_TRUNCATIONS)}")
    if request.latency_class not in _INTERACTIVE:
        raise InvalidInputError(
            f"unknown latency_class {request.latency_class}; expected one of {sorted(_INTERACTIVE)}"
        )
    if len(request.caller) > MAX_CALLER_CHARS:
        raise InvalidInputError(f"caller is {len(request.caller)} characters; at most {MAX_CALLER_CHARS}")
    _check_prompt(request)
    return EmbedOptions(
        dimensions=request.dimensions,
        normalize=request.normalize if request.HasField("normalize") else None,
        truncate=request.truncation != pb.TRUNCATION_NONE,
        interactive=_INTERACTIVE[request.latency_class],
        caller=request.caller,
        prompt_name=request.prompt_name,
        prompt=request.prompt if request.HasField("prompt") else None,
    )


def _check_prompt(request: pb.EmbedRequest | pb.SplitRequest) -> None:
    if len(request.prompt_name) > MAX_CALLER_CHARS:
        raise InvalidInputError(f"prompt_name is {len(request.prompt_name)} characters; at most {MAX_CALLER_CHARS}")
    if len(request.prompt) > MAX_PROMPT_CHARS:
        raise InvalidInputError(f"prompt is {len(request.prompt)} characters; at most {MAX_PROMPT_CHARS}")


def decode_split_options(request: pb.SplitRequest) -> SplitOptions:
    _check_prompt(request)
    return SplitOptions(
        max_tokens=request.max_tokens,
        overlap=request.overlap_tokens,
        prompt_name=request.prompt_name,
        prompt=request.prompt if request.HasField("prompt") else None,
    )


@dataclass(frozen=True)
class Inputs:
    texts: list[str] | None = None
    token_ids: TokenRows | None = None


def decode_inputs(request: pb.EmbedRequest | pb.SplitRequest) -> Inputs:
    kind = request.WhichOneof("inputs")
    if kind == "packed_texts":
        return Inputs(texts=codec.unpack_texts(request.packed_texts.data_utf8, request.packed_texts.offsets_i32le))
    if kind == "texts":
        return Inputs(texts=list(request.texts.texts))
    if kind == "token_ids":  # EmbedRequest only
        ids, lengths = codec.unpack_token_ids(request.token_ids.ids_i32le, request.token_ids.offsets_i32le)
        return Inputs(token_ids=TokenRows(ids, lengths))
    raise InvalidInputError("the request holds no inputs: set packed_texts, texts or token_ids")
