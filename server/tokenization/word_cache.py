"""BERT pre-tokenization of normalized ASCII texts in Python, with each word's WordPiece ids cached.

Once a text is normalized (server/tokenization/ascii_normalizer.py), the rest of a BERT tokenizer's work is
word by word: ``BertPreTokenizer`` splits at whitespace (dropped) and around every punctuation
character (kept alone), WordPiece turns each word into ids without looking at its neighbours,
and the template adds [CLS] ... [SEP]. Text repeats its words, so the ids of a word seen before
come from a dict, at a fraction of the tokenizer's CPU a row once the cache is warm
(bench/results/full-word-cache.json). A word not in the cache goes to
the tokenizer's own WordPiece (a copy without normalizer and pre-tokenizer), so the ids are the
tokenizer's (tests/unit/server/test_word_cache.py compares them).

The price: this runs in Python and holds the GIL, where the tokenizer's Rust releases it and
spreads a batch over every core. It pays where cores are few and shared with the model (a CPU
engine); on a GPU machine the spare cores tokenize in parallel anyway (``word_cache=auto``).
"""

from __future__ import annotations

import json
import re
from itertools import chain

from tokenizers import Tokenizer

# BertPreTokenizer on ASCII: whitespace is what Rust's char::is_whitespace says (\t \n \x0b \x0c
# \r and space, not \x1c-\x1f as Python's str.split would have it); punctuation is
# char::is_ascii_punctuation (every printable ASCII character that is not a letter or digit).
_PUNCTUATION = r"!-/:-@\[-`{-~"
_WORDS = re.compile(rf"[^\t\n\x0b\x0c\r {_PUNCTUATION}]+|[{_PUNCTUATION}]")

MAX_WORDS = 1 << 17  # cache entries (~210 bytes each: ~28 MB at most); the cache starts over when full
MAX_CACHED_CHARS = 64  # longer words (ids, hashes, base64) are encoded each time, not kept


class WordCacheEncoder:
    """Token ids of texts already normalized by ``AsciiBertNormalizer``, a word at a time."""

    def __init__(
        self, wordpiece: Tokenizer, prefix: list[int], suffix: list[int], max_tokens: int, *, max_words: int = MAX_WORDS
    ) -> None:
        self._wordpiece = (
            wordpiece.encode_batch_fast if hasattr(wordpiece, "encode_batch_fast") else wordpiece.encode_batch
        )
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
        wordpiece = cls._copy(tokenizer)
        wordpiece.pre_tokenizer = None
        whole = cls._copy(tokenizer)  # pre-tokenizer and template kept: the probes' reference
        word = wordpiece.encode("a", add_special_tokens=False).ids
        framed = whole.encode("a").ids
        at = next((i for i in range(len(framed) - len(word) + 1) if framed[i : i + len(word)] == word), None)
        if not word or at is None:
            return None
        encoder = cls(wordpiece, framed[:at], framed[at + len(word) :], max_tokens, **kwargs)
        if encoder.budget < 1:
            return None
        probes = ["a, b", "", "a.b  c-d"]
        if encoder.encode(probes, truncate=False) != [e.ids for e in whole.encode_batch(probes)]:
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
        split, known = _WORDS.findall, self._cache.__getitem__
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
            for word, encoding in zip(new, self._wordpiece(new, add_special_tokens=False)):
                ids = tuple(encoding.ids)
                table[word] = ids
                if len(word) <= MAX_CACHED_CHARS and len(self._cache) < self.max_words:
                    self._cache[word] = ids
        lookup = table.__getitem__
        for row, words in missed:
            out[row] = self._frame(list(chain.from_iterable(map(lookup, words))), budget)
