"""Finding the rows a server refuses, after it refused the batch that held them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from embedtext.protocol.errors import InvalidInputError

T = TypeVar("T")


def each_row_separately(call: Callable[[int], T], rows: int) -> tuple[list[int], list[T], dict[int, str]]:
    """After the server refused a batch: ``call`` each row's index on its own to find the rows it refuses.

    Returns the indices of the rows that succeeded, their results (in that order), and
    ``{row: error}`` for the rows refused. Only InvalidInputError marks a row as refused;
    anything else (a dead server) propagates.
    """
    kept: list[int] = []
    results: list[T] = []
    refused: dict[int, str] = {}
    for i in range(rows):
        try:
            results.append(call(i))
            kept.append(i)
        except InvalidInputError as exc:
            refused[i] = str(exc)
    return kept, results, refused


def embed_rows_separately(
    embed: Callable[[pa.Array], pa.FixedSizeListArray], texts: pa.Array
) -> tuple[list[int], pa.FixedSizeListArray | None, dict[int, str]]:
    """:func:`each_row_separately` for an embedding call: the rows embedded, their vectors (in that
    order; None if none was), and ``{row: error}`` for the rows refused."""
    embedded, vectors, refused = each_row_separately(lambda i: embed(texts.slice(i, 1)), len(texts))
    return embedded, (pa.concat_arrays(vectors) if vectors else None), refused
