"""Rows of token ids as every stage of the server holds them: one flat int32 array and its
offsets, from the tokenizer (or a request's own ids) through the batch queue to an engine's step.
"""

from __future__ import annotations

import itertools

import numpy as np


class TokenRows:
    """Rows of token ids kept as one flat int32 array and their offsets, without a Python list per
    row: what the tokenizer gives (nanotoken's ragged ids), the queue cuts into batches, an
    ``EMBED`` frame carries, and a packed engine gathers whole runs of rows from.

    >>> rows = TokenRows.from_lists([[1, 2, 3], [4], [5, 6]])
    >>> len(rows), rows[2].tolist(), rows.lengths.tolist()
    (3, [5, 6], [3, 1, 2])
    >>> rows.take(1, 3).tolist(), rows.slice(1, 3).to_lists()
    ([4, 5, 6], [[4], [5, 6]])
    >>> TokenRows.concat([rows.slice(2, 3), rows.slice(0, 1)]).to_lists()
    [[5, 6], [1, 2, 3]]
    """

    __slots__ = ("ids", "lengths", "offsets")

    def __init__(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        self.ids = ids
        self.lengths = lengths.astype(np.int64, copy=False)
        self.offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])

    @classmethod
    def from_lists(cls, rows) -> TokenRows:
        """Rows given as a list of ids per row (or already as TokenRows, returned as they are)."""
        if isinstance(rows, TokenRows):
            return rows
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
        return cls(ids, lengths)

    @classmethod
    def concat(cls, parts: list[TokenRows]) -> TokenRows:
        """The rows of ``parts``, one after another."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, dtype=np.int32),
            np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        if not -len(self) <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        index %= len(self)
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    def to_lists(self) -> list[list[int]]:
        """A list of ids per row, as vLLM's requests take them."""
        ids = self.ids.tolist()
        offsets = self.offsets.tolist()
        return [ids[offsets[i] : offsets[i + 1]] for i in range(len(self))]

    def take(self, start: int, end: int) -> np.ndarray:
        """The ids of rows ``start`` .. ``end`` - 1, one flat view."""
        return self.ids[self.offsets[start] : self.offsets[end]]

    def slice(self, start: int, end: int) -> TokenRows:
        """Rows ``start`` .. ``end`` - 1, their ids a view of these."""
        return TokenRows(self.take(start, end), self.lengths[start:end])

    def rows_at(self, order: np.ndarray) -> TokenRows:
        """The rows at indices ``order``, in that order.

        >>> TokenRows.from_lists([[1, 2], [3], [4, 5, 6]]).rows_at(np.array([2, 0])).to_lists()
        [[4, 5, 6], [1, 2]]
        """
        lengths = self.lengths[order]
        starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        return TokenRows(
            self.ids[np.repeat(self.offsets[:-1][order], lengths) + row_positions(starts, lengths)], lengths
        )

    def framed(self, prefix: list[int], suffix: list[int]) -> TokenRows:
        """Each row between the ids ``prefix`` and ``suffix`` (a tokenizer's special tokens).

        >>> TokenRows.from_lists([[5, 6], []]).framed([0], [2]).to_lists()
        [[0, 5, 6, 2], [0, 2]]
        """
        lengths = self.lengths + len(prefix) + len(suffix)
        out = TokenRows(np.empty(int(lengths.sum()), dtype=np.int32), lengths)
        starts = out.offsets[:-1]
        for i, token in enumerate(prefix):
            out.ids[starts + i] = token
        out.ids[np.repeat(starts + len(prefix), self.lengths) + row_positions(self.offsets, self.lengths)] = self.ids
        for i, token in enumerate(suffix):
            out.ids[starts + len(prefix) + self.lengths + i] = token
        return out

    def truncated(self, most: int) -> TokenRows:
        """Each row cut to its first ``most`` ids.

        >>> TokenRows.from_lists([[1, 2, 3], [4], [5, 6, 7, 8]]).truncated(2).to_lists()
        [[1, 2], [4], [5, 6]]
        """
        lengths = np.minimum(self.lengths, most)
        return TokenRows(self.ids[row_positions(self.offsets, self.lengths) < most], lengths)


def row_positions(offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each token's index within its row, for rows laid end to end (``offsets``: where each starts,
    then the total).

    >>> row_positions(np.array([0, 3, 3, 5]), np.array([3, 0, 2])).tolist()
    [0, 1, 2, 0, 1]
    """
    return np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
