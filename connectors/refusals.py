"""Finding the rows a server refuses, after it refused the batch that held them."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from embedtext.protocol.errors import InvalidInputError


def embed_rows_separately(
    embed: Callable[[pa.Array], pa.FixedSizeListArray], texts: pa.Array
) -> tuple[list[int], pa.FixedSizeListArray | None, dict[int, str]]:
    """After the server refused a batch: embed each row on its own to find the rows it refuses.

    Returns the indices of the rows embedded, their vectors (in that order; None if none
    was), and ``{row: error}`` for the rows refused. Only InvalidInputError marks a row as
    refused; anything else (a dead server) propagates.
    """
    embedded: list[int] = []
    vectors: list[pa.FixedSizeListArray] = []
    refused: dict[int, str] = {}
    for i in range(len(texts)):
        try:
            vectors.append(embed(texts.slice(i, 1)))
            embedded.append(i)
        except InvalidInputError as exc:
            refused[i] = str(exc)
    return embedded, (pa.concat_arrays(vectors) if vectors else None), refused
