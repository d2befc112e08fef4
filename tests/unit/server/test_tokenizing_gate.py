"""The tokenizing gate on a real BatchQueue: bulk requests that arrive together are let through to
their tokenizer one after another as the queue drains, in fair order, and one that gives up
(deadline, cancelled) frees its place."""

import asyncio
import time

import pytest
from event_loop import settle

from embedtext.protocol.errors import DeadlineExceededError, OverloadedError
from embedtext.server.scheduler.batching import BatchQueue
from embedtext.server.scheduler.jobs import EmbedJob
from embedtext.server.scheduler.tokenizing_gate import TokenizingGate

ROWS = 8  # per request; 2 tokens a row


def _queue() -> BatchQueue:
    return BatchQueue(max_batch_tokens=1000, max_batch_rows=4, max_batch_delay_s=0, max_queued_rows=40)


class Requests:
    """Bulk requests as the runtime runs them: through the gate, 'tokenized', queued, then leave."""

    def __init__(self, gate: TokenizingGate) -> None:
        self.gate = gate
        self.tokenized: list[str] = []

    async def send(self, name: str, caller: str, deadline: float | None = None) -> None:
        await self.gate.enter(ROWS, caller, deadline)
        try:
            self.tokenized.append(name)
            job = EmbedJob(rows=[[1, 2]] * ROWS, future=asyncio.get_running_loop().create_future(), caller=caller)
            self.gate.queue.submit(job)
        finally:
            self.gate.leave(ROWS)


def _requests(ahead_rows: int) -> Requests:
    """A gate on a fresh queue, told when rows leave it (as the runtime wires it)."""
    queue = _queue()
    gate = TokenizingGate(queue, ahead_rows=ahead_rows)
    queue.on_rows_left = gate.release
    return Requests(gate)


async def _take(queue: BatchQueue) -> None:
    await queue.next_batch()  # 4 rows


def test_a_burst_is_tokenized_as_the_queue_drains_not_at_once():
    async def run():
        requests = _requests(ahead_rows=4)
        queue, gate = requests.gate.queue, requests.gate
        tasks = [asyncio.create_task(requests.send(n, n)) for n in ("a", "b", "c")]
        await settle()
        assert requests.tokenized == ["a"]  # alone, over ahead_rows: nothing else was queued
        assert (gate.waiting_rows, gate.waiting_requests, gate.held_rows) == (2 * ROWS, 2, 2 * ROWS)
        with pytest.raises(OverloadedError):  # the held rows count against the queue bound
            queue.check_room(40 - ROWS - 2 * ROWS + 1, held=gate.held_rows)
        await _take(queue)
        await settle()
        assert requests.tokenized == ["a"]  # 4 bulk rows still queued: enough ahead
        await _take(queue)
        await settle()
        assert requests.tokenized == ["a", "b"]
        await _take(queue)
        await _take(queue)
        await asyncio.gather(*tasks)
        assert requests.tokenized == ["a", "b", "c"] and gate.held_rows == 0

    asyncio.run(run())


def test_a_caller_that_comes_second_goes_before_the_firsts_later_requests():
    async def run():
        requests = _requests(ahead_rows=6)
        queue = requests.gate.queue
        first = [asyncio.create_task(requests.send(f"a{i}", "a")) for i in range(3)]
        await settle()
        second = asyncio.create_task(requests.send("b0", "b"))
        await settle()
        assert requests.tokenized == ["a0"]
        await _take(queue)  # a served 4 rows; 4 of its rows still queued, under 6: room for one
        await settle()
        assert requests.tokenized == ["a0", "b0"]
        while not all(t.done() for t in (*first, second)):
            await _take(queue)
            await settle()
        assert requests.tokenized == ["a0", "b0", "a1", "a2"]

    asyncio.run(run())


def test_interactive_rows_in_the_queue_do_not_hold_bulk_requests_back():
    async def run():
        requests = _requests(ahead_rows=4)
        query = EmbedJob(rows=[[1]] * 10, future=asyncio.get_running_loop().create_future(), interactive=True)
        requests.gate.queue.submit(query)
        await requests.send("bulk", "a")
        assert requests.tokenized == ["bulk"]

    asyncio.run(run())


def test_a_request_whose_deadline_passes_while_held_is_refused_and_frees_its_place():
    async def run():
        requests = _requests(ahead_rows=4)
        queue, gate = requests.gate.queue, requests.gate
        await requests.send("a", "a")
        with pytest.raises(DeadlineExceededError, match="waited for the bulk work queued ahead"):
            await requests.send("late", "b", deadline=time.monotonic() + 0.05)
        assert gate.held_rows == 0 and requests.tokenized == ["a"]
        waiting = asyncio.create_task(requests.send("c", "c"))
        await settle()
        waiting.cancel()  # the caller went away
        await asyncio.gather(waiting, return_exceptions=True)
        assert gate.held_rows == 0
        await _take(queue)
        await _take(queue)
        await requests.send("d", "d")
        assert requests.tokenized == ["a", "d"]

    asyncio.run(run())
