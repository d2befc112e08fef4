"""ASCII texts normalized ahead of the tokenizer give exactly the tokenizer's own ids.

Every comparison is against the plain Hugging Face tokenizer (the reference), on the real
all-MiniLM-L6-v2 tokenizer and the generated tiny model's.
"""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from embedtext.protocol.errors import InvalidInputError
from embedtext.server.models.source import load_model_spec
from embedtext.server.tokenization.ascii_normalizer import AsciiBertNormalizer
from embedtext.server.tokenization.pool import TokenizerPool


@pytest.fixture(scope="module", params=["minilm", "tiny"])
def model(request, tiny_model_dir, reference_tokenizer):
    spec = load_model_spec("default") if request.param == "minilm" else load_model_spec(str(tiny_model_dir))
    pool = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens)
    yield spec, pool, reference_tokenizer(spec.tokenizer_file, spec.max_tokens)
    pool.close()


@pytest.mark.parametrize("clean_text", [True, False])
@pytest.mark.parametrize("lowercase", [True, False])
def test_every_ascii_character_normalizes_as_bert_normalizer_does(clean_text, lowercase):
    reference = normalizers.BertNormalizer(
        clean_text=clean_text, lowercase=lowercase, strip_accents=None, handle_chinese_chars=True
    )
    ours = AsciiBertNormalizer(clean_text=clean_text, lowercase=lowercase, added_tokens=[])
    for code in range(128):
        text = f"aB{chr(code)}Cd"
        assert ours.normalize(text) == reference.normalize_str(text), f"character {code}"


def test_the_pool_uses_it_for_bert_tokenizers_only(model, tmp_path):
    spec, pool, _ = model
    assert pool.ascii_normalizer is not None
    other = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    other.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    other.save(str(tmp_path / "tokenizer.json"))
    plain = TokenizerPool(str(tmp_path / "tokenizer.json"), 16)
    try:
        assert plain.ascii_normalizer is None
        assert plain.tokenize_sync(["HELLO there"]) == [[1, 0]]
    finally:
        plain.close()


def test_texts_that_may_hold_an_added_token_go_the_full_way(model):
    _, pool, reference = model
    texts = ["[CLS] a cat [SEP]", "a [mask] b", "[MA\x01SK]", "x [Pad]", "[ not a token ]"]
    if reference.get_added_tokens_decoder():  # all-MiniLM's has them; the generated model's has none
        assert [pool.ascii_normalizer.normalize(t) for t in texts] == [None] * 4 + ["[ not a token ]"]
    assert pool.tokenize_sync(texts) == [e.ids for e in reference.encode_batch(texts)]


def test_mixed_batches_keep_their_order(model):
    _, pool, reference = model
    texts = ["A Cat", "café au lait", "[CLS]", "plain\tASCII\r\nline", "東京", "", "x" * 3000, "Tab\x0bbed"]
    assert pool.tokenize_sync(texts) == [e.ids for e in reference.encode_batch(texts)]


_ALPHABET = string.printable + "\x00\x01\x07\x0b\x0c\x1b\x1f\x7f" + "éÜß東🚀\u0301\u00a0\u2028\ufffd"
_PIECES = st.one_of(st.text(_ALPHABET, max_size=30), st.sampled_from(["[CLS]", "[sep]", "[MASK]", " ", "\t", "A.B,C!"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=12))
def test_random_texts_give_the_tokenizers_own_ids(model, texts):
    _, pool, reference = model
    assert pool.tokenize_sync(texts) == [e.ids for e in reference.encode_batch(texts)]


def test_truncation_off_still_counts_the_whole_text(model, reference_tokenizer):
    spec, pool, reference = model
    long = "Word " * (spec.max_tokens + 10)
    with pytest.raises(InvalidInputError, match=f"row 1 has {spec.max_tokens + 12} tokens"):
        pool.tokenize_sync(["fine", long], truncate=False)
    whole = reference_tokenizer(spec.tokenizer_file)
    assert pool.tokenize_sync(["A short one", "another ONE"], truncate=False) == [
        e.ids for e in whole.encode_batch(["A short one", "another ONE"])
    ]
