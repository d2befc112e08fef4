"""Property-based fuzzing of the request decoder (hypothesis).

Whatever bytes arrive, decoding a request either yields well-formed inputs or raises
InvalidInputError with a message; it never raises anything else, never returns rows that
disagree with the offsets, and round-trips what the client's encoder produces.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedtext.protocol import codec
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import InvalidInputError
from embedtext.server.api.decoding import MalformedRequest, decode_inputs, decode_options, tolerant

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

decode_request = tolerant(pb.EmbedRequest)


def decode_everything(payload: bytes):
    """The server's path from bytes to inputs: deserialize, then options and inputs."""
    request = decode_request(payload)
    if isinstance(request, MalformedRequest):
        raise request.error()
    options = decode_options(request)
    return request, options, decode_inputs(request)


def check_inputs(inputs) -> None:
    if inputs.texts is not None:
        assert all(isinstance(t, str) for t in inputs.texts)
    else:
        rows = inputs.token_ids
        assert rows.ids.dtype == np.int32 and (rows.ids >= 0).all()
        assert (rows.lengths >= 0).all() and int(rows.lengths.sum()) == len(rows.ids)


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes_decode_or_fail_clearly(payload):
    try:
        _, _, inputs = decode_everything(payload)
    except InvalidInputError as exc:
        assert exc.message
        return
    check_inputs(inputs)


offsets_like = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=12).map(lambda v: np.array(v, "<i4").tobytes())
arrow_like = st.tuples(st.binary(max_size=64), offsets_like)


@FUZZ
@given(arrow_like)
def test_packed_texts_with_arbitrary_offsets(data_offsets):
    data, offsets = data_offsets
    try:
        out = codec.unpack_texts(data, offsets)
    except InvalidInputError as exc:
        assert exc.message
        return
    bounds = np.frombuffer(offsets, "<i4")
    assert len(out) == len(bounds) - 1
    assert "".join(out).encode() == data  # rows cover the data exactly, in order


@FUZZ
@given(st.binary(max_size=64).map(lambda b: b[: len(b) // 4 * 4]), offsets_like)
def test_packed_token_ids_with_arbitrary_offsets(ids, offsets):
    try:
        flat, lengths = codec.unpack_token_ids(ids, offsets)
    except InvalidInputError as exc:
        assert exc.message
        return
    assert flat.tolist() == np.frombuffer(ids, "<i4").tolist()
    assert (flat >= 0).all() and (lengths >= 0).all() and int(lengths.sum()) == len(flat)
    assert lengths.tolist() == np.diff(np.frombuffer(offsets, "<i4")).tolist()


@FUZZ
@given(
    st.one_of(
        st.builds(
            lambda d, o: pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=d, offsets_i32le=o)),
            st.binary(max_size=64),
            offsets_like,
        ),
        st.builds(lambda t: pb.EmbedRequest(texts=pb.TextList(texts=t)), st.lists(st.text(max_size=20), max_size=5)),
        st.builds(
            lambda i, o: pb.EmbedRequest(token_ids=pb.PackedTokenIds(ids_i32le=i, offsets_i32le=o)),
            st.binary(max_size=32),
            offsets_like,
        ),
    ),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
)
def test_structured_requests_with_arbitrary_fields(request, dimensions, output_dtype, truncation):
    request.dimensions = dimensions
    request.output_dtype = output_dtype
    request.truncation = truncation
    try:
        _, options, inputs = decode_everything(request.SerializeToString())
    except InvalidInputError as exc:
        assert exc.message
        return
    assert options.dimensions == dimensions
    check_inputs(inputs)


@FUZZ
@given(st.lists(st.text(), max_size=20))
def test_client_encoding_round_trips(texts):
    data, offsets = codec.pack_texts(texts)
    request = pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=data, offsets_i32le=offsets))
    if not texts:
        assert decode_everything(request.SerializeToString())[2].texts == []
        return
    assert decode_everything(request.SerializeToString())[2].texts == texts


@FUZZ
@given(st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=8), max_size=8))
def test_token_id_encoding_round_trips(rows):
    ids, offsets = codec.pack_token_ids(rows)
    request = pb.EmbedRequest(token_ids=pb.PackedTokenIds(ids_i32le=ids, offsets_i32le=offsets))
    assert decode_everything(request.SerializeToString())[2].token_ids.to_lists() == rows


@FUZZ
@given(st.binary(min_size=1, max_size=256), st.integers(0, 255))
def test_corrupted_valid_requests(payload_seed, flip):
    """Flip bytes in a valid request: a clear error or a valid (different) request, nothing else."""
    data, offsets = codec.pack_texts(["a cat", "ünïcödé 🙂", ""])
    payload = bytearray(
        pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=data, offsets_i32le=offsets)).SerializeToString()
    )
    for i, b in enumerate(payload_seed):
        payload[(i * 7 + b) % len(payload)] ^= flip or 1
    try:
        _, _, inputs = decode_everything(bytes(payload))
    except InvalidInputError as exc:
        assert exc.message
        return
    check_inputs(inputs)
