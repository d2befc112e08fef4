"""Token-budget batching: one owner builds every batch a model's replicas run.

Requests arrive already tokenized as :class:`EmbedJob`s. The :class:`BatchQueue` cuts them into
parts that fit the token budget and closes a batch when it holds ``max_batch_tokens`` (or
``max_batch_rows``) or when its oldest row has waited ``max_batch_delay``, whichever comes
first, or at once while the caller says an engine is idle (waiting would only add latency: the
rows that pile up while the engines are busy make the next batch anyway). A batch may mix rows
of several jobs; each job gets its own slice of the raw pooled vectors back (the runtime then
applies each request's options: server/vectors.py).

The queue is bounded in rows: a job that does not fit is refused with
:class:`~embedtext.protocol.errors.OverloadedError` (RESOURCE_EXHAUSTED) instead of waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from embedtext.protocol.errors import EmbedTextError, OverloadedError


@dataclass(eq=False)
class EmbedJob:
    """One request's rows for one model, and the future its caller awaits."""

    rows: list[list[int]]
    future: asyncio.Future
    deadline: float | None = None  # time.monotonic() seconds
    enqueued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # when its first batch reached an engine
    inference_s: float = 0.0  # engine time of the batches that carried its rows
    _pending_parts: int = 0
    _out: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return self.future.done()

    def accept(self, start: int, pooled: np.ndarray) -> None:
        """Store the pooled vectors of rows ``start:start+len(pooled)``; resolve when all are in."""
        if self.future.done():
            return
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
class _Part:
    job: EmbedJob
    start: int
    stop: int
    tokens: int


@dataclass
class Batch:
    """Rows for one engine call, and where each slice of the result goes."""

    parts: list[_Part]
    tokens: int
    created_at: float = field(default_factory=time.monotonic)

    @property
    def rows(self) -> list[list[int]]:
        out: list[list[int]] = []
        for part in self.parts:
            out.extend(part.job.rows[part.start : part.stop])
        return out

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


class BatchQueue:
    """Bounded queue of job parts; ``next_batch`` closes batches by token budget or delay."""

    def __init__(
        self,
        *,
        max_batch_tokens: int,
        max_batch_rows: int,
        max_batch_delay_s: float,
        max_queued_rows: int,
    ) -> None:
        if max_batch_tokens <= 0 or max_batch_rows <= 0 or max_queued_rows <= 0:
            raise ValueError("batch and queue bounds must be positive")
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_rows = max_batch_rows
        self.max_batch_delay_s = max_batch_delay_s
        self.max_queued_rows = max_queued_rows
        self._parts: deque[_Part] = deque()
        self._queued_rows = 0
        self._queued_tokens = 0
        self._arrived = asyncio.Event()

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def check_room(self, rows: int) -> None:
        """Raise OverloadedError (RESOURCE_EXHAUSTED) if ``rows`` more would not fit."""
        if self._queued_rows + rows > self.max_queued_rows:
            raise OverloadedError(
                f"the server's queue is full ({self._queued_rows} rows waiting, bound {self.max_queued_rows}); "
                "retry with backoff or send smaller batches"
            )

    def submit(self, job: EmbedJob) -> None:
        """Queue a job's rows, cut into parts that each fit one batch."""
        n = len(job.rows)
        self.check_room(n)
        start, tokens = 0, 0
        parts: list[_Part] = []
        for i, ids in enumerate(job.rows):
            t = max(len(ids), 1)
            if i > start and (tokens + t > self.max_batch_tokens or i - start >= self.max_batch_rows):
                parts.append(_Part(job, start, i, tokens))
                start, tokens = i, 0
            tokens += t
        if n:
            parts.append(_Part(job, start, n, tokens))
        job._pending_parts = len(parts)
        self._parts.extend(parts)
        self._queued_rows += n
        self._queued_tokens += sum(p.tokens for p in parts)
        self._arrived.set()

    def wake(self) -> None:
        """Make a waiting ``next_batch`` check its closing conditions again (an engine went idle)."""
        self._arrived.set()

    def _pop(self) -> _Part:
        part = self._parts.popleft()
        self._queued_rows -= part.stop - part.start
        self._queued_tokens -= part.tokens
        return part

    def _drop_finished(self) -> None:
        while self._parts and self._parts[0].job.done:
            self._pop()

    def _full(self) -> bool:
        return self._queued_tokens >= self.max_batch_tokens or self._queued_rows >= self.max_batch_rows

    async def next_batch(self, engine_idle: Callable[[], bool] | None = None) -> Batch:
        """Wait for rows, then close a batch at the token budget or after the max delay, or at
        once while ``engine_idle()`` says an engine has nothing to do."""
        while True:
            self._drop_finished()
            if not self._parts:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            wait = self._parts[0].job.enqueued_at + self.max_batch_delay_s - time.monotonic()
            if wait > 0 and not self._full() and not (engine_idle is not None and engine_idle()):
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), wait)
                except TimeoutError:
                    pass
                continue
            return self._take()

    def _take(self) -> Batch:
        parts: list[_Part] = []
        tokens = rows = 0
        while self._parts:
            head = self._parts[0]
            if head.job.done:
                self._pop()
                continue
            n = head.stop - head.start
            if parts and (tokens + head.tokens > self.max_batch_tokens or rows + n > self.max_batch_rows):
                break
            parts.append(self._pop())
            tokens += head.tokens
            rows += n
        return Batch(parts, tokens)

    def fail_all(self, error: BaseException) -> None:
        while self._parts:
            self._pop().job.fail(error)
