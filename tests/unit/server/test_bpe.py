"""BPE tokenizers by fastokens (server/tokenization/bpe.py) give the Hugging Face tokenizer's ids, on
each generated family's tokenizer of that kind: byte-level BPE (ModernBERT, Qwen3) and byte-fallback
BPE (Gemma3). XLM-R's Unigram stays on the Hugging Face tokenizer."""

import importlib
import inspect
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedtext.server.tokenization.bpe import BpeEncoder
from embedtext.server.tokenization.pool import TokenizerPool

MAX_TOKENS = 128


def _ids(tokenizer, texts):
    return [e.ids for e in tokenizer.encode_batch(texts)]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    from embedtext.server.models.families import write_family_model

    root = tmp_path_factory.mktemp("families")
    return {f: write_family_model(root / f, f, layers=1) for f in ("xlm-roberta", "modernbert", "qwen3", "gemma3")}


@pytest.fixture(scope="module", params=["modernbert", "qwen3", "gemma3"])
def bpe(request, family_dirs, reference_tokenizer):
    path = family_dirs[request.param] / "tokenizer.json"
    pool = TokenizerPool(str(path), MAX_TOKENS)
    yield pool, reference_tokenizer(path, MAX_TOKENS), reference_tokenizer(path)
    pool.close()


@pytest.fixture(scope="module")
def prose():
    """Real English with code, numbers and punctuation (docstrings of the standard library), and
    the same shuffled into other lengths."""
    docs = []
    for name in ("os", "re", "json", "argparse", "decimal", "pathlib"):
        members = inspect.getmembers(importlib.import_module(name))
        docs += [inspect.getdoc(obj) for _, obj in members if inspect.getdoc(obj)]
    words = " ".join(docs).split(" ")
    rng = random.Random(0)
    return docs + [" ".join(rng.choices(words, k=rng.randint(1, 400))) for _ in range(300)]


def test_the_pool_takes_fastokens_for_bpe_and_not_for_unigram(bpe, family_dirs):
    pool, _, _ = bpe
    assert isinstance(pool.fast, BpeEncoder) and pool.path == "BPE by fastokens"
    unigram = TokenizerPool(str(family_dirs["xlm-roberta"] / "tokenizer.json"), MAX_TOKENS)
    try:
        assert unigram.fast is None and unigram.path == "the Hugging Face tokenizer"
    finally:
        unigram.close()


def test_prose_gives_the_tokenizers_ids(bpe, prose):
    pool, truncating, whole = bpe
    assert pool.tokenize_sync(prose).to_lists() == _ids(truncating, prose)
    short = [doc[:100] for doc in prose]
    assert pool.tokenize_sync(short, truncate=False).to_lists() == _ids(whole, short)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(max_size=300), min_size=1, max_size=8))
def test_any_unicode_gives_the_tokenizers_ids(bpe, texts):
    pool, truncating, _ = bpe
    assert pool.tokenize_sync(texts).to_lists() == _ids(truncating, texts)


def test_a_fastokens_that_disagrees_is_not_used(family_dirs, reference_tokenizer, monkeypatch):
    """The load-time check: an encoder whose ids differ from the tokenizer's on its check texts
    (a stand-in here: ids of every row shifted by one) leaves the pool on the Hugging Face tokenizer."""
    path = str(family_dirs["qwen3"] / "tokenizer.json")
    real = BpeEncoder.encode

    def shifted(self, texts, truncate=True):
        rows = real(self, texts, truncate)
        return type(rows)(rows.ids + 1, rows.lengths)

    monkeypatch.setattr(BpeEncoder, "encode", shifted)
    reference = reference_tokenizer(path, MAX_TOKENS)
    assert BpeEncoder.for_file(path, MAX_TOKENS, reference.encode_batch) is None
    monkeypatch.setattr(BpeEncoder, "encode", real)
    assert BpeEncoder.for_file(path, MAX_TOKENS, reference.encode_batch) is not None
