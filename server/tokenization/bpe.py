"""BPE tokenizers by fastokens: byte-level BPE (Qwen, ModernBERT, RoBERTa) and SentencePiece's BPE
with byte fallback (Gemma), at the Hugging Face tokenizer's ids and a small part of its CPU a row,
with the GIL released.

fastokens reads the model's tokenizer.json itself (normalizer, pre-tokenizer, BPE, template and
truncation) and gives a batch's ids as one flat buffer, which becomes ``TokenRows`` without a Python
int per token. It refuses a tokenizer.json it cannot run (a ValueError), and as it
loads, its ids are compared with the Hugging Face tokenizer's (server/tokenization/reference_check.py);
either way the pool keeps the Hugging Face tokenizer for that model. tests/unit/server/test_fast_encoders.py
compares the two on each generated family's tokenizer; docs/tuning.md has the measurement.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from embedtext.server.rows import TokenRows
from embedtext.server.tokenization.reference_check import agrees

log = logging.getLogger(__name__)


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
        """The encoder for a BPE tokenizer.json, or None where fastokens cannot read it or it gives
        other ids than ``reference`` (the Hugging Face tokenizer's truncating batch encode) on the
        check texts."""
        try:
            encoder = cls(tokenizer_file, max_tokens)
        except (ImportError, ValueError, RuntimeError) as exc:  # a part it lacks: the tokenizer's path serves
            log.debug("fastokens does not read %s: %s", tokenizer_file, exc)
            return None
        return encoder if agrees(encoder, reference, "fastokens") else None

    def encode(self, texts: list[str], truncate: bool = True) -> TokenRows:
        """Each text's ids; ``truncate`` cuts them at the model's max tokens, specials kept."""
        ids, offsets = self._tokenizers[truncate].encode_batch_flat(texts, add_special_tokens=True)
        # Flat uint32 ids (vocabularies are far below 2**31): no Python int per token.
        lengths = np.diff(np.frombuffer(offsets, dtype=np.uint64).astype(np.int64))
        return TokenRows(np.frombuffer(ids, dtype=np.uint32).view(np.int32), lengths)
