"""BPE tokenizers by fastokens: byte-level BPE (Qwen, ModernBERT, RoBERTa) and SentencePiece's BPE
with byte fallback (Gemma), at the Hugging Face tokenizer's ids and a small part of its CPU a row,
with the GIL released.

fastokens reads the model's tokenizer.json itself (normalizer, pre-tokenizer, BPE, template and
truncation) and gives a batch's ids as one flat buffer, which becomes ``TokenRows`` without a Python
int per token. It refuses a tokenizer.json it cannot run (XLM-R's Unigram: a ValueError), and as it
loads, its ids are compared with the Hugging Face tokenizer's on ``CHECK_TEXTS``; either way the
pool keeps the Hugging Face tokenizer for that model. tests/unit/server/test_tokenization.py
compares the two on each generated family's tokenizer; docs/tuning.md has the measurement.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np

from embedtext.server.rows import TokenRows

log = logging.getLogger(__name__)

# Texts the load-time check tokenizes both ways: prose, case and digits, punctuation, accents, CJK,
# emoji, runs of spaces, tabs and newlines, a special token's text, nothing, one character, and a
# row longer than any model's max tokens (truncation, specials kept).
CHECK_TEXTS = [
    "A cat sleeps on the warm windowsill.",
    "Don't e-mail J.R.R. Tolkien's (1892-1973) publisher at info@example.com; it's \"late\"!",
    "Ünïcödé façade naïve straße Ελληνικά русский 東京 日本語 中文 한국어 🙂🚀👩‍💻",
    "  leading, \t tabs,\n\nnewlines   and   runs of spaces  ",
    "<s> </s> [CLS] <|endoftext|> <bos> written as text",
    "",
    "x",
    "3.14159 2026-12-01 0x1F ####",
    "word " * 3000,
]


class BpeEncoder:
    """Token ids of raw texts, specials included, for a tokenizer.json fastokens runs exactly."""

    def __init__(self, tokenizer_file: str, max_tokens: int) -> None:
        # One thread a call: the pool's own threads tokenize requests side by side, beside engines
        # that take the cores (fastokens would otherwise start a worker a core).
        os.environ.setdefault("FASTOKENS_BPE_THREADS", "1")
        import fastokens

        self.max_tokens = max_tokens
        self._tokenizers = {}  # truncate -> a fastokens tokenizer set up for it
        for truncate in (True, False):
            tokenizer = fastokens.Tokenizer.from_file(str(tokenizer_file))
            tokenizer.no_padding()
            if truncate:
                tokenizer.enable_truncation(max_tokens)
            else:
                tokenizer.no_truncation()
            self._tokenizers[truncate] = tokenizer

    @classmethod
    def for_file(cls, tokenizer_file: str, max_tokens: int, reference) -> BpeEncoder | None:
        """The encoder, or None where the tokenizer is not BPE, fastokens cannot read it, or it gives
        other ids than ``reference`` (the Hugging Face tokenizer's truncating batch encode) on
        ``CHECK_TEXTS``."""
        with open(tokenizer_file, encoding="utf-8") as fh:
            if json.load(fh).get("model", {}).get("type") != "BPE":
                return None
        try:
            encoder = cls(tokenizer_file, max_tokens)
        except (ImportError, ValueError, RuntimeError) as exc:  # a part it lacks: the tokenizer's path serves
            log.debug("fastokens does not read %s: %s", tokenizer_file, exc)
            return None
        ours = encoder.encode(CHECK_TEXTS).to_lists()
        theirs = [encoding.ids for encoding in reference(CHECK_TEXTS)]
        if ours != theirs:
            row = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
            log.info("fastokens gives other ids than the Hugging Face tokenizer (text %d of its check): not used", row)
            return None
        return encoder

    def encode(self, texts: list[str], truncate: bool = True) -> TokenRows:
        """Each text's ids; ``truncate`` cuts them at the model's max tokens, specials kept."""
        ids, offsets = self._tokenizers[truncate].encode_batch_flat(texts, add_special_tokens=True)
        # Flat uint32 ids (vocabularies are far below 2**31): no Python int per token.
        lengths = np.diff(np.frombuffer(offsets, dtype=np.uint64).astype(np.int64))
        return TokenRows(np.frombuffer(ids, dtype=np.uint32).view(np.int32), lengths)
