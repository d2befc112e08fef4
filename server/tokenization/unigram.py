"""SentencePiece Unigram tokenizers (XLM-R, and the models built on it: bge-m3, multilingual-e5,
snowflake-arctic-embed-l-v2.0) by the sentencepiece library, from the SentencePiece model that the
model's directory ships beside its tokenizer.json: the same ids at a small part of the Hugging Face
tokenizer's CPU a row, with the GIL released.

tokenizer.json was converted from that SentencePiece model, and its ids are the model's pieces in
another order (XLM-R's fairseq ids): a table maps one to the other, and the template's specials
(``<s> ... </s>``) and truncation are added here. Rows go to the Hugging Face tokenizer instead
where the two libraries can differ (found over random strings of every Unicode class; none of
200,000 differs once these go):
- an added token's text (``<s>``, ``<mask>``), which Hugging Face splits off before the model;
- a combining mark, or a control or format character: the two normalizers can differ around them;
- a compatibility character (one that NFKC changes: "ｆ", "①", "𝓬"), for the same reason;
- a character or pair three times in a row ("...", "ccc", "hahaha"): there "c" + "cc" and "cc" + "c"
  score the same, and the two break such ties differently.
The load-time check (server/tokenization/reference_check.py) then compares the whole path with the
Hugging Face tokenizer's; an encoder that differs is not used.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from pathlib import Path

import numpy as np
import regex

from embedtext.server.rows import TokenRows
from embedtext.server.tokenization.reference_check import agrees

log = logging.getLogger(__name__)

# Where Hugging Face model directories keep the SentencePiece model (XLM-R's name first).
SENTENCEPIECE_FILES = ("sentencepiece.bpe.model", "spiece.model", "tokenizer.model")
# Combining marks, and control, format, private-use and unassigned characters, but tab, newline and
# carriage return (the regex library's Unicode classes: a class of re's ranges costs 40 times more).
_UNUSUAL = regex.compile(r"[[\p{M}\p{C}]--[\t\n\r]]", regex.V1)
_ASCII_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _code_points(text: str) -> np.ndarray:
    return (
        np.frombuffer(text.encode("ascii"), np.uint8)
        if text.isascii()
        else np.frombuffer(text.encode("utf-32-le"), np.uint32)
    )


def _repeats(points: np.ndarray) -> np.ndarray:
    """Where a character other than a space, or a pair of them, comes three times in a row."""
    same1 = points[:-1] == points[1:]
    same2 = points[:-2] == points[2:]
    visible = points[:-2] > 32
    one = same1[:-1] & same1[1:] & visible
    two = same2[:-3] & same2[1:-2] & same2[2:-1] & same2[3:] & visible[:-3] & visible[1:-2]
    return np.concatenate([np.flatnonzero(one), np.flatnonzero(two)])


class UnigramEncoder:
    """Token ids of raw texts, specials included, for a Unigram tokenizer.json and the SentencePiece
    model it was converted from."""

    def __init__(self, sentencepiece_file: Path, tokenizer, max_tokens: int) -> None:
        """``tokenizer``: the model's Hugging Face tokenizer, without truncation."""
        import sentencepiece

        self.max_tokens = max_tokens
        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_file))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        ids = [vocab.get(self._sp.id_to_piece(i)) for i in range(self._sp.get_piece_size())]
        if None in ids:
            raise ValueError(f"{sentencepiece_file.name} has pieces that tokenizer.json lacks")
        self._ids = np.array(ids, dtype=np.int32)
        self._reference = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        plain, framed = tokenizer.encode("x", add_special_tokens=False).ids, tokenizer.encode("x").ids
        start = next(i for i in range(len(framed)) if framed[i : i + len(plain)] == plain)
        self._prefix, self._suffix = framed[:start], framed[start + len(plain) :]
        added = sorted((t.content for t in tokenizer.get_added_tokens_decoder().values()), key=len, reverse=True)
        self._added = re.compile("|".join(map(re.escape, added))) if added else None

    @classmethod
    def for_file(cls, tokenizer_file: str, max_tokens: int, tokenizer, reference) -> UnigramEncoder | None:
        """The encoder for a Unigram tokenizer.json, or None where no SentencePiece model is beside
        it, or the pair gives other ids than ``reference`` (the Hugging Face tokenizer's truncating
        batch encode) on the check texts."""
        path = Path(tokenizer_file)
        found = next((path.parent / name for name in SENTENCEPIECE_FILES if (path.parent / name).is_file()), None)
        if found is None:
            log.info("no SentencePiece model beside %s: the Hugging Face tokenizer serves", path)
            return None
        try:
            encoder = cls(found, tokenizer, max_tokens)
        except (ImportError, OSError, RuntimeError, ValueError) as exc:
            log.info("sentencepiece does not serve %s: %s", found, exc)
            return None
        return encoder if agrees(encoder, reference, "sentencepiece") else None

    def _for_reference(self, texts: list[str]) -> np.ndarray:
        """The rows that go to the Hugging Face tokenizer (see the module's docstring), found in one
        pass over the rows joined by newlines."""
        joined = "\n".join(texts)
        starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))[:-1] + 1, out=starts[1:])
        found = [_repeats(_code_points(joined))]
        if joined.isascii():
            if not joined.isprintable():
                found.append([m.start() for m in _ASCII_CONTROL.finditer(joined)])
        else:
            found.append([m.start() for m in _UNUSUAL.finditer(joined)])
            if not unicodedata.is_normalized("NFKC", joined):  # compatibility characters: "ｆ", "①", "𝓬"
                found.append([starts[i] for i, text in enumerate(texts) if not unicodedata.is_normalized("NFKC", text)])
        if self._added:
            found.append([m.start() for m in self._added.finditer(joined)])
        at = np.concatenate([np.asarray(f, dtype=np.int64) for f in found])
        return np.unique(np.searchsorted(starts, at, side="right") - 1)

    def encode(self, texts: list[str], truncate: bool = True) -> TokenRows:
        """Each text's ids; ``truncate`` cuts them at the model's max tokens, specials kept."""
        theirs = self._for_reference(texts) if texts else np.zeros(0, dtype=np.int64)
        if theirs.size:
            ours = np.setdiff1d(np.arange(len(texts)), theirs)
            hf = self._reference([texts[i] for i in theirs], add_special_tokens=False)
            body = TokenRows.concat([self._pieces([texts[i] for i in ours]), TokenRows.from_lists([e.ids for e in hf])])
            body = body.rows_at(np.argsort(np.concatenate([ours, theirs]), kind="stable"))
        else:
            body = self._pieces(texts)
        if truncate:
            body = body.truncated(self.max_tokens - len(self._prefix) - len(self._suffix))
        return body.framed(self._prefix, self._suffix)

    def _pieces(self, texts: list[str]) -> TokenRows:
        # One thread a call: the pool's own threads tokenize requests side by side.
        rows = TokenRows.from_lists(self._sp.encode(texts, num_threads=1))
        return TokenRows(self._ids[rows.ids], rows.lengths)
