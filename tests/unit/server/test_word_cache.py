"""Words' ids from the cache give exactly the tokenizer's own ids.

Every comparison is against the plain Hugging Face tokenizer (the reference, with its own
normalizer), on the real all-MiniLM-L6-v2 tokenizer and the generated tiny model's.
"""

import importlib
import inspect
import json
import random
import string
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from embedtext.protocol.errors import InvalidInputError
from embedtext.server.config.settings import ServerConfig
from embedtext.server.models.source import load_model_spec
from embedtext.server.tokenization import word_cache
from embedtext.server.tokenization.pool import TokenizerPool
from embedtext.server.tokenization.word_cache import WordCacheEncoder


def _ids(tokenizer, texts):
    return [e.ids for e in tokenizer.encode_batch(texts)]


@pytest.fixture(scope="module", params=["minilm", "tiny"])
def model(request, tiny_model_dir, reference_tokenizer):
    spec = load_model_spec("default") if request.param == "minilm" else load_model_spec(str(tiny_model_dir))
    pool = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens, word_cache=True)
    yield spec, pool, reference_tokenizer(spec.tokenizer_file, spec.max_tokens)
    pool.close()


@pytest.fixture(scope="module")
def english():
    """Real English with code, numbers and punctuation: docstrings of the standard library."""
    docs = []
    for name in ("os", "re", "json", "argparse", "decimal", "email.message", "pathlib", "textwrap"):
        for _, obj in inspect.getmembers(importlib.import_module(name)):
            doc = inspect.getdoc(obj)
            if doc:
                docs.append(doc)
    return docs


def test_the_pool_uses_it_for_bert_wordpiece_tokenizers(model):
    _, pool, _ = model
    assert pool.word_cache is not None
    assert pool.word_cache.prefix and pool.word_cache.suffix  # [CLS] ... [SEP]


def test_english_text_gives_the_tokenizers_ids(model, english, reference_tokenizer):
    spec, pool, reference = model
    assert pool.tokenize_sync(english) == _ids(reference, english)  # cold: every word new
    assert pool.word_cache.cached_words > 1000
    assert pool.tokenize_sync(english) == _ids(reference, english)  # warm: words from the cache
    short = [doc[:80] for doc in english]  # within the max tokens of both models
    assert pool.tokenize_sync(short, truncate=False) == _ids(reference_tokenizer(spec.tokenizer_file), short)


def test_truncation_off_still_counts_every_word(model):
    spec, pool, _ = model
    long = "Word, " * spec.max_tokens  # two ids a word: the count is past the limit well before the end
    with pytest.raises(InvalidInputError, match=f"row 1 has {2 * spec.max_tokens + 2} tokens"):
        pool.tokenize_sync(["fine", long], truncate=False)


def test_truncation_keeps_the_first_ids_and_the_specials(model):
    spec, pool, reference = model
    texts = ["unbelievably " * spec.max_tokens, "a-b " * spec.max_tokens, "x" * 5000, "y " * (spec.max_tokens - 3)]
    assert pool.tokenize_sync(texts) == _ids(reference, texts)


@pytest.mark.parametrize("clean_text", [True, False])
@pytest.mark.parametrize("lowercase", [True, False])
def test_every_ascii_character_splits_as_bert_pre_tokenizer_does(
    model, tmp_path, clean_text, lowercase, reference_tokenizer
):
    spec, _, _ = model
    config = json.loads(spec.tokenizer_file.read_text())
    config["normalizer"].update(clean_text=clean_text, lowercase=lowercase)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    pool = TokenizerPool(str(path), spec.max_tokens, word_cache=True)
    try:
        assert pool.word_cache is not None
        texts = [f"aB{chr(c)}Cd e{chr(c)}{chr(c)}f {chr(c)}" for c in range(128)]
        assert pool.tokenize_sync(texts) == _ids(reference_tokenizer(path, spec.max_tokens), texts)
    finally:
        pool.close()


def test_words_past_wordpiece_limit_and_long_words(model):
    _, pool, reference = model
    texts = ["a" * 99 + " x", "b" * 100 + " x", "c" * 101 + " x", "d" * (word_cache.MAX_CACHED_CHARS + 1), "e" * 3000]
    before = pool.word_cache.cached_words
    assert pool.tokenize_sync(texts) == _ids(reference, texts)
    assert pool.word_cache.cached_words <= before + 4  # the words longer than MAX_CACHED_CHARS are not kept


