"""Hostile and odd input against a real server: each case gets a clear status and message,
and the server keeps serving. The table in the README ("What each case returns") lists them.

Cases go through raw gRPC (the client library would refuse many of them before sending).
"""

import grpc
import numpy as np
import pyarrow as pa
import pytest

from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import InvalidInputError

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
MAX_TOKENS = 128  # the tiny model's


def i32(*values) -> bytes:
    return np.array(values, dtype="<i4").tobytes()


def packed(data: bytes, *offsets) -> pb.EmbedRequest:
    return pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=data, offsets_i32le=i32(*offsets)))


def texts(*values, **fields) -> pb.EmbedRequest:
    return pb.EmbedRequest(texts=pb.TextList(texts=list(values)), **fields)


def ids(rows, **fields) -> pb.EmbedRequest:
    flat = [t for r in rows for t in r]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    return pb.EmbedRequest(token_ids=pb.PackedTokenIds(ids_i32le=i32(*flat), offsets_i32le=i32(*offsets)), **fields)


ONE_MB = ("lorem ipsum dolor sit amet " * 40000)[: 1 << 20]
EMOJI = "naïve café 東京 Москва مرحبا 👩‍👩‍👧‍👦 🙂 ∑∫√ \u200b\u200d\u202e"

# (id, request or raw bytes, expected status, text the message must contain, rows expected on OK)
CASES = [
    # --- texts that are odd but valid: a vector per row ---
    ("empty-string", texts(""), OK, None, 1),
    ("whitespace-only", texts("   \t\n  "), OK, None, 1),
    ("one-megabyte-text-truncated", texts(ONE_MB), OK, None, 1),
    ("nul-bytes-inside", texts("a\x00b\x00\x00c"), OK, None, 1),
    ("only-nul-bytes", packed(b"\x00\x00\x00", 0, 3), OK, None, 1),
    ("mixed-scripts-and-emoji", texts(EMOJI, EMOJI[::-1]), OK, None, 2),
    ("control-characters", texts("\x01\x02\x1b[31mred\x1b[0m\x7f"), OK, None, 1),
    ("byte-order-mark", packed("\ufeffhello".encode(), 0, 8), OK, None, 1),
    ("special-token-strings", texts("[CLS] [SEP] [MASK] [PAD] [UNK] <s> </s>"), OK, None, 1),
    ("many-empty-rows", texts(*[""] * 4000), OK, None, 4000),
    ("packed-with-empty-rows", packed(b"abc", 0, 0, 3, 3), OK, None, 3),
    ("huge-request-id", texts("a", request_id=2**64 - 1), OK, None, 1),
    ("dimensions-zero-means-all", texts("a", dimensions=0), OK, None, 1),
    # --- text that cannot be embedded as asked ---
    ("one-megabyte-text-no-truncation", texts(ONE_MB, truncation=pb.TRUNCATION_NONE), INVALID, "truncation is off", 0),
    # --- bytes that are not UTF-8 ---
    ("invalid-utf8", packed(b"ok\xff\xfe", 0, 2, 4), INVALID, "row 1 is not valid UTF-8", 0),
    ("overlong-utf8", packed(b"\xc0\xaf", 0, 2), INVALID, "not valid UTF-8", 0),
    ("utf16-surrogate-in-utf8", packed(b"\xed\xa0\x80", 0, 3), INVALID, "not valid UTF-8", 0),
    ("offset-splits-a-character", packed("é".encode(), 0, 1, 2), INVALID, "not valid UTF-8", 0),
    ("truncated-multibyte", packed(b"\xe6\x9d", 0, 2), INVALID, "not valid UTF-8", 0),
    # --- packed layout that does not add up ---
    ("last-offset-past-data", packed(b"abc", 0, 5), INVALID, "last offset is 5", 0),
    ("last-offset-short-of-data", packed(b"abcdef", 0, 3), INVALID, "last offset is 3", 0),
    ("first-offset-not-zero", packed(b"abc", 1, 3), INVALID, "first offset is 1", 0),
    ("offsets-decrease", packed(b"abcd", 0, 3, 1, 4), INVALID, "decrease at row 1", 0),
    ("negative-offset", packed(b"abc", 0, -1, 3), INVALID, "decrease", 0),
    ("offsets-empty", pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=b"abc")), INVALID, "offsets are empty", 0),
    (
        "offsets-not-int32-sized",
        pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=b"abc", offsets_i32le=b"\x00\x00\x00")),
        INVALID,
        "not a multiple of 4",
        0,
    ),
    ("zero-rows-packed", packed(b"", 0), INVALID, "no rows", 0),
    # --- token ids ---
    ("negative-token-id", ids([[2, -5, 3]]), INVALID, "negative token id", 0),
    ("out-of-vocabulary-token-id", ids([[2, 10**6, 3]]), INVALID, "outside the vocabulary", 0),
    ("int32-max-token-id", ids([[2**31 - 1]]), INVALID, "outside the vocabulary", 0),
    ("empty-token-row", ids([[2, 3], []]), INVALID, "row 1 is empty", 0),
    (
        "token-row-too-long-no-truncation",
        ids([[5] * (MAX_TOKENS + 1)], truncation=pb.TRUNCATION_NONE),
        INVALID,
        "at most",
        0,
    ),
    ("token-row-too-long-truncated", ids([[5] * (MAX_TOKENS + 50)]), OK, None, 1),
    (
        "token-ids-not-int32-sized",
        pb.EmbedRequest(token_ids=pb.PackedTokenIds(ids_i32le=b"\x01\x00", offsets_i32le=i32(0, 1))),
        INVALID,
        "not a multiple of 4",
        0,
    ),
    (
        "token-offsets-past-ids",
        pb.EmbedRequest(token_ids=pb.PackedTokenIds(ids_i32le=i32(5), offsets_i32le=i32(0, 9))),
        INVALID,
        "last offset",
        0,
    ),
    # --- options ---
    ("unknown-model", texts("a", model="no-such-model"), grpc.StatusCode.NOT_FOUND, "served models: tiny", 0),
    ("megabyte-model-name", texts("a", model="m" * (1 << 20)), grpc.StatusCode.NOT_FOUND, "characters", 0),
    ("dimensions-above-model", texts("a", dimensions=129), INVALID, "has 128 dimensions", 0),
    ("dimensions-huge", texts("a", dimensions=2**32 - 1), INVALID, "dimensions", 0),
    ("unknown-output-dtype", texts("a", output_dtype=99), INVALID, "unknown output_dtype", 0),
    ("unknown-truncation", texts("a", truncation=7), INVALID, "unknown truncation", 0),
    ("no-inputs", pb.EmbedRequest(), INVALID, "no inputs", 0),
    ("empty-text-list", texts(), INVALID, "no rows", 0),
    ("too-many-rows", texts(*["x"] * 16385), INVALID, "at most 16384", 0),
    # --- bytes that are not a request at all ---
    ("malformed-protobuf", b"\xff\xff\xff\xff", INVALID, "malformed request", 0),
    ("truncated-protobuf", texts("hello world").SerializeToString()[:-3], INVALID, "malformed request", 0),
    (
        "pickle-payload",
        b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x8c\x07os.exit\x94.",
        INVALID,
        "malformed request",
        0,
    ),
    ("json-payload", b'{"input": ["a cat"], "model": "tiny"}', INVALID, "malformed", 0),
    # another message's bytes: its fields do not fit EmbedRequest's wire types, so none is set
    ("wrong-message-type", pb.ModelInfo(dim=5, max_tokens=7).SerializeToString(), INVALID, "no inputs", 0),
    # --- a message over the limit (64 MiB) ---
    ("over-the-message-limit", texts("x" * (65 << 20)), grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max", 0),
]


