"""EmbedResponse bytes with the embeddings buffer spliced in (server) and viewed in place (client).

protobuf copies a bytes field when it is set, serialized, parsed and read: four copies of a
6 MB buffer per 2048 x 768 reply, each on fresh memory. Here protobuf writes and reads only the
small fields; the embeddings field is appended by hand on the server (one copy: the join) and
viewed inside the received bytes on the client (no copy). What travels is an ordinary
EmbedResponse, so any protobuf client can read it; a field that comes after the ones protobuf
wrote is legal protobuf (fields may arrive in any order).

>>> import numpy as np
>>> out = OutgoingReply(pb.EmbedResponse(count=2, dim=2), np.eye(2, dtype="<f4"))
>>> reply = parse_reply(serialize_reply(out))
>>> reply.count, np.frombuffer(reply.embeddings_f32le, "<f4").tolist()
(2, [1.0, 0.0, 0.0, 1.0])
>>> pb.EmbedResponse.FromString(serialize_reply(out)).embeddings_f32le == np.eye(2, dtype="<f4").tobytes()
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedtext.protocol import embedding_pb2 as pb

_LEN = 2  # protobuf wire type of bytes / sub-messages
_FIELD_F32 = pb.EmbedResponse.DESCRIPTOR.fields_by_name["embeddings_f32le"].number
_FIELD_F16 = pb.EmbedResponse.DESCRIPTOR.fields_by_name["embeddings_f16le"].number
_FIELD_BY_DTYPE = {
    pb.OUTPUT_DTYPE_UNSPECIFIED: _FIELD_F32,
    pb.OUTPUT_DTYPE_FLOAT32: _FIELD_F32,
    pb.OUTPUT_DTYPE_FLOAT16: _FIELD_F16,
}


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_prefix(field: int, length: int) -> bytes:
    return _varint(field << 3 | _LEN) + _varint(length)


# --- server side ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OutgoingReply:
    """A reply whose embeddings are serialized without protobuf: ``message`` holds every other field
    (its ``dtype`` says which embeddings field to write), ``embeddings`` the (count, dim) array."""

    message: pb.EmbedResponse
    embeddings: np.ndarray

    @property
    def model(self) -> str:
        return self.message.model

    def parts(self) -> list:
        head = self.message.SerializeToString()
        body = memoryview(np.ascontiguousarray(self.embeddings).reshape(-1).view(np.uint8))
        if not body.nbytes:
            return [head]  # proto3 omits an empty bytes field
        return [head, _len_prefix(_FIELD_BY_DTYPE[self.message.dtype], body.nbytes), body]


def serialize_reply(reply: OutgoingReply | pb.EmbedResponse) -> bytes:
    """The servicer's EmbedResponse serializer (a plain message is serialized by protobuf)."""
    if isinstance(reply, OutgoingReply):
        return b"".join(reply.parts())
    return reply.SerializeToString()


# --- client side ---------------------------------------------------------------------------


class ReceivedReply:
    """A parsed EmbedResponse whose embeddings fields are memoryviews into the received bytes.

    Reads like the protobuf message (other attributes come from ``message``); numpy and Arrow
    arrays made from the views keep the received bytes alive.
    """

    __slots__ = ("message", "embeddings_f32le", "embeddings_f16le")

    def __init__(self, message: pb.EmbedResponse, f32: memoryview, f16: memoryview) -> None:
        self.message = message
        self.embeddings_f32le = f32
        self.embeddings_f16le = f16

    def __getattr__(self, name: str):
        return getattr(self.message, name)


class _NotSplit(Exception):
    """The bytes are not what this scanner expects; protobuf parses them instead."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _NotSplit
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _split(data: bytes) -> tuple[bytes, dict[int, tuple[int, int]]]:
    """Top-level fields of ``data`` -> (the bytes of every field but 6 and 7, their value spans)."""
    kept: list[bytes] = []
    spans: dict[int, tuple[int, int]] = {}
    pos = kept_from = 0
    while pos < len(data):
        start = pos
        tag, pos = _read_varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, pos = _read_varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == _LEN:
            length, pos = _read_varint(data, pos)
            if field in (_FIELD_F32, _FIELD_F16):
                if pos + length > len(data):
                    raise _NotSplit
                kept.append(data[kept_from:start])
                spans[field] = (pos, pos + length)  # the last occurrence wins, as in protobuf
                kept_from = pos + length
            pos += length
        else:
            raise _NotSplit  # groups: never written by embedtext
        if pos > len(data):
            raise _NotSplit
    kept.append(data[kept_from:])
    return b"".join(kept), spans


def parse_reply(data: bytes) -> ReceivedReply:
    """The client's EmbedResponse deserializer: protobuf parses all but the embeddings, which stay
    in ``data``. Bytes this scanner does not expect go to protobuf whole (same result, same errors)."""
    view = memoryview(data)
    try:
        head, spans = _split(data)
    except _NotSplit:
        message = pb.EmbedResponse.FromString(data)
        return ReceivedReply(message, memoryview(message.embeddings_f32le), memoryview(message.embeddings_f16le))
    if not spans:
        return ReceivedReply(pb.EmbedResponse.FromString(data), memoryview(b""), memoryview(b""))
    message = pb.EmbedResponse.FromString(head)
    f32 = view[slice(*spans[_FIELD_F32])] if _FIELD_F32 in spans else memoryview(b"")
    f16 = view[slice(*spans[_FIELD_F16])] if _FIELD_F16 in spans else memoryview(b"")
    return ReceivedReply(message, f32, f16)
