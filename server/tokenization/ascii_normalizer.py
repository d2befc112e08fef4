"""BERT text normalization of pure-ASCII texts, done ahead of the tokenizer.

Hugging Face's ``BertNormalizer`` (the normalizer of BERT-family embedding models: all-MiniLM,
arctic-embed, bge, e5) tracks an alignment for every character and decomposes to NFD for accent
stripping: a large share of the tokenizer's CPU per row (bench/results/full-ascii-normalizer.json).
On ASCII text it reduces to two byte operations: drop control characters except tab, newline and
carriage return, which become spaces (``clean_text``), and lowercase (``lowercase``); accent
stripping and CJK spacing change nothing there. Texts normalized here go to a copy of the tokenizer
without its normalizer; the ids are the same (tests/unit/server/test_normalization.py compares them
with the plain tokenizer's).

A text is left to the full tokenizer when it is not pure ASCII, or when it may hold an added
token (``[CLS]``, ``[MASK]``, ...): the tokenizer matches those before normalizing, so
normalizing first could change what it finds.
"""

from __future__ import annotations

import json
import re

from tokenizers import Tokenizer

# clean_text on ASCII: controls other than \t \n \r are dropped; \t \n \r become spaces.
_DROPPED = bytes([c for c in range(32) if c not in (9, 10, 13)] + [127])
_TO_SPACE = bytes.maketrans(b"\t\n\r", b"   ")


class AsciiBertNormalizer:
    """Normalizes ASCII texts as the tokenizer's ``BertNormalizer`` would, or says it cannot."""

    def __init__(self, *, clean_text: bool, lowercase: bool, added_tokens: list[str]) -> None:
        self.clean_text = clean_text
        self.lowercase = lowercase
        added = [t for t in added_tokens if t]
        # Cheap first test: a text holding none of these characters can hold no added token.
        self._added_first_chars = frozenset(c for t in added for c in (t[0].lower(), t[0].upper()))
        self._added = re.compile("|".join(re.escape(t) for t in added), re.IGNORECASE) if added else None

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer) -> AsciiBertNormalizer | None:
        """The fast path for ``tokenizer``, or None where its normalizer is not a ``BertNormalizer``."""
        normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            return None
        added = [token.content for token in tokenizer.get_added_tokens_decoder().values()]
        return cls(
            clean_text=bool(normalizer.get("clean_text", True)),
            lowercase=bool(normalizer.get("lowercase", True)),
            added_tokens=added,
        )

    def normalize(self, text: str) -> str | None:
        """``text`` normalized, or None: not ASCII, or it may hold an added token.

        >>> n = AsciiBertNormalizer(clean_text=True, lowercase=True, added_tokens=["[CLS]"])
        >>> n.normalize("Hello,\\tWorld\\x00!")
        'hello, world!'
        >>> n.normalize("café") is None, n.normalize("a [cls] b") is None
        (True, True)
        """
        if not text.isascii():
            return None
        raw = text.encode("ascii")
        if self.clean_text:
            raw = raw.translate(_TO_SPACE, _DROPPED)
        if self.lowercase:
            raw = raw.lower()
        normalized = raw.decode("ascii")
        if self._added is not None and any(c in text for c in self._added_first_chars):
            # Matched on the text as given and as normalized, in any case: whatever the
            # tokenizer could find goes the full way.
            if self._added.search(text) or self._added.search(normalized):
                return None
        return normalized
