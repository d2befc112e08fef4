"""WordPiece tokenizers (BERT and the embedding models built on it) by nanotoken: the same ids as
the Hugging Face tokenizer, at a small part of its CPU a row, with the GIL released.

The tokenizer's own ``encode_batch_fast`` spends 18-31 times nanotoken's CPU a row, and a word
cache in Python 3-10 times, under the GIL the whole server shares (docs/tuning.md has the A/B).
nanotoken does the BERT normalizer, pre-tokenizer, WordPiece, truncation and [CLS] ... [SEP] in
Rust, with per-thread caches of each chunk's ids, and gives the rows' ids as one flat array
(tests/unit/server/test_wordpiece.py compares its ids with the tokenizer's). A tokenizer.json it
cannot read exactly (not WordPiece, or a part it lacks) is refused at load, and the pool keeps the
Hugging Face tokenizer for it.
"""

from __future__ import annotations

import nanotoken
import numpy as np

from embedtext.server.rows import TokenRows

# Each tokenizing thread keeps a cache of chunks' and words' ids, of this many entries per level at
# most (~16 MiB a thread when full; the library's default is 8 times more).
CACHE_ENTRIES = 1 << 17
nanotoken.set_cache_entries(CACHE_ENTRIES)


class WordPieceEncoder:
    """Token ids of raw texts, specials included, for a tokenizer.json nanotoken reads exactly."""

    def __init__(self, tokenizer_file: str, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._tokenizer = nanotoken.Tokenizer(str(tokenizer_file))

    @classmethod
    def for_file(cls, tokenizer_file: str, max_tokens: int) -> WordPieceEncoder | None:
        """The encoder, or None where the tokenizer is not one nanotoken reproduces."""
        try:
            return cls(tokenizer_file, max_tokens)
        except nanotoken.UnsupportedTokenizerError:
            return None

    def encode(self, texts: list[str], truncate: bool = True) -> TokenRows:
        """Each text's ids; ``truncate`` cuts them at the model's max tokens, specials kept."""
        # parallel=False: the pool's own threads tokenize requests side by side, and a batch of a
        # request's rows is far below the library's 1 MiB unit of parallel work anyway.
        ragged = self._tokenizer.encode_batch(texts, max_length=self.max_tokens if truncate else None, parallel=False)
        # Flat uint32 ids (vocabularies are far below 2**31): no Python int per token.
        return TokenRows(np.asarray(ragged.ids).view(np.int32), np.asarray(ragged.lengths))
