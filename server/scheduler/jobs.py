"""A request's rows as a job, the parts a queue cuts it into, and the batches that carry them.

A batch may mix parts of several jobs; each job gets its own slice of the raw pooled vectors back
and resolves its caller's future once every part is in (server/scheduler/batching.py builds the
batches).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

from embedtext.protocol.errors import EmbedTextError
from embedtext.server.rows import TokenRows


@dataclass(eq=False)
class EmbedJob:
    """One request's rows for one model, and the future its caller awaits."""

    rows: TokenRows  # a list of ids per row is taken too (converted)
    future: asyncio.Future
    interactive: bool = False
    caller: str = ""  # bulk jobs of one caller share one fair share
    deadline: float | None = None  # time.monotonic() seconds
    enqueued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # when its first batch reached an engine
    inference_s: float = 0.0  # engine time of the batches that carried its rows
    _pending_parts: int = 0
    _out: np.ndarray | None = None
    # What rows 0 .. i-1 cost a batch, at [i]: each row its tokens, one at least (an empty row still
    # takes a slot). The queue cuts parts by it without a Python step per row.
    token_ends: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.rows = TokenRows.from_lists(self.rows)
        self.token_ends = np.zeros(len(self.rows) + 1, dtype=np.int64)
        np.cumsum(np.maximum(self.rows.lengths, 1), out=self.token_ends[1:])

    def tokens(self, start: int, stop: int) -> int:
        """What rows ``start`` .. ``stop`` - 1 cost a batch."""
        return int(self.token_ends[stop] - self.token_ends[start])

    @property
    def total_tokens(self) -> int:
        """What all its rows cost a batch."""
        return int(self.token_ends[-1])

    def fit(self, start: int, stop: int, tokens: int | None, rows: int | None) -> int:
        """The end of the longest run of rows from ``start`` (to ``stop`` at most) within ``tokens``
        and ``rows`` (None: unbounded); ``start`` if not even one row fits."""
        end = stop if rows is None else min(stop, start + rows)
        if tokens is not None:
            limit = self.token_ends[start] + tokens
            end = min(end, int(np.searchsorted(self.token_ends, limit, side="right")) - 1)
        return max(end, start)

    @property
    def done(self) -> bool:
        return self.future.done()

    def accept(self, start: int, pooled: np.ndarray) -> None:
        """Store the pooled vectors of rows ``start:start+len(pooled)``; resolve when all are in."""
        if self.future.done():
            return
        if self._out is None and len(pooled) == len(self.rows):
            self._out = pooled  # every row in one part: its batch's vectors, not a copy of them
        else:
            if self._out is None:
                self._out = np.empty((len(self.rows), pooled.shape[1]), dtype=np.float32)
            self._out[start : start + len(pooled)] = pooled
        self._pending_parts -= 1
        if self._pending_parts == 0:
            self.future.set_result(self._out)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass(frozen=True)
class Part:
    job: EmbedJob
    start: int
    stop: int
    tokens: int


@dataclass
class Batch:
    """Rows for one engine call, and where each slice of the result goes."""

    parts: list[Part]
    tokens: int
    created_at: float = field(default_factory=time.monotonic)

    @property
    def interactive_rows(self) -> int:
        """Rows of interactive jobs; they come first in ``rows`` (the engine schedules them first)."""
        return sum(p.stop - p.start for p in self.parts if p.job.interactive)

    @property
    def rows(self) -> TokenRows:
        return TokenRows.concat([part.job.rows.slice(part.start, part.stop) for part in self.parts])

    @property
    def row_count(self) -> int:
        return sum(p.stop - p.start for p in self.parts)

    @property
    def live(self) -> bool:
        """False once every job in the batch is finished or cancelled."""
        return any(not p.job.done for p in self.parts)

    @property
    def deadline(self) -> float | None:
        """The latest deadline of its live jobs (None if any has none): the batch is worth
        running until then."""
        deadlines = [p.job.deadline for p in self.parts if not p.job.done]
        if not deadlines or any(d is None for d in deadlines):
            return None
        return max(deadlines)

    @property
    def oldest_enqueued_at(self) -> float:
        return min(p.job.enqueued_at for p in self.parts)

    def deliver(self, pooled: np.ndarray) -> None:
        offset = 0
        for part in self.parts:
            n = part.stop - part.start
            part.job.accept(part.start, pooled[offset : offset + n])
            offset += n

    def fail(self, error: EmbedTextError | BaseException) -> None:
        for part in self.parts:
            part.job.fail(error)


@dataclass
class EmbedResult:
    """What a request's caller gets back: its vectors, as the request's options shaped them, and its timings."""

    model: str
    embeddings: np.ndarray  # (count, dim) float32
    token_counts: np.ndarray  # (count,) int32
    queue_s: float
    inference_s: float
    tokenize_s: float = 0.0  # tokenizing its texts (not the wait before it while bulk work is held)
