"""Token-budget batching: one owner builds every batch a model's replicas run.

Requests arrive already tokenized as :class:`EmbedJob`s. The :class:`BatchQueue` cuts them into
parts that fit the token budget and closes a batch when it holds ``max_batch_tokens`` (a bulk
batch: its budget, up to ``max_bulk_batch_tokens``, which the engine runs as several steps), or
``max_batch_rows``, or when its oldest row has waited ``max_batch_delay``, whichever comes
first, or at once while the caller says an engine is idle (waiting would only add latency: the
rows that pile up while the engines are busy make the next batch anyway). A batch may mix rows
of several jobs; each job gets its own slice of the raw pooled vectors back (the runtime then
applies each request's options: server/scheduler/vectors.py).

Interactive rows are taken first and never wait for a
fuller batch, unless ``interactive_gather_s`` is set: then, while bulk work runs, the oldest waits
up to that long for others to share its engine step (``--interactive-gather-ms``); bulk rows are
shared fairly among callers: start-time fair queuing on tokens, so a
caller's share does not depend on how many rows it queued or when. A batch holds one class, and
each class's rows go as soon as they may: bulk batches keep going to their engines while queries
gather or wait for room on theirs (an interactive replica's).

The queue is bounded in rows: a job that does not fit is refused with
:class:`~embedtext.protocol.errors.OverloadedError` (RESOURCE_EXHAUSTED) instead of waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

from embedtext.protocol.errors import OverloadedError
from embedtext.server.scheduler.jobs import Batch, EmbedJob, Part

# Without room on any replica, the queue looks again this often even if nothing wakes it
# (a replica that comes back after a restart does not).
_NO_ROOM_RECHECK_S = 0.25


class BatchQueue:
    """Bounded queue of job parts; ``next_batch`` closes batches by token budget or delay."""

    def __init__(
        self,
        *,
        max_batch_tokens: int,
        max_batch_rows: int,
        max_batch_delay_s: float,
        max_queued_rows: int,
        max_bulk_batch_tokens: int | None = None,
    ) -> None:
        if max_batch_tokens <= 0 or max_batch_rows <= 0 or max_queued_rows <= 0:
            raise ValueError("batch and queue bounds must be positive")
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_rows = max_batch_rows
        self.max_batch_delay_s = max_batch_delay_s
        self.max_queued_rows = max_queued_rows
        # A bulk batch may hold several engine steps (the engine cuts it into steps of
        # max_batch_tokens): fewer, fuller batches spread the server's work per batch, and a
        # request then fits one batch whole (docs/benchmarks.md, section extension).
        self.max_bulk_batch_tokens = max(max_batch_tokens, max_bulk_batch_tokens or 0)
        # Token budget of a bulk batch; the runtime sizes it to the engines' speed (bulk turns,
        # server/pacing.py). Parts larger than it are split by rows when a batch is taken.
        self.bulk_batch_tokens = self.max_bulk_batch_tokens
        # While bulk work runs, how long the oldest interactive row may wait for others to share
        # its engine step: each step carries the model's fixed work (--interactive-gather-ms).
        self.interactive_gather_s = 0.0
        self._interactive: deque[Part] = deque()
        self._bulk: dict[str, deque[Part]] = {}  # caller -> its parts, in arrival order
        self._served: dict[str, float] = {}  # caller -> tokens taken (start-time fair queuing)
        self._clock = 0.0  # the served count of the caller taken last: where a new caller starts
        self._queued_rows = 0
        self._queued_tokens = 0
        self._queued_interactive_rows = 0
        self._queued_interactive_tokens = 0
        self._arrived = asyncio.Event()
        # Called when rows leave the queue (taken, dropped or failed): what waits for room looks again.
        self.on_rows_left: Callable[[], None] | None = None

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    @property
    def queued_tokens(self) -> int:
        return self._queued_tokens

    @property
    def queued_interactive_rows(self) -> int:
        return self._queued_interactive_rows

    @property
    def queued_bulk_rows(self) -> int:
        return self._queued_rows - self._queued_interactive_rows

    @property
    def waiting_bulk_callers(self) -> int:
        return len(self._bulk)

    def fair_position(self, caller: str) -> float:
        """Where a bulk caller stands in the fair order (lower goes first): the tokens taken for it
        while it has rows queued; a caller without any starts where the last one taken stands."""
        return self._served[caller] if caller in self._bulk else self._clock

    def tokens_before_done(self, tokens: int, caller: str = "", *, interactive: bool = False) -> int:
        """Tokens the engines take from this queue until a new job of ``tokens`` is done, if
        nothing else arrives: an interactive job's own; a bulk job's, its caller's queued ones, and
        each other bulk caller's queued tokens up to as many (fair shares serve callers equal tokens
        in turn), after the interactive ones."""
        if interactive:
            return tokens
        queued = {c: sum(p.tokens for p in q) for c, q in self._bulk.items()}
        own = queued.pop(caller, 0) + tokens
        return self._queued_interactive_tokens + own + sum(min(q, own) for q in queued.values())

    def check_room(self, rows: int, held: int = 0) -> None:
        """Raise OverloadedError (RESOURCE_EXHAUSTED) if ``rows`` more would not fit beside
        ``held`` rows admitted but not queued yet."""
        if self._queued_rows + held + rows > self.max_queued_rows:
            raise OverloadedError(
                f"the server's queue is full ({self._queued_rows + held} rows waiting, bound {self.max_queued_rows}); "
                "retry with backoff or send smaller batches"
            )

    def submit(self, job: EmbedJob) -> None:
        """Queue a job's rows, cut into parts that each fit one batch."""
        n = len(job.rows)
        self.check_room(n)
        start = 0
        parts: list[Part] = []
        most = self.max_batch_tokens if job.interactive else self.max_bulk_batch_tokens
        while start < n:
            # A row over the budget goes alone.
            stop = max(job.fit(start, n, most, self.max_batch_rows), start + 1)
            parts.append(Part(job, start, stop, job.tokens(start, stop)))
            start = stop
        job._pending_parts = len(parts)
        job_tokens = job.total_tokens
        if job.interactive:
            self._interactive.extend(parts)
            self._queued_interactive_rows += n
            self._queued_interactive_tokens += job_tokens
        else:
            if job.caller not in self._bulk:
                self._bulk[job.caller] = deque()
                self._served[job.caller] = self._clock  # no credit for the time it was away
            self._bulk[job.caller].extend(parts)
        self._queued_rows += n
        self._queued_tokens += job_tokens
        self._arrived.set()

    def wake(self) -> None:
        """Make a waiting ``next_batch`` check its closing conditions again (an engine went idle)."""
        self._arrived.set()

    def _next_queue(self, interactive: bool | None = None) -> deque[Part] | None:
        """Where the next part of a batch of this class comes from (None: either class, interactive
        first): the interactive rows, or the bulk caller served least."""
        if self._interactive and interactive is not False:
            return self._interactive
        if not self._bulk or interactive:
            return None
        caller = min(self._bulk, key=self._served.__getitem__)
        return self._bulk[caller]

    def _pop(self, queue: deque[Part], token_room: int | None = None, row_room: int | None = None) -> Part | None:
        """Take the head part, or only its first rows that fit ``token_room`` and ``row_room``
        (None if not even one does)."""
        head = queue[0]
        if (token_room is None or head.tokens <= token_room) and (
            row_room is None or head.stop - head.start <= row_room
        ):
            return self._account(queue, queue.popleft())
        stop = head.job.fit(head.start, head.stop, token_room, row_room)
        if stop == head.start:
            return None
        tokens = head.job.tokens(head.start, stop)
        queue[0] = Part(head.job, stop, head.stop, head.tokens - tokens)
        head.job._pending_parts += 1
        return self._account(queue, Part(head.job, head.start, stop, tokens))

    def _account(self, queue: deque[Part], part: Part) -> Part:
        n = part.stop - part.start
        self._queued_rows -= n
        self._queued_tokens -= part.tokens
        if part.job.interactive:
            self._queued_interactive_rows -= n
            self._queued_interactive_tokens -= part.tokens
        else:
            caller = part.job.caller
            self._clock = self._served[caller]
            self._served[caller] += part.tokens
            if not queue:
                del self._bulk[caller], self._served[caller]
        return part

    def _drop_finished(self) -> None:
        dropped = False
        for queue in (self._interactive, *list(self._bulk.values())):
            while queue and queue[0].job.done:
                self._pop(queue)
                dropped = True
        if dropped:
            self._rows_left()

    def _rows_left(self) -> None:
        if self.on_rows_left is not None:
            self.on_rows_left()

    def _oldest_bulk_enqueued_at(self) -> float:
        return min(q[0].job.enqueued_at for q in self._bulk.values())

    def _bulk_budget(self) -> int:
        return min(self.max_bulk_batch_tokens, self.bulk_batch_tokens)

    def _bulk_full(self) -> bool:
        return (
            self._queued_tokens - self._queued_interactive_tokens >= self._bulk_budget()
            or self.queued_bulk_rows >= self.max_batch_rows
        )

    async def next_batch(
        self,
        engine_idle: Callable[[], bool] | None = None,
        room: Callable[[bool], bool] | None = None,
        bulk_running: Callable[[], bool] | None = None,
    ) -> Batch:
        """Wait for rows, then close a batch of one class: interactive rows at once (or once they
        have gathered, below); bulk rows at the token budget, after the max delay, or at once while
        ``engine_idle()`` says an engine has nothing to do.

        ``room(interactive)`` says whether a replica could take a batch of that class now; without
        room its rows keep waiting (and pile up into a fuller batch). The classes do not wait for
        each other: bulk rows go while queries gather or wait for room on their own replica.
        ``bulk_running()`` says whether bulk work runs or waits: only then do interactive rows
        gather (``interactive_gather_s``)."""
        while True:
            self._drop_finished()
            if not self._queued_rows:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            waits = []
            if self._interactive:
                if (wait := self._interactive_wait(room, bulk_running)) <= 0:
                    return self._take(interactive=True)
                waits.append(wait)
            if self._bulk:
                if (wait := self._bulk_wait(engine_idle, room)) <= 0:
                    return self._take(interactive=False)
                waits.append(wait)
            await self._wait(min(waits))

    def _interactive_wait(self, room: Callable[[bool], bool] | None, bulk_running: Callable[[], bool] | None) -> float:
        """How long the interactive rows wait before their batch goes (0 or less: now)."""
        if room is not None and not room(True):
            return _NO_ROOM_RECHECK_S
        return self._gather_left(bulk_running)

    def _bulk_wait(self, engine_idle: Callable[[], bool] | None, room: Callable[[bool], bool] | None) -> float:
        """How long the bulk rows wait for a fuller batch (0 or less: their batch goes now)."""
        if room is not None and not room(False):
            return _NO_ROOM_RECHECK_S
        if self._bulk_full() or (engine_idle is not None and engine_idle()):
            return 0.0
        return self._oldest_bulk_enqueued_at() + self.max_batch_delay_s - time.monotonic()

    def _gather_left(self, bulk_running: Callable[[], bool] | None) -> float:
        """How much longer the oldest interactive row waits for others to share its step: none
        on an idle server (nothing to save), nor once a batch's rows have come, nor past half of
        what its deadline left it on arrival."""
        if not self.interactive_gather_s or self._queued_interactive_rows >= self.max_batch_rows:
            return 0.0
        if not (self.queued_bulk_rows or (bulk_running is not None and bulk_running())):
            return 0.0
        oldest = self._interactive[0].job
        gather = self.interactive_gather_s
        if oldest.deadline is not None:
            gather = min(gather, (oldest.deadline - oldest.enqueued_at) / 2)
        return oldest.enqueued_at + gather - time.monotonic()

    async def _wait(self, seconds: float) -> None:
        self._arrived.clear()
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancel that lands as rows
        # arrive, and a stopping server then waits for its dispatcher for ever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._arrived.wait()

    def _take(self, interactive: bool) -> Batch:
        """A batch of one class: no bulk rows in an interactive batch, whose caller would wait for
        all of them."""
        parts: list[Part] = []
        tokens = rows = 0
        budget = self.max_batch_tokens if interactive else self._bulk_budget()
        while (queue := self._next_queue(interactive)) is not None:
            head = queue[0]
            if head.job.done:
                self._pop(queue)
                continue
            # The first part always goes, one row at least, even over the budget.
            part = (
                self._pop(queue, max(budget - tokens, 0), self.max_batch_rows - rows)
                if parts
                else (self._pop(queue, budget, self.max_batch_rows) or self._pop(queue, None, 1))
            )
            if part is None:
                break
            parts.append(part)
            tokens += part.tokens
            rows += part.stop - part.start
            if part.stop < head.stop or tokens >= budget or rows >= self.max_batch_rows:
                break
        self._rows_left()
        return Batch(parts, tokens)

    def fail_all(self, error: BaseException) -> None:
        while (queue := self._next_queue()) is not None:
            self._pop(queue).job.fail(error)
        self._rows_left()