@pytest.fixture(scope="module")
def raw_embed(servers):
    channel = grpc.insecure_channel(
        servers.tiny.target,
        options=[("grpc.max_send_message_length", 128 << 20), ("grpc.max_receive_message_length", 128 << 20)],
    )
    with channel:
        yield channel.unary_unary("/embedtext.v1.Embedding/Embed")  # bytes in, bytes out


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("request_, code, match, rows", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_answer(raw_embed, request_, code, match, rows):
    payload = request_ if isinstance(request_, bytes) else request_.SerializeToString()
    if code == OK:
        reply = pb.EmbedResponse.FromString(raw_embed(payload, timeout=120))
        assert (reply.count, reply.dim) == (rows, 128)
        vectors = np.frombuffer(reply.embeddings_f32le, dtype="<f4").reshape(rows, 128)
        assert np.isfinite(vectors).all()
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        return
    with pytest.raises(grpc.RpcError) as info:
        raw_embed(payload, timeout=120)
    assert info.value.code() == code, info.value.details()
    assert match in info.value.details()
    assert len(info.value.details()) < 1000  # a message, not an echo of the input


def test_server_still_serves_after_every_case(servers, tiny_client):
    if servers.tiny.pid is not None:
        assert servers.tiny.process.poll() is None
    assert tiny_client.embed(["still here"]).shape == (1, 128)


def test_client_refuses_nulls_before_sending(tiny_client):
    with pytest.raises(InvalidInputError, match="row 2 is NULL"):
        tiny_client.embed(pa.array(["a", "b", None]))
    with pytest.raises(InvalidInputError, match="row 0 is NULL"):
        tiny_client.embed([None, "b"])


def test_odd_texts_through_duckdb(servers, tiny_client):
    import duckdb

    import embedtext

    con = duckdb.connect()
    embedtext.register(con, servers.tiny.target)
    rows = ["", "  ", None, EMOJI, "a\x00b", ONE_MB]
    con.register("t", pa.table({"i": list(range(len(rows))), "body": rows}))
    got = con.sql("SELECT i, embed_text(body) FROM t ORDER BY i").fetchall()
    assert [v is None for _, v in got] == [True, True, True, False, False, False]
    expected = tiny_client.embed([EMOJI, "a\x00b", ONE_MB])
    np.testing.assert_allclose(np.array([v for _, v in got[3:]]), expected, atol=1e-5)
