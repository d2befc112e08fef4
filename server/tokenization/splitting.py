"""Texts -> chunks of at most N tokens of the model's own tokenizer, each a span of its text.

A text's tokens come with their character offsets (the Hugging Face tokenizer's). A chunk is a run
of whole tokens: at most ``max_tokens`` of them, sharing exactly ``overlap`` with the chunk before.
Where a chunk must end before the text does, it ends at the best boundary in the second half of
its window: a paragraph break first, then a line break, the end of a sentence, a space, and only
where the window holds none of them, inside a word. Its span runs from its first token's start to
its last token's end, so embedding the span's text embeds what the chunk holds.

>>> text = "one two. six\\n\\nten end"
>>> starts, ends = np.array([0, 4, 9, 14, 18]), np.array([3, 8, 12, 17, 21])
>>> split_tokens(text, starts, ends, max_tokens=3, overlap=0)
[(0, 3), (3, 5)]
>>> split_tokens(text, starts, ends, max_tokens=4, overlap=1)
[(0, 3), (2, 5)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A boundary's rank (higher: a better place to end a chunk).
_INSIDE_WORD, _SPACE, _SENTENCE, _LINE, _PARAGRAPH = range(5)
_SENTENCE_ENDS = frozenset(".!?。！？")


@dataclass(frozen=True)
class TextChunks:
    """The chunks of a batch of texts, text after text: how many each text has, and per chunk its
    span (start, end: code points, end exclusive) and its token count."""

    counts: np.ndarray  # int32, one per text
    spans: np.ndarray  # int32, (chunks, 2)
    tokens: np.ndarray  # int32, one per chunk

    @classmethod
    def of(cls, per_text: list[list[tuple[int, int, int]]]) -> TextChunks:
        """From each text's chunks as (start, end, tokens)."""
        counts = np.fromiter(map(len, per_text), dtype=np.int32, count=len(per_text))
        flat = np.array([c for chunks in per_text for c in chunks], dtype=np.int32).reshape(-1, 3)
        return cls(counts, np.ascontiguousarray(flat[:, :2]), np.ascontiguousarray(flat[:, 2]))


def boundary_ranks(text: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The rank of each place between two tokens (index i: before token i, for 1 <= i < n), read
    from the run of whitespace at that place, whichever tokens hold it (a gap between tokens, a
    byte-level BPE token's leading space, newline tokens): two newlines or more in it make a
    paragraph break, one a line break; else a sentence's end before it, or a space. Entry 0 is unused."""
    n = len(starts)
    ranks = np.zeros(n, dtype=np.int8)
    if n < 2 or not text:
        return ranks
    chars = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    newline = np.isin(chars, _NEWLINE_CODES)
    space = newline | np.isin(chars, _SPACE_CODES)
    if not space.any():
        return ranks  # one word: every cut is inside it
    run_starts = space & ~np.concatenate(([False], space[:-1]))
    run_of = np.cumsum(run_starts) - 1  # each whitespace character's run
    first_of_run = np.flatnonzero(run_starts)
    run_newlines = np.bincount(run_of[space], weights=newline[space], minlength=len(first_of_run))
    # The run the cut before token i touches: the character before its start, or at it.
    at = starts[1:].astype(np.int64).clip(0, len(chars))
    left = space[(at - 1).clip(0)] & (at > 0)
    right = np.zeros(len(at), dtype=bool)
    inside = at < len(chars)
    right[inside] = space[at[inside]]
    run = np.where(left, run_of[(at - 1).clip(0)], np.where(right, run_of[at.clip(max=len(chars) - 1)], -1))
    touched = run >= 0
    newlines = np.where(touched, run_newlines[run.clip(0)], 0)
    before_run = first_of_run[run.clip(0)] - 1
    sentence_end = touched & (before_run >= 0) & np.isin(chars[before_run.clip(0)], _SENTENCE_CODES)
    rank = np.where(touched, _SPACE, _INSIDE_WORD)
    rank = np.where(sentence_end, _SENTENCE, rank)
    rank = np.where(newlines > 0, _LINE, rank)
    rank = np.where(newlines > 1, _PARAGRAPH, rank)
    ranks[1:] = rank
    return ranks


_SPACE_CODES = np.array([ord(c) for c in " \t\f\v\u00a0\u3000\u2009\u200a\u202f\u205f"], dtype=np.uint32)
_NEWLINE_CODES = np.array([ord(c) for c in "\n\r\u2028\u2029\x85"], dtype=np.uint32)
_SENTENCE_CODES = np.array([ord(c) for c in _SENTENCE_ENDS], dtype=np.uint32)


def split_tokens(
    text: str, starts: np.ndarray, ends: np.ndarray, max_tokens: int, overlap: int
) -> list[tuple[int, int]]:
    """Token ranges [a, b) of a text's chunks: every token in one at least, none longer than
    ``max_tokens``, each starting ``overlap`` tokens before the one before it ends."""
    if max_tokens < 1 or not 0 <= overlap < max_tokens:
        raise ValueError(f"max_tokens {max_tokens} and overlap {overlap}: need 0 <= overlap < max_tokens")
    n = len(starts)
    ranks = boundary_ranks(text, starts, ends)
    chunks = []
    first = 0
    while True:
        last = min(first + max_tokens, n)
        if last == n:
            chunks.append((first, n))
            return chunks
        # The window's second half (and past the overlap, so the next chunk starts further on).
        lowest = first + max(max_tokens // 2, overlap + 1)
        window = ranks[lowest : last + 1]
        # The best rank, the latest place of it; a boundary inside a word is no better than the window's end.
        best = int(window.max())
        end = lowest + len(window) - 1 - int(np.argmax(window[::-1] == best)) if best > _INSIDE_WORD else last
        chunks.append((first, end))
        first = end - overlap


def chunk_spans(text: str, starts: np.ndarray, ends: np.ndarray, max_tokens: int, overlap: int):
    """A text's chunks as (start, end, tokens): spans in code points; none for a text without tokens."""
    if len(starts) == 0:
        return []
    return [(int(starts[a]), int(ends[b - 1]), b - a) for a, b in split_tokens(text, starts, ends, max_tokens, overlap)]
