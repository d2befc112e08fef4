"""Benchmark rows of exactly known token counts: random draws (seeded, distinct) of the vocabulary's
one-token words.
"""

from __future__ import annotations

import os
import random
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa


class BenchCorpus:
    """Texts and token ids for one model (a directory with a ``tokenizer.json``)."""

    def __init__(self, model_dir: str | os.PathLike) -> None:
        from tokenizers import Tokenizer

        self.model_dir = Path(model_dir)
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()

    @cached_property
    def specials(self) -> int:
        """Tokens the tokenizer adds to every text: [CLS] and [SEP], <s> and </s>, an end-of-text."""
        return len(self.tokenizer.encode("").ids)

    @cached_property
    def words(self) -> list[str]:
        # Whole words of the vocabulary that are one token both first in a text and after a space:
        # WordPiece's words, byte-level BPE's "Ġword" and Metaspace's "▁word" (their marks
        # dropped), never pieces, special tokens or single characters.
        marks = ("Ġ", "▁")
        vocab = {w.lstrip("".join(marks)) for w in self.tokenizer.get_vocab()}
        vocab = [w for w in vocab if len(w) > 1 and w.isalpha() and w.isascii()]
        encode = self.tokenizer.encode_batch([f"{w} {w}" for w in vocab], add_special_tokens=False)
        return sorted(w for w, e in zip(vocab, encode, strict=True) if len(e.ids) == 2)

    def texts(self, rows: int, tokens: int, seed: int = 1) -> list[str]:
        """``rows`` distinct texts of exactly ``tokens`` tokens each (checked)."""
        if tokens <= self.specials:
            raise ValueError(f"tokens counts the {self.specials} special tokens: at least {self.specials + 1}")
        rng = random.Random(seed * 1_000_003 + tokens)
        texts = [" ".join(rng.choices(self.words, k=tokens - self.specials)) for _ in range(rows)]
        sample = texts[: min(rows, 256)]
        counts = {len(e.ids) for e in self.tokenizer.encode_batch(sample)}
        if counts != {tokens}:
            raise AssertionError(f"generated texts have {sorted(counts)} tokens, wanted {tokens}")
        return texts

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def repeated(self, rows: int, tokens: int, pool: int = 16384, seed: int = 1) -> pa.StringArray:
        """``rows`` rows cycling through ``pool`` distinct texts (any 2048 in a row distinct)."""
        texts = pa.array(self.texts(min(rows, pool), tokens, seed), pa.string())
        return texts.take(pa.array(np.arange(rows, dtype=np.int64) % len(texts)))
