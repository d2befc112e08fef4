"""When a bulk request is tokenized: as the engines drain the queue, not all at once on arrival.

Tokenizing takes CPU that the engines and the server's event loop share. Bulk calls that arrive
together (16 clients each sending 2,048 rows) were all tokenized at once, and the queries that
came meanwhile waited for that burst. With an interactive target, a bulk request now waits here,
ahead of the tokenizer, while the queue already holds ``ahead_rows`` bulk rows (tokenized or being
tokenized): enough to keep the engines busy. Waiting requests go in the queue's fair order, the
caller served fewest tokens first (server/scheduler/batching.py), so a caller that comes second is
not held behind the whole of the first. A request goes alone when nothing else is queued, however
large. Interactive requests never wait here. Waiting rows count against the queue bound
(``held_rows``). With ``out_of_reach`` set, waiting requests are looked at again (at most every
``recheck_s``) and one that can no longer finish before its deadline is refused then, not when
the deadline passes.

>>> import asyncio
>>> from embedtext.server.scheduler.batching import BatchQueue
>>> async def burst():
...     queue = BatchQueue(max_batch_tokens=64, max_batch_rows=8, max_batch_delay_s=0, max_queued_rows=100)
...     gate = TokenizingGate(queue, ahead_rows=4)
...     await gate.enter(6, "a", None)  # nothing queued: it goes, even over ahead_rows
...     second = asyncio.create_task(gate.enter(6, "b", None))
...     await asyncio.sleep(0)
...     waiting = (second.done(), gate.held_rows)
...     gate.leave(6)  # its rows are in the queue now (none here): room again
...     await second
...     return waiting, gate.held_rows
>>> asyncio.run(burst())
((False, 12), 6)
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from embedtext.protocol.errors import DeadlineExceededError
from embedtext.server.scheduler.batching import BatchQueue


@dataclass(eq=False)
class _Waiter:
    rows: int
    caller: str
    order: int
    deadline: float | None = None
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class TokenizingGate:
    """Holds bulk requests before their tokenizer while enough bulk rows are queued ahead."""

    def __init__(self, queue: BatchQueue, ahead_rows: int) -> None:
        if ahead_rows < 1:
            raise ValueError("ahead_rows must be at least 1")
        self.queue = queue
        self.ahead_rows = ahead_rows
        self.tokenizing_rows = 0  # let through, not yet in the queue
        self._waiters: list[_Waiter] = []
        self._order = itertools.count()
        # (rows, rows held ahead of it, caller, deadline): raises DeadlineExceededError for a
        # waiting request that can no longer finish in time (Admission.check_deadline_before_tokenizing).
        self.out_of_reach: Callable[[int, int, str, float | None], None] | None = None
        self.recheck_s = 1.0
        self._rechecked_at = float("-inf")

    @property
    def waiting_rows(self) -> int:
        return sum(w.rows for w in self._waiters)

    @property
    def waiting_requests(self) -> int:
        return len(self._waiters)

    @property
    def held_rows(self) -> int:
        """Rows of requests admitted but not queued yet: for the queue bound."""
        return self.tokenizing_rows + self.waiting_rows

    def rows_ahead(self, caller: str) -> int:
        """Rows that would be tokenized before a request of ``caller`` arriving now: those let
        through, and the waiting ones that go first in the fair order (ties: arrival)."""
        mine = self.queue.fair_position(caller)
        return self.tokenizing_rows + sum(w.rows for w in self._waiters if self.queue.fair_position(w.caller) <= mine)

    def _room(self) -> bool:
        return self.queue.queued_bulk_rows + self.tokenizing_rows < self.ahead_rows

    async def enter(self, rows: int, caller: str, deadline: float | None) -> None:
        """Wait until a bulk request of ``rows`` rows may be tokenized; ``leave(rows)`` once they
        are queued (or refused). Raises DeadlineExceededError when the deadline passes first."""
        if not self._waiters and self._room():
            self.tokenizing_rows += rows
            return
        waiter = _Waiter(rows, caller, next(self._order), deadline)
        self._waiters.append(waiter)
        self.release()
        try:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            async with asyncio.timeout(timeout):  # not wait_for: on Python 3.11 it may drop a cancel
                await asyncio.shield(waiter.future)
        except DeadlineExceededError:
            raise  # refused while it waited (``_recheck``): it holds no place any more
        except BaseException as exc:
            if waiter.future.done() and not waiter.future.cancelled():
                self.leave(rows)  # let through as it gave up: its share goes to the next
            else:
                waiter.future.cancel()
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise DeadlineExceededError(
                    "the deadline passed while the request waited for the bulk work queued ahead of it to be "
                    f"tokenized ({self.queue.queued_rows} rows queued); raise the timeout or send fewer rows"
                ) from None
            raise

    def leave(self, rows: int) -> None:
        """The rows let through are queued (or refused): the next waiters may go."""
        self.tokenizing_rows -= rows
        self.release()

    def release(self) -> None:
        """Let waiting requests go while there is room, the caller served fewest tokens first;
        call it when the queue shrinks."""
        while self._waiters and self._room():
            waiter = min(self._waiters, key=self._fair_order)
            self._waiters.remove(waiter)
            self.tokenizing_rows += waiter.rows
            waiter.future.set_result(None)
        now = time.monotonic()
        if self._waiters and self.out_of_reach is not None and now - self._rechecked_at >= self.recheck_s:
            self._rechecked_at = now
            self._recheck()

    def _fair_order(self, waiter: _Waiter) -> tuple[float, int]:
        return self.queue.fair_position(waiter.caller), waiter.order

    def _recheck(self) -> None:
        """Refuse the waiting requests that can no longer finish before their deadlines, behind
        the rows let through and the waiters that go before them."""
        ahead = self.tokenizing_rows
        for waiter in sorted(self._waiters, key=self._fair_order):
            try:
                self.out_of_reach(waiter.rows, ahead, waiter.caller, waiter.deadline)
            except DeadlineExceededError as exc:
                self._waiters.remove(waiter)
                waiter.future.set_exception(exc)
                continue
            ahead += waiter.rows
