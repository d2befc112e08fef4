"""Long texts on the real all-MiniLM-L6-v2 (256 tokens): chunks cut by its own tokens through the
server's Split, embedded as texts, against sentence-transformers on the same weights; in DuckDB a
row per chunk (``embed_text_chunks``) and the mean of a text's chunks (``long_texts="mean"``)."""

from __future__ import annotations

import numpy as np
import pytest

# Three documents of several chunks each (paragraphs, lines, sentences), a short one, and blanks.
PARAGRAPH = (
    "Sourdough bread needs only flour, water and salt, but it needs time. The starter is fed the day before. "
    "Mix, rest for an hour, then fold the dough every half hour until it is smooth and strong!\n"
    "Shape it, let it rise overnight in the cold, and bake it hot in a covered pot for the best crust."
)
DOCUMENTS = [
    "\n\n".join([PARAGRAPH] * 5),
    "The stock market fell sharply after the interest rate decision. " * 25,
    "Ünïcödé, emoji 🐱🚀, 日本語 and naïve café text. " * 30,
    "A short one.",
    "",
    "   ",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer

    from embedtext.server.models.source import load_model_spec

    return SentenceTransformer(str(load_model_spec("default").path), device="cpu")


def test_chunks_cover_every_token_within_the_size_and_the_overlap(minilm_client, reference):
    """Checked on sentence-transformers' own tokenizer: chunk k holds tokens [a, a + n), each next
    chunk starting ``overlap`` tokens before the last one's end, its span from its first token's
    start to its last token's end, and the last chunk ending with the text's last token."""
    size, overlap = 100, 20
    chunks = minilm_client.split(DOCUMENTS, max_tokens=size, overlap=overlap)
    assert chunks.max_tokens == size
    assert chunks.counts.tolist()[3:] == [1, 0, 0] and min(chunks.counts[:3]) >= 3
    for row, text in enumerate(DOCUMENTS[:4]):
        offsets = reference.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        mine = chunks.row == row
        a, last_end = 0, 0
        for start, end, n, chunk_text in zip(
            chunks.start[mine], chunks.end[mine], chunks.tokens[mine], np.array(chunks.text, dtype=object)[mine]
        ):
            assert 0 < n <= size
            assert (offsets[a][0], offsets[a + n - 1][1]) == (start, end)
            assert text[start:end] == chunk_text
            last_end = a + n
            a += n - overlap
        assert last_end == len(offsets)


def test_chunk_vectors_equal_sentence_transformers_on_the_chunks_texts(minilm_client, reference):
    chunks = minilm_client.embed_chunks(DOCUMENTS, max_tokens=120, overlap=16)
    want = reference.encode(chunks.text, convert_to_numpy=True)
    assert _cosines(chunks.vectors, want).min() >= 0.9999
    # The default size is what the model takes beside its [CLS] and [SEP]: no chunk is truncated.
    whole = minilm_client.split(DOCUMENTS)
    assert whole.max_tokens == 254 and whole.tokens.max() <= 254
    assert max(len(reference.tokenizer(t)["input_ids"]) for t in whole.text) <= 256


def test_embed_text_chunks_gives_a_row_per_chunk_in_duckdb(minilm_client, reference):
    import duckdb

    import embedtext

    con = duckdb.connect()
    embedtext.register(con, minilm_client)
    con.execute("CREATE TABLE docs (id INTEGER, body VARCHAR)")
    con.executemany("INSERT INTO docs VALUES (?, ?)", [(i, d) for i, d in enumerate(DOCUMENTS)] + [(99, None)])
    rows = con.sql(
        """SELECT d.id, c.chunk_index, c.char_start, c.char_end, c.tokens, c.text, c.embedding,
                  substring(d.body, c.char_start + 1, c.char_end - c.char_start) = c.text AS span_is_text
           FROM docs d, LATERAL unnest(embed_text_chunks(d.body, max_tokens := 120, overlap := 16)) AS t(c)
           ORDER BY d.id, c.chunk_index"""
    ).fetchall()
    chunks = minilm_client.split(DOCUMENTS, max_tokens=120, overlap=16)
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows] == list(
        zip(
            chunks.row.tolist(),
            chunks.index.tolist(),
            chunks.start.tolist(),
            chunks.end.tolist(),
            chunks.tokens.tolist(),
            chunks.text,
        )
    )
    assert all(r[7] for r in rows)
    got = np.array([r[6] for r in rows], dtype=np.float32)
    assert _cosines(got, reference.encode(chunks.text, convert_to_numpy=True)).min() >= 0.9999
    lists = dict(con.sql("SELECT id, len(embed_text_chunks(body)) FROM docs").fetchall())
    assert lists[99] is None and lists[4] == 0 and lists[5] == 0 and lists[3] == 1  # NULL, '', blank, short
    flat = con.sql("SELECT unnest(embed_text_chunks(body), recursive := true) FROM docs WHERE id = 1").df()
    assert list(flat.columns) == ["chunk_index", "char_start", "char_end", "tokens", "text", "embedding"]


def test_long_texts_mean_gives_the_normalized_mean_of_the_chunks(minilm_client, reference):
    import duckdb

    import embedtext

    con = duckdb.connect()
    embedtext.register(con, minilm_client, long_texts="mean")
    got = con.sql(
        "SELECT embed_text(body) FROM (SELECT unnest(?) AS body, generate_subscripts(?, 1) AS i) ORDER BY i",
        params=[DOCUMENTS, DOCUMENTS],
    ).fetchall()
    chunks = minilm_client.split(DOCUMENTS)
    vectors = reference.encode(chunks.text, convert_to_numpy=True)
    for row in range(4):
        mean = vectors[chunks.row == row].mean(0)
        assert _cosines(np.array([got[row][0]]), mean[None] / np.linalg.norm(mean))[0] >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(got[row][0]), 1.0, atol=1e-5)  # the model normalizes
    assert got[4][0] is None and got[5][0] is None
    short = reference.encode([DOCUMENTS[3]], convert_to_numpy=True)
    assert _cosines(np.array([got[3][0]]), short)[0] >= 0.9999  # one chunk: the text's own vector
    truncated = reference.encode(DOCUMENTS[:1], convert_to_numpy=True)
    assert _cosines(np.array([got[0][0]]), truncated)[0] < 0.999  # the mean is not the cut text's vector


def test_a_split_too_large_for_the_model_is_a_clear_error(minilm_client):
    from embedtext.protocol.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="max_tokens 512 is over what model all-MiniLM-L6-v2 takes"):
        minilm_client.split(["a text"], max_tokens=512)
    with pytest.raises(InvalidInputError, match="overlap 64 must be less than the chunk size, 64 tokens"):
        minilm_client.split(["a text"], max_tokens=64, overlap=64)
