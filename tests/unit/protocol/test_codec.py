import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from embedtext.protocol import codec
from embedtext.protocol.errors import InvalidInputError, ProtocolError


def test_texts_round_trip_exact():
    texts = ["", "a", "héllo wörld", "emoji 🐱", "nul\x00inside", "x" * 10_000]
    data, offsets = codec.pack_texts(texts)
    assert codec.unpack_texts(data, offsets) == texts


def test_sliced_arrow_array_is_rebased():
    arr = pa.array(["zero", "one", "two", "three"]).slice(1, 2)
    data, offsets = codec.pack_texts(arr)
    assert data == b"onetwo"
    assert np.frombuffer(offsets, "<i4").tolist() == [0, 3, 6]
    assert codec.unpack_texts(data, offsets) == ["one", "two"]


def test_a_slice_packs_its_own_bytes_and_not_its_parents():
    """A client's sub-batches are slices of the caller's column: packing one allocates that slice's
    bytes, not the whole column's (which made packing every slice of a column quadratic)."""
    parent = pa.array(["x" * 1000] * 8000)  # 8 MB of text
    tracemalloc.start()
    try:
        data, _ = codec.pack_texts(parent.slice(4000, 10))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == b"x" * 10_000
    assert peak < 1_000_000, f"packing 10 rows allocated {peak:,} bytes"


def test_large_string_and_chunked_arrays_are_accepted():
    arr = pa.chunked_array([pa.array(["a", "b"], pa.large_string()), pa.array(["c"], pa.large_string())])
    assert codec.unpack_texts(*codec.pack_texts(arr)) == ["a", "b", "c"]


def test_null_is_rejected_with_row_number():
    with pytest.raises(InvalidInputError, match="row 1 is NULL"):
        codec.pack_texts(pa.array(["a", None]))


def test_single_string_is_a_type_error():
    with pytest.raises(TypeError, match="single str"):
        codec.pack_texts("hello")


@pytest.mark.parametrize(
    "offsets, match",
    [
        ([1, 3], "first offset"),
        ([0, 2], "last offset"),
        ([0, 3, 1, 3], "decrease at row 1"),
        ([], "empty"),
    ],
)
def test_bad_offsets_are_rejected(offsets, match):
    with pytest.raises(InvalidInputError, match=match):
        codec.unpack_texts(b"abc", np.array(offsets, "<i4").tobytes())


def test_offsets_not_multiple_of_four():
    with pytest.raises(InvalidInputError, match="multiple of 4"):
        codec.unpack_texts(b"abc", b"\x00\x00\x00")


def test_invalid_utf8_names_the_row():
    data = b"ok" + b"\xff\xfe"
    with pytest.raises(InvalidInputError, match="row 1 is not valid UTF-8"):
        codec.unpack_texts(data, np.array([0, 2, 4], "<i4").tobytes())


def test_token_ids_round_trip_and_checks():
    rows = [[2, 5, 3], [], [7]]
    ids, offsets = codec.pack_token_ids(rows)
    flat, lengths = codec.unpack_token_ids(ids, offsets)
    assert (flat.tolist(), lengths.tolist()) == ([2, 5, 3, 7], [3, 0, 1])
    bad = np.array([2, -5, 3], "<i4").tobytes()
    with pytest.raises(InvalidInputError, match="row 0 holds a negative"):
        codec.unpack_token_ids(bad, np.array([0, 3], "<i4").tobytes())


def test_embeddings_round_trip_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 384)).astype(np.float32)
    buf = codec.embeddings_to_bytes(x)
    assert len(buf) == 37 * 384 * 4
    np.testing.assert_array_equal(codec.bytes_to_ndarray(buf, 37, 384), x)
    arrow = codec.bytes_to_arrow(buf, 37, 384)
    assert arrow.type == pa.list_(pa.float32(), 384)
    np.testing.assert_array_equal(arrow.flatten().to_numpy().reshape(37, 384), x)


def test_byte_layout_is_little_endian_row_major():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=">f4")  # big-endian input is converted
    buf = codec.embeddings_to_bytes(x)
    assert buf == np.array([1.0, 2.0, 3.0, 4.0], "<f4").tobytes()


def test_zero_copy_same_buffer_address():
    buf = codec.embeddings_to_bytes(np.ones((4, 8), np.float32))
    arrow = codec.bytes_to_arrow(buf, 4, 8)
    array = codec.bytes_to_ndarray(buf, 4, 8)
    address = pa.py_buffer(buf).address
    assert arrow.values.buffers()[1].address == address
    assert array.__array_interface__["data"][0] == address


@pytest.mark.parametrize("count, dim", [(3, 8), (4, 7), (5, 8)])
def test_wrong_count_or_dim_rejected(count, dim):
    buf = codec.embeddings_to_bytes(np.ones((4, 8), np.float32))
    with pytest.raises(ProtocolError, match="bytes"):
        codec.bytes_to_arrow(buf, count, dim)
    with pytest.raises(ProtocolError):
        codec.bytes_to_ndarray(buf, count, dim)
