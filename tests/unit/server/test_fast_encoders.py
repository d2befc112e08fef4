"""The fast encoders give the Hugging Face tokenizer's ids, on each generated family's tokenizer:
BPE by fastokens (server/tokenization/bpe.py: byte-level for ModernBERT and Qwen3, byte fallback for
Gemma3) and Unigram by sentencepiece (server/tokenization/unigram.py: XLM-R)."""

import importlib
import inspect
import random
import shutil
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedtext.server.tokenization.bpe import BpeEncoder
from embedtext.server.tokenization.pool import TokenizerPool
from embedtext.server.tokenization.unigram import UnigramEncoder

MAX_TOKENS = 128
PATHS = {
    "modernbert": "BPE by fastokens",
    "qwen3": "BPE by fastokens",
    "gemma3": "BPE by fastokens",
    "xlm-roberta": "Unigram by sentencepiece",
    "xlm-roberta, 4k pieces": "Unigram by sentencepiece",
}


def _ids(tokenizer, texts):
    return [e.ids for e in tokenizer.encode_batch(texts)]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory, prose):
    from embedtext.server.models.families import FAMILIES, train_unigram, write_family_model

    root = tmp_path_factory.mktemp("families")
    dirs = {f: write_family_model(root / f, f, layers=1) for f in PATHS if f in FAMILIES}
    # A vocabulary of a real tokenizer's richness (pieces of several lengths for one string), where
    # the two Unigram libraries part more often than on the generated model's few hundred pieces.
    rich = dirs["xlm-roberta, 4k pieces"] = root / "xlm-roberta-4k"
    rich.mkdir()
    train_unigram(rich, MAX_TOKENS, corpus=prose, vocab_size=4000)
    return dirs


@pytest.fixture(scope="module", params=list(PATHS))
def fast(request, family_dirs, reference_tokenizer):
    path = family_dirs[request.param] / "tokenizer.json"
    pool = TokenizerPool(str(path), MAX_TOKENS)
    yield request.param, pool, reference_tokenizer(path, MAX_TOKENS), reference_tokenizer(path)
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


def test_each_family_gets_its_fast_path(fast):
    family, pool, _, _ = fast
    assert pool.path == PATHS[family]
    assert isinstance(pool.fast, UnigramEncoder if family.startswith("xlm-roberta") else BpeEncoder)


def test_prose_gives_the_tokenizers_ids(fast, prose):
    _, pool, truncating, whole = fast
    assert pool.tokenize_sync(prose).to_lists() == _ids(truncating, prose)
    short = [doc[:100] for doc in prose]
    assert pool.tokenize_sync(short, truncate=False).to_lists() == _ids(whole, short)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(max_size=300), min_size=1, max_size=8))
def test_any_unicode_gives_the_tokenizers_ids(fast, texts):
    _, pool, truncating, _ = fast
    assert pool.tokenize_sync(texts).to_lists() == _ids(truncating, texts)


def _random_texts(alphabet, rows=4000, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choices(alphabet, k=rng.randint(0, 60))) for _ in range(rows)]


# Where the two Unigram libraries part (each seen to differ without its rule in unigram.py): runs of
# a few letters (score ties), letters with combining marks and controls, compatibility characters.
_STRESS = {
    "runs": "aabbcc. ,-eo!",
    "marks": "abcd éü ಃা\u0301\u0308\u200b\x85\x17",
    "compatibility": "aabbcc. -ａｂｃ𝓬𝒂．①ﬁ",
    "every class": [chr(c) for c in range(0x20, 0x3000, 7)] + list(" abc") * 40,
}


@pytest.mark.parametrize("alphabet", list(_STRESS.values()), ids=list(_STRESS))
def test_random_strings_give_the_tokenizers_ids(fast, alphabet):
    _, pool, truncating, _ = fast
    texts = _random_texts(alphabet)
    assert pool.tokenize_sync(texts).to_lists() == _ids(truncating, texts)


def test_unigram_rows_where_the_libraries_part_go_to_the_tokenizer(family_dirs):
    pool = TokenizerPool(str(family_dirs["xlm-roberta"] / "tokenizer.json"), MAX_TOKENS)
    try:
        texts = [
            "plain words",
            "wait...",
            "haha hahaha",
            "e\u0301",
            "ｆull",
            "a <mask> b",
            "tab\tand\nnewline",
            "  spaces   run  ",
        ]
        assert pool.fast._for_reference(texts).tolist() == [1, 2, 3, 4, 5]
        assert not unicodedata.is_normalized("NFKC", texts[4])
    finally:
        pool.close()


def test_unigram_without_its_sentencepiece_model_stays_on_the_tokenizer(family_dirs, tmp_path):
    copy = shutil.copytree(family_dirs["xlm-roberta"], tmp_path / "xlm-roberta")
    (copy / "sentencepiece.bpe.model").unlink()
    pool = TokenizerPool(str(copy / "tokenizer.json"), MAX_TOKENS)
    try:
        assert pool.fast is None and pool.path == "the Hugging Face tokenizer"
    finally:
        pool.close()


@pytest.mark.parametrize("family", ["qwen3", "xlm-roberta, 4k pieces"])
def test_a_fast_encoder_that_disagrees_is_not_used(family, family_dirs, reference_tokenizer, monkeypatch):
    """The load-time check: an encoder whose ids differ from the tokenizer's on its check texts
    (a stand-in here: ids of every row shifted by one) leaves the pool on the Hugging Face tokenizer."""
    path = str(family_dirs[family] / "tokenizer.json")
    encoder = UnigramEncoder if family.startswith("xlm-roberta") else BpeEncoder
    real = encoder.encode

    def shifted(self, texts, truncate=True):
        rows = real(self, texts, truncate)
        return type(rows)(rows.ids + 1, rows.lengths)

    def load():
        reference = reference_tokenizer(path, MAX_TOKENS).encode_batch
        if encoder is BpeEncoder:
            return BpeEncoder.for_file(path, MAX_TOKENS, reference)
        return UnigramEncoder.for_file(path, MAX_TOKENS, reference_tokenizer(path), reference)

    monkeypatch.setattr(encoder, "encode", shifted)
    assert load() is None
    monkeypatch.setattr(encoder, "encode", real)
    assert isinstance(load(), encoder)
