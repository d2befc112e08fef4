"""Snowflake's ``SPLIT_TEXT_RECURSIVE_CHARACTER``: LangChain's recursive character splitter, in pure Python.

Snowflake documents the function as LangChain's ``RecursiveCharacterTextSplitter`` with the
separators kept at the start of the piece that follows them, whitespace stripped from each chunk
and lengths counted in characters. This module is that algorithm, written out (no LangChain
dependency), with Snowflake's argument checks; ``embedtext.udf.text_split`` puts it on DuckDB.

>>> split_text_recursive_character("hello world are you here", "none", 15, 10)
['hello world are', 'world are you', 'are you here']

Imports neither duckdb nor grpc.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The DuckDB function's name: the dialect writes it, ``embedtext.udf.text_split`` registers it.
SQL_FUNCTION_NAME = "split_text_recursive_character"

#: Snowflake's default ``separators``: a paragraph break, a line break, a space, between any two characters.
DEFAULT_SEPARATORS = ("\n\n", "\n", " ", "")

#: What each ``format`` splits on before the ``separators``, as regular expressions (the separators
#: are literal text). Markdown's are LangChain's ``Language.MARKDOWN`` ones: headings, the end of a
#: code fence, horizontal rules; followed by the default separators they are exactly that list.
FORMAT_PATTERNS = {
    "none": (),
    "markdown": (r"\n#{1,6} ", "```\n", r"\n\*\*\*+\n", r"\n---+\n", r"\n___+\n"),
}


def split_text_recursive_character(
    text: str,
    format: str,
    chunk_size: int,
    overlap: int = 0,
    separators: Sequence[str] | None = None,
) -> list[str]:
    """Split ``text`` into chunks of at most ``chunk_size`` characters, as Snowflake does.

    The first separator found in the text splits it; pieces still too long are split again with
    the separators after it, and neighbouring short pieces are merged back up to ``chunk_size``,
    each chunk starting with up to ``overlap`` characters of the previous one.

    Args:
        text: the text to split.
        format: ``"none"`` or ``"markdown"`` (any case): markdown first splits on headings, code
            fences and horizontal rules.
        chunk_size: the most characters in a chunk (a piece with no separator left may be longer).
        overlap: characters shared by consecutive chunks, below ``chunk_size``.
        separators: the ordered boundaries to split on, literal text (``""``: between any two
            characters); None or empty: :data:`DEFAULT_SEPARATORS`.

    Returns:
        The chunks, whitespace stripped from each, empty ones dropped.

    Raises:
        ValueError: an unknown format, ``chunk_size`` not above zero, ``overlap`` negative or not
            below ``chunk_size``, or a separator that is not a string.

    >>> split_text_recursive_character("# Title\\n\\n## Subtitle\\n\\nMore content.", "markdown", 25, 3)
    ['# Title', '## Subtitle', 'More content.']
    >>> split_text_recursive_character("a b", "html", 5)
    Traceback (most recent call last):
    ...
    ValueError: format must be one of 'none', 'markdown' (any case), got 'html'
    """
    patterns = FORMAT_PATTERNS.get(format.lower()) if isinstance(format, str) else None
    if patterns is None:
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMAT_PATTERNS))} (any case), got {format!r}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be greater than zero, got {chunk_size}")
    if not 0 <= overlap < chunk_size:
        raise ValueError(f"overlap must be at least zero and smaller than chunk_size ({chunk_size}), got {overlap}")
    if separators is not None and not all(isinstance(s, str) for s in separators):
        raise ValueError(f"separators must be strings, got {list(separators)!r}")
    # LangChain's `separators or default`: an empty list means the default.
    literal = separators or DEFAULT_SEPARATORS
    return _split(text, [*patterns, *map(re.escape, literal)], chunk_size, overlap)


def _split(text: str, patterns: list[str], chunk_size: int, overlap: int) -> list[str]:
    """LangChain's ``RecursiveCharacterTextSplitter._split_text`` with ``keep_separator=True``."""
    # The first pattern found in the text splits it; "" (between characters) ends the search.
    pattern, finer = patterns[-1], []
    for i, candidate in enumerate(patterns):
        if candidate == "":
            pattern = candidate
            break
        if re.search(candidate, text):
            pattern, finer = candidate, patterns[i + 1 :]
            break
    chunks: list[str] = []
    short: list[str] = []
    for piece in _pieces(text, pattern):
        # Strictly shorter, as LangChain: a piece of exactly chunk_size is split further.
        if len(piece) < chunk_size:
            short.append(piece)
            continue
        if short:
            chunks.extend(_merge(short, chunk_size, overlap))
            short = []
        # No finer separator left: the piece is a chunk as it is (unstripped, possibly too long).
        chunks.extend(_split(piece, finer, chunk_size, overlap) if finer else [piece])
    if short:
        chunks.extend(_merge(short, chunk_size, overlap))
    return chunks


def _pieces(text: str, pattern: str) -> list[str]:
    """``text`` cut before each match of ``pattern``, the match kept at the start of its piece."""
    if not pattern:
        return list(text)
    parts = re.split(f"({pattern})", text)  # [text, match, text, match, ..., text]
    pieces = [parts[0], *(parts[i] + parts[i + 1] for i in range(1, len(parts), 2))]
    return [piece for piece in pieces if piece]


def _merge(pieces: list[str], chunk_size: int, overlap: int) -> list[str]:
    """LangChain's ``TextSplitter._merge_splits`` with an empty separator and ``strip_whitespace``."""
    chunks: list[str] = []
    window: list[str] = []  # the pieces of the chunk being built
    total = 0
    for piece in pieces:
        size = len(piece)
        if window and total + size > chunk_size:
            chunks.append("".join(window).strip())
            # Keep the window's tail as the next chunk's overlap, and room for this piece.
            while total > overlap or (total + size > chunk_size and total > 0):
                total -= len(window.pop(0))
        window.append(piece)
        total += size
    chunks.append("".join(window).strip())
    return [chunk for chunk in chunks if chunk]
