"""Each model family the server runs, against sentence-transformers on the same weights: a generated
model per family (server/models/families.py: XLM-R with a Unigram tokenizer, ModernBERT and a Qwen3
decoder with byte-level BPE, Gemma3 bidirectional with two Dense layers and a byte-fallback BPE), all
four served by one real server on packed steps (the default engine loop), in float32.

BERT with WordPiece is the default model's family (test_minilm_reference.py). The four models share
one server with one engine each: the start-up of an engine per family is what this module costs.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedtext.server.models.families import FAMILIES

FAMILY_MODELS = [f for f in FAMILIES if f != "bert"]
TEXTS = [
    "A cat sleeps on the warm windowsill.",
    "The kitten is napping in the sun.",
    "Stock markets fell sharply after the interest rate decision.",
    "Ünïcödé text, emoji 🐱🚀 and 日本語 mixed together: naïve café straße.",
    "x",
    "",  # the special tokens alone
    "  spaces   between   words  ",
    "Don't e-mail J.R.R. Tolkien's (1892-1973) publisher at info@example.com; it's late!",
    "the bread recipe needs flour water salt " * 40,  # over the models' 128 tokens: truncated on both sides
]
# A decoder's step stages each row from a block boundary of its KV cache: this many rows take more
# blocks than one forward holds, so a step of them runs as several (server/engine/attention_kinds.py).
MANY_ROWS = 700


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    from embedtext.server.models.families import write_family_model

    root = tmp_path_factory.mktemp("families")
    return {f: write_family_model(root / f, f, layers=3) for f in FAMILY_MODELS}


@pytest.fixture(scope="module")
def family_client(family_dirs, tmp_path_factory):
    import embedtext
    from embedtext.connectors.local_server import LocalServer

    server = LocalServer(
        [f"{f}={d}" for f, d in family_dirs.items()],
        replicas=1,  # an engine per family; eager, as the tiny model's (conftest.py)
        args=["--dtype", "float32", "--set", "interactive_replica=off", "--set", "enforce_eager=on"],
        log_path=tmp_path_factory.mktemp("logs") / "families.log",
    )
    with server, embedtext.Client(server.target) as client:
        client.wait_ready(900, every_engine=True)
        yield client


@pytest.fixture(scope="module")
def references(family_dirs):
    from sentence_transformers import SentenceTransformer

    return {f: SentenceTransformer(str(d), device="cpu") for f, d in family_dirs.items()}


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_vectors_from_text_equal_sentence_transformers(family_client, references, family):
    reference = references[family].encode(TEXTS, convert_to_numpy=True)
    got = family_client.embed(TEXTS, model=family)
    assert got.shape == reference.shape
    assert _cosines(got, reference).min() >= 0.99999, _cosines(got, reference)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_vectors_from_token_ids_equal_sentence_transformers(family_client, references, family):
    """The ids sentence-transformers' own tokenizer gives (truncated to the model's max) embed to its vectors."""
    model = references[family]
    ids = [model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"] for t in TEXTS]
    got = family_client.embed_tokens(ids, model=family)
    reference = model.encode(TEXTS, convert_to_numpy=True)
    assert _cosines(got, reference).min() >= 0.99999


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_each_family_runs_packed_steps(family_client, family):
    info = family_client.info(refresh=True).model(family)
    assert info.engine_loop == "packed"
    assert info.dim == 128 and info.max_tokens == 128


def test_the_pooling_each_family_declares(family_client):
    pooling = {f: family_client.info().model(f).pooling for f in FAMILY_MODELS}
    assert pooling == {"xlm-roberta": "cls", "modernbert": "cls", "qwen3": "last", "gemma3": "mean"}


def test_a_decoder_step_larger_than_its_cache_keeps_every_row(family_client, references):
    """Rows in their order and each its own vector, where one step's rows run as several forwards."""
    rng = np.random.default_rng(0)
    words = "cat dog bread market river song table query data vector".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 6)))) + f" {i}" for i in range(MANY_ROWS)]
    got = family_client.embed(texts, model="qwen3")
    reference = references["qwen3"].encode(texts, convert_to_numpy=True, batch_size=128)
    assert _cosines(got, reference).min() >= 0.99999
