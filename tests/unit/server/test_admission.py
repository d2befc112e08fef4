"""Refusing at once what cannot finish before its deadline: a real queue and the speed it is
read against (no engine needed; the speed is set as if measured)."""

import asyncio
import functools
import time
from pathlib import Path

import pytest

from embedtext.protocol.errors import DeadlineExceededError
from embedtext.server.config.settings import ServerConfig
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models.source import ModelSpec
from embedtext.server.pacing import EngineSpeed
from embedtext.server.scheduler.admission import Admission
from embedtext.server.scheduler.batching import BatchQueue
from embedtext.server.scheduler.jobs import EmbedJob
from embedtext.server.scheduler.tokenizing_gate import TokenizingGate

SPEED = 1000.0  # tokens/s, as if the engines had been measured


def _queue():
    return BatchQueue(max_batch_tokens=4096, max_batch_rows=1024, max_batch_delay_s=0.01, max_queued_rows=100_000)


def _submit(queue, caller, rows, tokens_per_row=10, interactive=False, deadline=None):
    job = EmbedJob(
        rows=[[1] * tokens_per_row] * rows,
        future=asyncio.get_running_loop().create_future(),
        interactive=interactive,
        caller=caller,
        deadline=deadline,
    )
    queue.submit(job)


def _busy_queue():
    """A queue with 16 bulk callers' rows, 20,000 tokens each (10 a row), and its admission."""
    queue = _queue()
    for caller in range(16):
        _submit(queue, f"busy-{caller}", 2000)
    return queue, _admission(queue)


def _admission(queue):
    spec = ModelSpec(name="m", path=Path("m"), dim=4, max_tokens=16, pooling="mean", normalize=True)
    speed = EngineSpeed()
    speed.tokens_per_s = SPEED
    return Admission(spec, ServerConfig(), queue, speed, ServerMetrics(), healthy=lambda: 1)


def test_a_bulk_job_waits_for_its_fair_share_of_the_queue():
    async def run():
        queue = _queue()
        _submit(queue, "a", 1000)  # 10,000 tokens
        _submit(queue, "b", 100)  # 1,000 tokens
        _submit(queue, "", 5, interactive=True)  # 50 tokens, served first
        # c's 2,000 tokens: a is served as many beside them, b its 1,000, the queries theirs.
        assert queue.tokens_before_done(2000, "c") == 2000 + 2000 + 1000 + 50
        # a's next 2,000 come after its 10,000 queued: b's 1,000 are all served meanwhile.
        assert queue.tokens_before_done(2000, "a") == 12_000 + 1000 + 50
        # A query waits for its own tokens.
        assert queue.tokens_before_done(10, interactive=True) == 10

    asyncio.run(run())


def test_a_bulk_request_whose_fair_share_cannot_finish_in_time_is_refused_at_once():
    async def run():
        queue, admission = _busy_queue()
        tokens = 2000  # 200 rows of 10: 2 s alone, 34 s beside the 16 callers
        now = time.monotonic()
        admission.check_deadline(tokens, False, now + 60, "new")  # 34 s of 60: admitted
        admission.check_deadline(tokens, True, now + 10, "new")  # a query's own tokens: 2 s
        with pytest.raises(DeadlineExceededError, match="refused at once") as caught:
            admission.check_deadline(tokens, False, now + 10, "new")
        message = str(caught.value)
        assert "about 34.0s of engine time (2000 tokens, and 32000 tokens of other work before or beside it" in message
        refused = admission.metrics.refusals.labels("m", "deadline")._value.get()
        assert refused == 1

    asyncio.run(run())


def test_a_bulk_request_held_before_its_tokenizer_counts_the_requests_held_before_it():
    async def run():
        now = time.monotonic()
        # Nothing queued: no estimate of its tokens, and nothing ahead of it.
        _admission(_queue()).check_deadline_before_tokenizing(200, 0, "new", now + 0.001)
        queue, admission = _busy_queue()
        gate = TokenizingGate(queue, ahead_rows=1)
        waiting = [asyncio.create_task(gate.enter(500, f"held-{i}", None)) for i in range(2)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)
        assert gate.rows_ahead("new") == 1000  # new callers go in arrival order
        # 200 rows (about 2,000 tokens) + the 16 callers' 2,000 each + 1,000 held rows: 44 s.
        admission.check_deadline_before_tokenizing(200, gate.rows_ahead("new"), "new", now + 30)
        with pytest.raises(DeadlineExceededError, match="about 44.0s of engine time") as caught:
            admission.check_deadline_before_tokenizing(200, gate.rows_ahead("new"), "new", now + 20)
        assert "about 2000 tokens, and about 42000 tokens of other work before or beside it" in str(caught.value)
        for w in waiting:
            w.cancel()

    asyncio.run(run())


def test_a_request_waiting_before_its_tokenizer_is_refused_once_its_deadline_is_out_of_reach():
    async def run():
        queue, admission = _busy_queue()
        gate = TokenizingGate(queue, ahead_rows=1)
        gate.out_of_reach = functools.partial(admission.check_deadline_before_tokenizing, waited=True)
        gate.recheck_s = 0.0
        now = time.monotonic()
        # First: 5,000 + 16 x 5,000 tokens, 85 s. Second: the same and the first's 5,000, 90 s.
        first = asyncio.create_task(gate.enter(500, "first", now + 100))
        second = asyncio.create_task(gate.enter(500, "second", now + 50))
        await asyncio.wait([second], timeout=5)
        assert gate.waiting_requests == 1 and second.done() and not first.done()
        with pytest.raises(DeadlineExceededError, match="refused while it waited to be tokenized") as caught:
            second.result()
        assert "about 90.0s of engine time" in str(caught.value)
        assert gate.held_rows == 500  # the refused request holds no place
        first.cancel()

    asyncio.run(run())
