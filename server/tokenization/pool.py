"""The tokenizer stage: texts -> token ids, off the event loop, ahead of inference.

A small thread pool keeps the next requests tokenized while the engines run the current batches.
Truncation follows the model's max tokens (special tokens included). WordPiece tokenizers (BERT and
the embedding models built on it) go to nanotoken (server/tokenization/wordpiece.py), BPE tokenizers
(Qwen, ModernBERT, Gemma) to fastokens (server/tokenization/bpe.py), and Unigram tokenizers with their
SentencePiece model (XLM-R) to sentencepiece (server/tokenization/unigram.py): the same ids at a
small part of the CPU, with the GIL released. Any other tokenizer is Hugging Face's, whose
``encode_batch_fast`` (no character offsets, where the installed tokenizers has it) releases the GIL
too.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tokenizers import Tokenizer

from embedtext.protocol.errors import InvalidInputError
from embedtext.server.rows import TokenRows
from embedtext.server.tokenization.bpe import BpeEncoder
from embedtext.server.tokenization.splitting import TextChunks, chunk_spans
from embedtext.server.tokenization.unigram import UnigramEncoder
from embedtext.server.tokenization.wordpiece import WordPieceEncoder

# An interactive request up to this many characters is tokenized on the event loop itself: far
# less than a hand-over to a thread and back, each of which may wait a GIL switch interval while
# the event loop runs Python.
INLINE_TOKENIZE_CHARS = 2048


class TokenizerPool:
    """Tokenizes batches of texts in worker threads (small interactive requests inline)."""

    def __init__(self, tokenizer_file: str, max_tokens: int, threads: int = 2) -> None:
        self.max_tokens = max_tokens
        tokenizer = self._load(tokenizer_file)
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        # Splitting needs each token's character offsets, which only the Hugging Face tokenizer gives.
        self._offsets_tokenizer = tokenizer
        self.special_tokens = len(tokenizer.encode("").ids)  # what the model's template adds to a row
        # A fast path where one reproduces this tokenizer (None: not one it reads exactly): WordPiece
        # by nanotoken, else BPE by fastokens, else Unigram by sentencepiece, checked against the
        # Hugging Face tokenizer's encoders, which serve every other tokenizer. A second copy of the
        # tokenizer is loaded only for them.
        self._encoders = {}  # truncate -> the bound encode method of a Hugging Face tokenizer set up for it
        self.fast = WordPieceEncoder.for_file(tokenizer_file, max_tokens)
        if self.fast is None:
            truncating = self._load(tokenizer_file)
            truncating.enable_truncation(max_length=max_tokens)
            for truncate, each in ((True, truncating), (False, tokenizer)):
                encode = "encode_batch_fast" if hasattr(each, "encode_batch_fast") else "encode_batch"
                self._encoders[truncate] = getattr(each, encode)
            kind = type(tokenizer.model).__name__  # "BPE", "Unigram", ...: read once, from the loaded file
            if kind == "BPE":
                self.fast = BpeEncoder.for_file(tokenizer_file, max_tokens, self._encoders[True])
            elif kind == "Unigram":
                self.fast = UnigramEncoder.for_file(tokenizer_file, max_tokens, tokenizer, self._encoders[True])
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
        if isinstance(self.fast, WordPieceEncoder):
            return "WordPiece by nanotoken"
        if isinstance(self.fast, BpeEncoder):
            return "BPE by fastokens"
        if isinstance(self.fast, UnigramEncoder):
            return "Unigram by sentencepiece"
        return "the Hugging Face tokenizer"

    @staticmethod
    def _load(tokenizer_file: str) -> Tokenizer:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer

    def tokenize_sync(self, texts: list[str], truncate: bool = True) -> TokenRows:
        """Token ids per text; with ``truncate=False`` a row over the limit raises InvalidInputError."""
        if not texts:
            return TokenRows.from_lists([])
        rows = self._encode(texts, truncate)
        if truncate:
            return rows
        over = np.flatnonzero(rows.lengths > self.max_tokens)
        if over.size:
            row = int(over[0])
            raise InvalidInputError(
                f"row {row} has {int(rows.lengths[row])} tokens; the model takes at most {self.max_tokens} "
                "and truncation is off (turn it on, or split the text)"
            )
        return rows

    def prompt_tokens(self, prompt: str) -> int:
        """The tokens a prompt adds before a text."""
        return len(self._offsets_tokenizer.encode(prompt, add_special_tokens=False).ids) if prompt else 0

    def split_sync(self, texts: list[str], max_tokens: int, overlap: int) -> TextChunks:
        """Each text's chunks of at most ``max_tokens`` tokens (server/tokenization/splitting.py)."""
        encodings = self._offsets_tokenizer.encode_batch(texts, add_special_tokens=False)
        per_text = []
        for text, encoding in zip(texts, encodings):
            offsets = np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2)
            per_text.append(chunk_spans(text, offsets[:, 0], offsets[:, 1], max_tokens, overlap))
        return TextChunks.of(per_text)

    async def split(self, texts: list[str], max_tokens: int, overlap: int) -> TextChunks:
        """As ``split_sync``, in the bulk threads (splitting serves documents, not queries)."""
        # Not counted in ``busy``: no rows come of it for the batch queue to wait for.
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self.split_sync, texts, max_tokens, overlap
        )

    def _encode(self, texts: list[str], truncate: bool) -> TokenRows:
        if self.fast is not None:
            return self.fast.encode(texts, truncate)
        return TokenRows.from_lists([enc.ids for enc in self._encoders[truncate](texts)])

    @property
    def busy(self) -> bool:
        """Some request is being tokenized: its rows are on their way to the batch queue."""
        return self._in_flight > 0

    async def tokenize(self, texts: list[str], truncate: bool = True, interactive: bool = False) -> TokenRows:
        if interactive and sum(map(len, texts)) <= INLINE_TOKENIZE_CHARS:
            return self.tokenize_sync(texts, truncate)
        loop = asyncio.get_running_loop()
        executor = self._interactive_executor if interactive else self._executor
        self._in_flight += 1
        try:
            return await loop.run_in_executor(executor, self.tokenize_sync, texts, truncate)
        finally:
            self._in_flight -= 1

    def check_token_ids(self, rows: TokenRows | list[list[int]], truncate: bool = True) -> TokenRows:
        """Validate pre-tokenized rows, all at once on their flat ids: ids in the vocabulary, one at
        least a row, and each within the model's limit (cut to it where ``truncate``). The message
        names the first row refused, as a row-by-row check would."""
        rows = TokenRows.from_lists(rows)
        refusals = []  # (row, the check's rank within a row, what is wrong): the least is reported
        outside = np.flatnonzero(rows.ids >= self.vocab_size)
        if outside.size:
            row = int(np.searchsorted(rows.offsets, outside[0], side="right")) - 1
            held = int(rows[row].max())
            refusals.append((row, 0, f"holds id {held}, outside the vocabulary (size {self.vocab_size})"))
        if (empty := np.flatnonzero(rows.lengths == 0)).size:
            refusals.append((int(empty[0]), 1, "is empty; a row needs at least one token"))
        over = np.flatnonzero(rows.lengths > self.max_tokens)
        if over.size and not truncate:
            row = int(over[0])
            refusals.append((row, 2, f"has {int(rows.lengths[row])} tokens; the model takes at most {self.max_tokens}"))
        if refusals:
            row, _, what = min(refusals)
            raise InvalidInputError(f"token_ids: row {row} {what}")
        return rows.truncated(self.max_tokens) if over.size else rows

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._interactive_executor.shutdown(wait=False, cancel_futures=True)
