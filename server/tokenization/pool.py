"""The tokenizer stage: texts -> token ids, off the event loop, ahead of inference.

Hugging Face fast tokenizers release the GIL and parallelize ``encode_batch`` in Rust, so a
small thread pool keeps the next requests tokenized while the engines run the current
batches. Truncation follows the model's max tokens (special tokens included).

Only the ids are used, so ``encode_batch_fast`` (no character offsets) is preferred where the
installed tokenizers has it: less CPU per row, CPU the engines share on a small machine.
Pure-ASCII texts for BERT-family tokenizers are normalized ahead, in a few byte operations, and
go to a copy of the tokenizer without its normalizer (server/tokenization/ascii_normalizer.py):
same ids, less tokenizer CPU again (bench/results/full-ascii-normalizer.json). With
``word_cache``, those texts are split into words in Python and each word's ids come from a cache
(server/tokenization/word_cache.py): less CPU again (bench/results/full-word-cache.json), but under the GIL,
so the server turns it on only where the engines compute on the CPU.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from tokenizers import Tokenizer

from embedtext.protocol.errors import InvalidInputError
from embedtext.server.tokenization.ascii_normalizer import AsciiBertNormalizer
from embedtext.server.tokenization.word_cache import WordCacheEncoder

# An interactive request up to this many characters is tokenized on the event loop itself: far
# less than a hand-over to a thread and back, each of which may wait a GIL switch interval while
# bulk tokenizing runs Python.
INLINE_TOKENIZE_CHARS = 2048


class TokenizerPool:
    """Tokenizes batches of texts in worker threads (small interactive requests inline)."""

    def __init__(
        self,
        tokenizer_file: str,
        max_tokens: int,
        threads: int = 2,
        word_cache: bool = False,
    ) -> None:
        self.max_tokens = max_tokens
        whole = self._load(tokenizer_file)  # also the encoder for (truncate=False, pre-normalized=False)
        self.vocab_size = whole.get_vocab_size(with_added_tokens=True)
        # None (not a BERT-family tokenizer): every text takes the tokenizer's own normalizer.
        self.ascii_normalizer = AsciiBertNormalizer.for_tokenizer(whole)
        # None: normalized texts go to the tokenizer (it needs them normalized ahead).
        self.word_cache = (
            WordCacheEncoder.for_tokenizer(whole, max_tokens) if word_cache and self.ascii_normalizer else None
        )
        # (truncate, pre-normalized) -> the bound encode method of a tokenizer set up for it
        self._encoders = {}
        for truncate in (True, False):
            for normalized in (False, True) if self.ascii_normalizer else (False,):
                tokenizer = whole if (truncate, normalized) == (False, False) else self._load(tokenizer_file)
                if truncate:
                    tokenizer.enable_truncation(max_length=max_tokens)
                if normalized:
                    tokenizer.normalizer = None
                encode = "encode_batch_fast" if hasattr(tokenizer, "encode_batch_fast") else "encode_batch"
                self._encoders[(truncate, normalized)] = getattr(tokenizer, encode)
        self._in_flight = 0
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="embedtext-tokenizer")
        # Larger interactive requests get a thread of their own: behind a bulk request's
        # thousands of rows in the shared threads they would wait for its whole tokenization.
        self._interactive_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="embedtext-tokenizer-interactive"
        )

    @property
    def path(self) -> str:
        """How a text becomes ids here, for the start-up log."""
        if self.ascii_normalizer is None:
            return "the tokenizer normalizes every text itself"
        path = "ASCII texts normalized ahead of the tokenizer (BertNormalizer)"
        if self.word_cache is not None:
            return path + ", split into words here, each word's ids from a cache (word_cache)"
        return path

    @staticmethod
    def _load(tokenizer_file: str) -> Tokenizer:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer

    def tokenize_sync(self, texts: list[str], truncate: bool = True) -> list[list[int]]:
        """Token ids per text; with ``truncate=False`` a row over the limit raises InvalidInputError."""
        if not texts:
            return []
        ids = self._encode(texts, truncate)
        if truncate:
            return ids
        for row, row_ids in enumerate(ids):
            if len(row_ids) > self.max_tokens:
                raise InvalidInputError(
                    f"row {row} has {len(row_ids)} tokens; the model takes at most {self.max_tokens} "
                    "and truncation is off (turn it on, or split the text)"
                )
        return ids

    def _encode(self, texts: list[str], truncate: bool) -> list[list[int]]:
        full = self._encoders[(truncate, False)]
        if self.ascii_normalizer is None:
            return [enc.ids for enc in full(texts)]
        normalize = self.ascii_normalizer.normalize
        normalized = [normalize(text) for text in texts]
        left = [row for row, text in enumerate(normalized) if text is None]  # the full tokenizer's
        if not left:
            return self._encode_normalized(normalized, truncate)
        if len(left) == len(texts):
            return [enc.ids for enc in full(texts)]
        ready = [row for row, text in enumerate(normalized) if text is not None]
        ids: list = [None] * len(texts)
        for row, enc in zip(left, full([texts[row] for row in left])):
            ids[row] = enc.ids
        for row, row_ids in zip(ready, self._encode_normalized([normalized[row] for row in ready], truncate)):
            ids[row] = row_ids
        return ids

    def _encode_normalized(self, texts: list[str], truncate: bool) -> list[list[int]]:
        if self.word_cache is not None:
            return self.word_cache.encode(texts, truncate)
        return [enc.ids for enc in self._encoders[(truncate, True)](texts)]

    @property
    def busy(self) -> bool:
        """Some request is being tokenized: its rows are on their way to the batch queue."""
        return self._in_flight > 0

    async def tokenize(self, texts: list[str], truncate: bool = True, interactive: bool = False) -> list[list[int]]:
        if interactive and sum(map(len, texts)) <= INLINE_TOKENIZE_CHARS:
            return self.tokenize_sync(texts, truncate)
        loop = asyncio.get_running_loop()
        executor = self._interactive_executor if interactive else self._executor
        self._in_flight += 1
        try:
            return await loop.run_in_executor(executor, self.tokenize_sync, texts, truncate)
        finally:
            self._in_flight -= 1

    def check_token_ids(self, rows: list[list[int]], truncate: bool = True) -> list[list[int]]:
        """Validate pre-tokenized rows: ids in the vocabulary, length within the limit."""
        for row, ids in enumerate(rows):
            if ids and max(ids) >= self.vocab_size:
                raise InvalidInputError(
                    f"token_ids: row {row} holds id {max(ids)}, outside the vocabulary (size {self.vocab_size})"
                )
            if not ids:
                raise InvalidInputError(f"token_ids: row {row} is empty; a row needs at least one token")
            if len(ids) > self.max_tokens:
                if not truncate:
                    raise InvalidInputError(
                        f"token_ids: row {row} has {len(ids)} tokens; the model takes at most {self.max_tokens}"
                    )
        if truncate:
            return [ids[: self.max_tokens] for ids in rows]
        return rows

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._interactive_executor.shutdown(wait=False, cancel_futures=True)
