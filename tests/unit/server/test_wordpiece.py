"""WordPiece tokenizers are tokenized by nanotoken, with exactly the tokenizer's own ids.

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
from embedtext.server.models.source import load_model_spec
from embedtext.server.tokenization.pool import TokenizerPool
from embedtext.server.tokenization.wordpiece import WordPieceEncoder


def _ids(tokenizer, texts):
    return [e.ids for e in tokenizer.encode_batch(texts)]


@pytest.fixture(scope="module", params=["minilm", "tiny"])
def model(request, tiny_model_dir, reference_tokenizer):
    spec = load_model_spec("default") if request.param == "minilm" else load_model_spec(str(tiny_model_dir))
    pool = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens)
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
    assert isinstance(pool.fast, WordPieceEncoder)
    assert pool.path == "WordPiece by nanotoken"


def test_english_text_gives_the_tokenizers_ids(model, english, reference_tokenizer):
    spec, pool, reference = model
    assert pool.tokenize_sync(english).to_lists() == _ids(reference, english)  # cold caches
    assert pool.tokenize_sync(english).to_lists() == _ids(reference, english)  # warm
    short = [doc[:80] for doc in english]  # within the max tokens of both models
    assert pool.tokenize_sync(short, truncate=False).to_lists() == _ids(reference_tokenizer(spec.tokenizer_file), short)


def test_truncation_off_still_counts_every_token(model):
    spec, pool, _ = model
    long = "Word, " * spec.max_tokens  # two ids a word: the count is past the limit well before the end
    with pytest.raises(InvalidInputError, match=f"row 1 has {2 * spec.max_tokens + 2} tokens"):
        pool.tokenize_sync(["fine", long], truncate=False)


def test_truncation_keeps_the_first_ids_and_the_specials(model):
    spec, pool, reference = model
    texts = ["unbelievably " * spec.max_tokens, "a-b " * spec.max_tokens, "x" * 5000, "y " * (spec.max_tokens - 3)]
    assert pool.tokenize_sync(texts).to_lists() == _ids(reference, texts)


@pytest.mark.parametrize("clean_text", [True, False])
@pytest.mark.parametrize("lowercase", [True, False])
def test_every_character_of_the_first_planes_as_the_tokenizer(
    model, tmp_path, clean_text, lowercase, reference_tokenizer
):
    """ASCII, Latin, combining marks, Greek, CJK punctuation, controls and odd whitespace, in words and alone."""
    spec, _, _ = model
    config = json.loads(spec.tokenizer_file.read_text())
    config["normalizer"].update(clean_text=clean_text, lowercase=lowercase)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    pool = TokenizerPool(str(path), spec.max_tokens)
    try:
        assert isinstance(pool.fast, WordPieceEncoder)
        texts = [f"aB{chr(c)}Cd e{chr(c)}{chr(c)}f {chr(c)}" for c in range(0x3100) if not 0xD800 <= c < 0xE000]
        assert pool.tokenize_sync(texts).to_lists() == _ids(reference_tokenizer(path, spec.max_tokens), texts)
    finally:
        pool.close()


def test_words_past_wordpiece_limit_long_texts_and_special_tokens(model):
    _, pool, reference = model
    texts = ["a" * 99 + " x", "b" * 100 + " x", "c" * 101 + " x", "e" * 3000, "word " * 100_000]
    texts += ["[CLS] x [SEP]", "a[SEP]b", "[sep] [Mask] [MASK]", "Ünïcödé façade — naïve café 東京 🚀", "e\u0301"]
    assert pool.tokenize_sync(texts).to_lists() == _ids(reference, texts)


def test_empty_blank_and_punctuation_only_texts(model):
    _, pool, reference = model
    texts = ["", " ", "\t\n", "...", "!?", "(a)", " - ", "\x00", "\u200b", "\u3000"]
    assert pool.tokenize_sync(texts).to_lists() == _ids(reference, texts)


def test_threads_tokenizing_at_once(model):
    """The server's tokenizer threads and its event loop encode at the same time."""
    _, pool, reference = model
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 12))) for _ in range(3000)]
    batches = [[" ".join(rng.choices(words, k=20)) + "." for _ in range(30)] for _ in range(16)]
    expected = [_ids(reference, batch) for batch in batches]
    failures = []

    def work(i):
        for _ in range(5):
            if pool.tokenize_sync(batches[i]).to_lists() != expected[i]:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


_ALPHABET = string.printable + "\x00\x01\x07\x0b\x0c\x1b\x1c\x1f\x7f" + "éÜ東\u00a0\u0301\u2028İıσς😀"
_PIECES = st.one_of(
    st.text(_ALPHABET, max_size=30),
    st.text(max_size=10),  # any code point
    st.sampled_from(["[CLS]", "[sep]", "[SEP]", " ", "\t", "A.B,C!", "don't", "e-mail", "x" * 120]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=12))
def test_random_texts_give_the_tokenizers_own_ids(model, texts):
    _, pool, reference = model
    assert pool.tokenize_sync(texts).to_lists() == _ids(reference, texts)


def test_other_tokenizers_keep_the_hugging_face_tokenizer(model, tmp_path, reference_tokenizer):
    """A tokenizer nanotoken does not reproduce (here: WordLevel, and a normalizer it lacks) is
    refused at load, and the pool encodes with the tokenizer itself."""
    spec, _, _ = model
    word_level = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    word_level.normalizer = normalizers.BertNormalizer()
    word_level.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    word_level.save(str(tmp_path / "word_level.json"))
    replaced = Tokenizer.from_file(str(spec.tokenizer_file))
    replaced.normalizer = normalizers.Sequence([normalizers.Replace("a", "b"), normalizers.Lowercase()])
    replaced.save(str(tmp_path / "replaced.json"))
    for name, texts in (("word_level.json", ["HELLO there"]), ("replaced.json", ["A cat sat", "banana"])):
        pool = TokenizerPool(str(tmp_path / name), 16)
        try:
            assert pool.fast is None and pool.path == "the Hugging Face tokenizer"
            assert pool.tokenize_sync(texts).to_lists() == _ids(reference_tokenizer(tmp_path / name, 16), texts)
        finally:
            pool.close()
