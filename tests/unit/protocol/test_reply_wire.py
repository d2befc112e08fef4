"""reply_wire: the spliced EmbedResponse bytes are ordinary protobuf, and the client's parser
agrees with protobuf's on every input (the real protobuf runtime is the reference here)."""

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedtext.protocol import codec
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.reply_wire import OutgoingReply, parse_reply, serialize_reply

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outgoing(vectors: np.ndarray, dtype=pb.OUTPUT_DTYPE_FLOAT32, **fields) -> OutgoingReply:
    count, dim = vectors.shape
    message = pb.EmbedResponse(count=count, dim=dim, dtype=dtype, model="m", request_id=7, **fields)
    wire = codec.F16LE if dtype == pb.OUTPUT_DTYPE_FLOAT16 else codec.F32LE
    return OutgoingReply(message, codec.embeddings_as(vectors, wire))


def fields_of(message) -> dict:
    return {f.name: v for f, v in message.ListFields()}


@pytest.mark.parametrize("dtype", [pb.OUTPUT_DTYPE_FLOAT32, pb.OUTPUT_DTYPE_FLOAT16])
def test_spliced_reply_is_the_message_protobuf_would_write(dtype):
    vectors = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    reply = outgoing(vectors, dtype, token_counts_i32le=codec.int32s_to_bytes([1, 2, 3, 4, 5]), queue_time_ns=9)
    data = serialize_reply(reply)
    expected = pb.EmbedResponse()
    expected.CopyFrom(reply.message)
    wire = codec.F16LE if dtype == pb.OUTPUT_DTYPE_FLOAT16 else codec.F32LE
    field = "embeddings_f16le" if dtype == pb.OUTPUT_DTYPE_FLOAT16 else "embeddings_f32le"
    setattr(expected, field, vectors.astype(wire).tobytes())
    assert pb.EmbedResponse.FromString(data) == expected  # any protobuf client reads it
    parsed = parse_reply(data)
    assert bytes(getattr(parsed, field)) == vectors.astype(wire).tobytes()
    assert parsed.count == 5 and parsed.dim == 3 and parsed.model == "m" and parsed.queue_time_ns == 9
    assert parsed.message.embeddings_f32le == b"" and parsed.message.embeddings_f16le == b""


def test_client_views_the_received_bytes_without_copying():
    data = serialize_reply(outgoing(np.ones((4, 2), np.float32)))
    parsed = parse_reply(data)
    assert parsed.embeddings_f32le.obj is data
    arr = codec.bytes_to_arrow(parsed.embeddings_f32le, 4, 2)
    assert arr.to_pylist() == [[1.0, 1.0]] * 4


def test_empty_reply_has_no_embeddings_field():
    data = serialize_reply(outgoing(np.empty((0, 8), np.float32)))
    assert data == pb.EmbedResponse.FromString(data).SerializeToString()
    assert len(parse_reply(data).embeddings_f32le) == 0


def test_repeated_float_reply_goes_through_protobuf():
    message = pb.EmbedResponse(count=1, dim=2, dtype=pb.OUTPUT_DTYPE_FLOAT32_REPEATED, embeddings_f32=[1.5, 2.5])
    parsed = parse_reply(serialize_reply(message))
    assert list(parsed.embeddings_f32) == [1.5, 2.5] and len(parsed.embeddings_f32le) == 0


def test_truncated_reply_raises_what_protobuf_raises():
    data = serialize_reply(outgoing(np.ones((4, 2), np.float32)))
    with pytest.raises(DecodeError):
        parse_reply(data[:-3])


def _protobuf_outcome(data: bytes):
    try:
        message = pb.EmbedResponse.FromString(data)
    except DecodeError:
        return "DecodeError"
    return fields_of(message)


def _our_outcome(data: bytes):
    try:
        parsed = parse_reply(data)
    except DecodeError:
        return "DecodeError"
    fields = fields_of(parsed.message)
    for name in ("embeddings_f32le", "embeddings_f16le"):
        if len(getattr(parsed, name)):
            fields[name] = bytes(getattr(parsed, name))
    return fields


@FUZZ
@given(st.binary(max_size=300))
def test_parser_agrees_with_protobuf_on_arbitrary_bytes(data):
    assert _our_outcome(data) == _protobuf_outcome(data)


@FUZZ
@given(
    count=st.integers(0, 6),
    dim=st.integers(1, 5),
    model=st.text(max_size=20),
    counts=st.binary(max_size=24),
    half=st.booleans(),
    extra=st.binary(max_size=40),
)
def test_parser_agrees_with_protobuf_on_replies_and_appended_fields(count, dim, model, counts, half, extra):
    """Our replies, with arbitrary bytes appended (more fields, repeats, garbage): same outcome."""
    vectors = np.random.default_rng(count * 10 + dim).standard_normal((count, dim)).astype(np.float32)
    dtype = pb.OUTPUT_DTYPE_FLOAT16 if half else pb.OUTPUT_DTYPE_FLOAT32
    reply = outgoing(vectors, dtype, token_counts_i32le=counts)
    reply.message.model = model
    data = serialize_reply(reply) + extra
    assert _our_outcome(data) == _protobuf_outcome(data)
