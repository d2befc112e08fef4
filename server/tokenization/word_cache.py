"""BERT tokenization of normalized ASCII texts in Python, with each word's WordPiece ids cached.

Once a text is normalized (server/tokenization/ascii_normalizer.py), the rest of a BERT tokenizer's work is
word by word: ``BertPreTokenizer`` splits at whitespace (dropped) and around every punctuation
character (kept alone), WordPiece turns each piece into ids without looking at its neighbours,
and the template adds [CLS] ... [SEP]. So a text's ids are its whitespace-separated words' ids end
to end, a word's punctuation included ("world." is "world" then "."). Text repeats its words, so the
ids of a word seen before come from a dict, at a fraction of the tokenizer's CPU a row once the cache
is warm (bench/results/full-word-cache.json). A word not in the cache goes to the tokenizer's own
pre-tokenizer and WordPiece (a copy without normalizer and template), so the ids are the tokenizer's
(tests/unit/server/test_word_cache.py compares them). Splitting at whitespace only, not around
punctuation too, takes Python's ``str.split`` instead of a regular expression: a third of the time.

The price: this runs in Python and holds the GIL, where the tokenizer's Rust releases it and
spreads a batch over every core. It pays where cores are few and shared with the model (a CPU
engine); on a GPU machine the spare cores tokenize in parallel anyway (``word_cache=auto``).
"""

from __future__ import annotations

import json
import re
from itertools import chain

from tokenizers import Tokenizer

# BertPreTokenizer's whitespace on ASCII is Rust's char::is_whitespace: \t \n \x0b \x0c \r and
# space, not \x1c-\x1f as Python's str.split has it. Texts cleaned by the normalizer (clean_text)
# hold neither (controls dropped, \t \n \r made spaces), and str.split serves; otherwise this does.
_RUST_WHITESPACE_WORDS = re.compile(r"[^\t\n\x0b\x0c\r ]+").findall

MAX_WORDS = 1 << 17  # cache entries (~210 bytes each: ~28 MB at most); the cache starts over when full
MAX_CACHED_CHARS = 64  # longer words (ids, hashes, base64) are encoded each time, not kept


class WordCacheEncoder:
    """Token ids of texts already normalized by ``AsciiBertNormalizer``, a word at a time."""

    def __init__(
        self,
        words: Tokenizer,
        prefix: list[int],
        suffix: list[int],
        max_tokens: int,
        *,
        cleaned: bool = False,
        max_words: int = MAX_WORDS,
    ) -> None:
        """``words``: the tokenizer without normalizer and template (its pre-tokenizer and WordPiece);
        ``cleaned``: the texts come from a normalizer with clean_text (no whitespace but spaces)."""
        self._encode_words = words.encode_batch_fast if hasattr(words, "encode_batch_fast") else words.encode_batch
        self._split = str.split if cleaned else _RUST_WHITESPACE_WORDS
        self.prefix = list(prefix)
        self.suffix = list(suffix)
        # Truncation keeps the specials and cuts the words' ids, as the tokenizer's does.
        self.budget = max_tokens - len(self.prefix) - len(self.suffix)
        self.max_words = max_words
        self._cache: dict[str, tuple[int, ...]] = {}

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer, max_tokens: int, **kwargs) -> WordCacheEncoder | None:
        """The encoder for ``tokenizer``, or None where it is not BERT's pre-tokenizer and WordPiece
        (or its special tokens are not a fixed prefix and suffix)."""
        config = json.loads(tokenizer.to_str())
        if (config.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
            return None
        if (config.get("model") or {}).get("type") != "WordPiece":
            return None
        words = cls._copy(tokenizer)  # pre-tokenizer and WordPiece: a word's ids, punctuation split off
        word = words.encode("a", add_special_tokens=False).ids
        framed = words.encode("a").ids  # the template's specials around them
        at = next((i for i in range(len(framed) - len(word) + 1) if framed[i : i + len(word)] == word), None)
        if not word or at is None:
            return None
        cleaned = bool((config.get("normalizer") or {}).get("clean_text", False))
        encoder = cls(words, framed[:at], framed[at + len(word) :], max_tokens, cleaned=cleaned, **kwargs)
        if encoder.budget < 1:
            return None
        probes = ["a, b", "", "a.b  c-d"]
        if encoder.encode(probes, truncate=False) != [e.ids for e in words.encode_batch(probes)]:
            return None
        encoder._cache.clear()  # the probes' words
        return encoder

    @staticmethod
    def _copy(tokenizer: Tokenizer) -> Tokenizer:
        copy = Tokenizer.from_str(tokenizer.to_str())
        copy.no_padding()
        copy.no_truncation()
        copy.normalizer = None
        return copy

    @property
    def cached_words(self) -> int:
        return len(self._cache)

    def encode(self, texts: list[str], truncate: bool = True) -> list[list[int]]:
        """Ids of each normalized text, specials included; ``truncate`` cuts at the model's max."""
        budget = self.budget if truncate else None
        split, known = self._split, self._cache.__getitem__
        out: list = [None] * len(texts)
        missed: list[tuple[int, list[str]]] = []
        for row, text in enumerate(texts):
            words = split(text)
            if budget is not None and len(words) > budget:
                del words[budget:]  # every word is at least one id: the rest would be cut anyway
            try:
                ids = list(chain.from_iterable(map(known, words)))
            except KeyError:
                missed.append((row, words))
                continue
            out[row] = self._frame(ids, budget)
        if missed:
            self._encode_missed(missed, out, budget)
        return out

    def _frame(self, ids: list[int], budget: int | None) -> list[int]:
        if budget is not None and len(ids) > budget:
            del ids[budget:]
        return self.prefix + ids + self.suffix

    def _encode_missed(self, missed: list[tuple[int, list[str]]], out: list, budget: int | None) -> None:
        # A local table, so another thread starting the cache over cannot lose a word under us.
        table: dict[str, tuple[int, ...]] = {}
        new: list[str] = []
        for _, words in missed:
            for word in words:
                if word not in table:
                    ids = self._cache.get(word)
                    if ids is None:
                        new.append(word)
                        ids = ()
                    table[word] = ids
        if new:
            if len(self._cache) + len(new) > self.max_words:
                self._cache.clear()
            for word, encoding in zip(new, self._encode_words(new, add_special_tokens=False)):
                ids = tuple(encoding.ids)
                table[word] = ids
                if len(word) <= MAX_CACHED_CHARS and len(self._cache) < self.max_words:
                    self._cache[word] = ids
        lookup = table.__getitem__
        for row, words in missed:
            out[row] = self._frame(list(chain.from_iterable(map(lookup, words))), budget)