def test_a_word_is_cached_with_its_punctuation(model, reference_tokenizer):
    spec, _, reference = model
    encoder = WordCacheEncoder.for_tokenizer(reference_tokenizer(spec.tokenizer_file), spec.max_tokens)
    texts = ["hello, world.", "world. hello,"]
    assert encoder.encode(texts) == _ids(reference, texts)
    assert encoder.cached_words == 2  # "hello," and "world.": split at whitespace only, one lookup each


def test_empty_blank_and_punctuation_only_texts(model):
    _, pool, reference = model
    texts = ["", " ", "\t\n", "...", "!?", "(a)", " - ", "\x00"]
    assert pool.tokenize_sync(texts) == _ids(reference, texts)


def test_the_cache_stays_within_its_bound(model, english, reference_tokenizer):
    spec, _, reference = model
    encoder = WordCacheEncoder.for_tokenizer(reference_tokenizer(spec.tokenizer_file), spec.max_tokens, max_words=50)
    pool = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens, word_cache=True)
    try:
        normalized = [pool.ascii_normalizer.normalize(doc) for doc in english]
        texts = [doc for doc, n in zip(english, normalized) if n is not None]
        for start in range(0, len(texts), 40):
            got = encoder.encode([pool.ascii_normalizer.normalize(t) for t in texts[start : start + 40]])
            assert got == _ids(reference, texts[start : start + 40])
            assert encoder.cached_words <= 50
    finally:
        pool.close()


def test_threads_sharing_a_cache_that_keeps_starting_over(model, reference_tokenizer):
    spec, pool, reference = model
    encoder = WordCacheEncoder.for_tokenizer(reference_tokenizer(spec.tokenizer_file), spec.max_tokens, max_words=16)
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 12))) for _ in range(300)]
    batches = [[" ".join(rng.choices(words, k=20)) + "." for _ in range(30)] for _ in range(16)]
    expected = [_ids(reference, batch) for batch in batches]
    failures = []

    def work(i):
        for _ in range(5):
            if encoder.encode(batches[i]) != expected[i]:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


_ALPHABET = string.printable + "\x00\x01\x07\x0b\x0c\x1b\x1c\x1f\x7f" + "éÜ東\u00a0"
_PIECES = st.one_of(
    st.text(_ALPHABET, max_size=30),
    st.sampled_from(["[CLS]", "[sep]", " ", "\t", "A.B,C!", "don't", "e-mail", "x" * 120]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=12))
def test_random_texts_give_the_tokenizers_own_ids(model, texts):
    _, pool, reference = model
    assert pool.tokenize_sync(texts) == _ids(reference, texts)


def test_not_used_without_bert_pre_tokenizer_wordpiece_or_the_normalizer(model, tmp_path):
    spec, _, _ = model
    lowercase_only = Tokenizer.from_file(str(spec.tokenizer_file))
    lowercase_only.normalizer = normalizers.Lowercase()
    lowercase_only.save(str(tmp_path / "lowercase.json"))
    off = TokenizerPool(str(tmp_path / "lowercase.json"), spec.max_tokens, word_cache=True)
    assert off.ascii_normalizer is None and off.word_cache is None  # it needs the texts normalized ahead
    off.close()
    whitespace = Tokenizer.from_file(str(spec.tokenizer_file))
    whitespace.pre_tokenizer = pre_tokenizers.Whitespace()
    assert WordCacheEncoder.for_tokenizer(whitespace, spec.max_tokens) is None
    other = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    other.normalizer = normalizers.BertNormalizer()
    other.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    other.save(str(tmp_path / "tokenizer.json"))
    plain = TokenizerPool(str(tmp_path / "tokenizer.json"), 16, word_cache=True)
    try:
        assert plain.word_cache is None
        assert plain.tokenize_sync(["HELLO there"]) == [[1, 0]]
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("setting", "device", "wanted"),
    [
        ("auto", "cpu", True),  # the model shares the cores: every tokenizer CPU-us saved is its
        ("auto", "auto", True),  # the null engine (no device)
        ("auto", "cuda", False),  # the tokenizer's Rust spreads over the spare cores without the GIL
        ("on", "cuda", True),
        ("off", "cpu", False),
    ],
)
def test_word_cache_auto_means_engines_off_the_gpu(setting, device, wanted):
    from embedtext.server.config.resolve import resolve

    assert resolve(ServerConfig(word_cache=setting, engine="null"), device).word_cache is wanted


def test_word_cache_takes_auto_on_or_off():
    with pytest.raises(ValueError, match="auto, on or off"):
        ServerConfig(word_cache="yes")
