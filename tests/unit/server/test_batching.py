"""Token-budget batching on real jobs (no engine needed)."""

import asyncio

import numpy as np
import pytest
from event_loop import settle
from hypothesis import given, settings
from hypothesis import strategies as st

from embedtext.protocol.errors import OverloadedError
from embedtext.server.scheduler.batching import BatchQueue
from embedtext.server.scheduler.jobs import EmbedJob
from embedtext.server.scheduler.vectors import shape_vectors


def _job(rows):
    return EmbedJob(rows=rows, future=asyncio.get_running_loop().create_future())


def _queue(**kw):
    args = dict(max_batch_tokens=10, max_batch_rows=100, max_batch_delay_s=0.05, max_queued_rows=50)
    args.update(kw)
    return BatchQueue(**args)


def test_batches_close_at_token_budget():
    async def run():
        q = _queue()
        job = _job([[1, 2, 3]] * 7)  # 21 tokens -> parts of 3 rows (9 tokens)
        q.submit(job)
        sizes = []
        for _ in range(3):
            b = await asyncio.wait_for(q.next_batch(), 1)
            sizes.append((b.row_count, b.tokens))
            b.deliver(np.tile(np.arange(4, dtype=np.float32), (b.row_count, 1)))
        assert job.future.done()
        return sizes

    assert asyncio.run(run()) == [(3, 9), (3, 9), (1, 3)]


def test_small_jobs_wait_for_delay_then_coalesce():
    async def run():
        q = _queue(max_batch_tokens=1000, max_batch_delay_s=0.1)
        a, b = _job([[1]]), _job([[2], [3]])
        q.submit(a)
        q.submit(b)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        batch = await q.next_batch()
        return batch.row_count, loop.time() - t0

    rows, waited = asyncio.run(run())
    assert rows == 3
    assert waited >= 0.08


def test_full_batch_does_not_wait_for_delay():
    async def run():
        q = _queue(max_batch_tokens=4, max_batch_delay_s=10)
        q.submit(_job([[1, 2], [3, 4]]))
        return await asyncio.wait_for(q.next_batch(), 1)

    assert asyncio.run(run()).tokens == 4


def test_queue_bound_refuses_with_overloaded():
    async def run():
        q = _queue(max_queued_rows=5)
        q.submit(_job([[1]] * 4))
        with pytest.raises(OverloadedError, match="queue is full"):
            q.submit(_job([[1]] * 2))
        assert q.queued_rows == 4

    asyncio.run(run())


def test_cancelled_jobs_are_skipped():
    async def run():
        q = _queue(max_batch_tokens=1000, max_batch_delay_s=0)
        gone, kept = _job([[1]] * 3), _job([[2]])
        q.submit(gone)
        q.submit(kept)
        gone.future.cancel()
        batch = await q.next_batch()
        return batch.row_count, q.queued_rows

    assert asyncio.run(run()) == (1, 0)


def test_each_job_gets_its_own_dims_and_normalization():
    async def run():
        q = _queue(max_batch_tokens=1000, max_batch_delay_s=0)
        cut = _job([[1]])
        raw = _job([[1]])
        q.submit(cut)
        q.submit(raw)
        batch = await q.next_batch()
        batch.deliver(np.array([[3.0, 4.0, 12.0], [3.0, 4.0, 12.0]], np.float32))
        # one batch, each job's own options applied to its own slice (as the runtime does)
        return shape_vectors(await cut.future, 2, True), shape_vectors(await raw.future, 0, False)

    cut, raw = asyncio.run(run())
    np.testing.assert_allclose(cut, [[0.6, 0.8]])
    np.testing.assert_allclose(raw, [[3.0, 4.0, 12.0]])


def test_an_idle_engine_gets_rows_at_once_instead_of_after_the_delay():
    """Idle dispatch: waiting for a fuller batch while an engine has nothing to do only adds
    latency. The delay here is 10 s, so a batch that waited for it would time out."""

    async def run():
        q = _queue(max_batch_tokens=1000, max_batch_delay_s=10)
        q.submit(_job([[1, 2]]))
        return await asyncio.wait_for(q.next_batch(engine_idle=lambda: True), 1)

    assert asyncio.run(run()).row_count == 1


def test_busy_engines_still_get_batches_filled_up_to_the_delay():
    async def run():
        q = _queue(max_batch_tokens=1000, max_batch_delay_s=10)
        q.submit(_job([[1, 2]]))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(q.next_batch(engine_idle=lambda: False), 0.2)

    asyncio.run(run())


def test_an_engine_going_idle_releases_the_waiting_rows():
    """The queue is told when a batch finishes (``wake``) and closes the waiting batch then,
    not at the end of the delay."""

    async def run():
        idle = False
        q = _queue(max_batch_tokens=1000, max_batch_delay_s=10)
        q.submit(_job([[1]]))
        q.submit(_job([[2]]))
        waiter = asyncio.ensure_future(q.next_batch(engine_idle=lambda: idle))
        await settle()
        assert not waiter.done()
        idle = True
        q.wake()
        return await asyncio.wait_for(waiter, 1)

    assert asyncio.run(run()).row_count == 2


def _classed(rows, *, interactive=False, caller=""):
    return EmbedJob(
        rows=rows, future=asyncio.get_running_loop().create_future(), interactive=interactive, caller=caller
    )


def test_interactive_rows_overtake_queued_bulk_rows_and_do_not_wait_for_the_delay():
    async def run():
        q = _queue(max_batch_tokens=100, max_batch_delay_s=60)  # room for every row in one batch
        bulk = _classed([[1]] * 8, caller="scan")
        q.submit(bulk)
        query = _classed([[7, 7]], interactive=True)
        q.submit(query)
        batch = await asyncio.wait_for(q.next_batch(), 1)  # not the 60 s delay
        return batch

    batch = asyncio.run(run())
    assert batch.interactive_rows == 1
    # alone in its batch: the engine returns a batch whole, so bulk rows in it would hold it back
    assert batch.rows.to_lists() == [[7, 7]]


def test_bulk_callers_share_by_tokens_whoever_queued_first():
    async def run():
        q = _queue(max_batch_tokens=2, max_batch_rows=100, max_batch_delay_s=0, max_queued_rows=1000)
        early = _classed([[1]] * 40, caller="early")  # queued first, and much more: 1 token a row
        q.submit(early)
        for _ in range(2):
            await q.next_batch()
        late = _classed([[2, 2]] * 5, caller="late")  # 2 tokens a row
        q.submit(late)
        tokens = {"early": 0, "late": 0}
        while not late.future.done():
            batch = await q.next_batch()
            for part in batch.parts:
                tokens[part.job.caller] += part.tokens
            batch.deliver(np.zeros((batch.row_count, 1), np.float32))
        return tokens, early.future.done()

    tokens, early_done = asyncio.run(run())
    assert not early_done  # the late caller finished while the early one still had rows waiting
    assert tokens["late"] == 10
    assert abs(tokens["early"] - tokens["late"]) <= 2  # equal shares of tokens, to one batch


def test_a_new_bulk_caller_gets_no_credit_for_the_time_it_was_away():
    async def run():
        q = _queue(max_batch_tokens=1, max_batch_delay_s=0, max_queued_rows=1000)
        q.submit(_classed([[1]] * 20, caller="a"))
        for _ in range(10):
            await q.next_batch()
        q.submit(_classed([[1]] * 20, caller="b"))
        return [(await q.next_batch()).parts[0].job.caller for _ in range(6)]

    order = asyncio.run(run())
    assert order.count("a") == 3 and order.count("b") == 3  # turns from now on, not b's 10 rows of catching up


def test_the_queue_counts_rows_per_class_and_waiting_callers():
    async def run():
        q = _queue(max_queued_rows=100, max_batch_tokens=100, max_batch_delay_s=60)
        q.submit(_classed([[1]] * 3, caller="a"))
        q.submit(_classed([[1]] * 4, caller="b"))
        q.submit(_classed([[1]] * 2, interactive=True))
        counts = (q.queued_rows, q.queued_interactive_rows, q.waiting_bulk_callers)
        await q.next_batch()  # the interactive rows, alone
        q.max_batch_delay_s = 0
        await q.next_batch()  # the bulk rows
        return counts, (q.queued_rows, q.queued_interactive_rows, q.waiting_bulk_callers)

    before, after = asyncio.run(run())
    assert before == (9, 2, 2)
    assert after == (0, 0, 0)


def test_bulk_budget_splits_parts_by_rows_and_every_row_arrives_in_order():
    """A paced bulk budget below the parts' size cuts them by rows; the job still gets every
    row's vector back in its place, and the queue's counts go back to zero."""

    async def run():
        q = _queue(max_batch_tokens=100, max_batch_rows=100, max_queued_rows=100)
        q.bulk_batch_tokens = 7
        rows = [[i] * (1 + i % 3) for i in range(10)]  # 1, 2 or 3 tokens a row: 19 tokens
        job = _job(rows)
        q.submit(job)
        batches = []
        while not job.future.done():
            b = await asyncio.wait_for(q.next_batch(), 1)
            batches.append((b.row_count, b.tokens))
            b.deliver(np.array([[r[0], 0, 0, 0] for r in b.rows], dtype=np.float32))
        return batches, job.future.result(), q.queued_rows, q.queued_tokens

    batches, vectors, queued_rows, queued_tokens = asyncio.run(run())
    assert all(tokens <= 7 for _, tokens in batches)
    assert sum(rows for rows, _ in batches) == 10 and sum(t for _, t in batches) == 19
    assert vectors[:, 0].tolist() == list(range(10))
    assert (queued_rows, queued_tokens) == (0, 0)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    max_tokens=st.integers(1, 120),
    max_rows=st.integers(1, 20),
    bulk_tokens=st.integers(1, 240),
    max_bulk_tokens=st.none() | st.integers(1, 240),
)
def test_every_cut_is_greedy_within_the_bounds_and_every_row_arrives_once_in_order(
    lengths, max_tokens, max_rows, bulk_tokens, max_bulk_tokens
):
    """Parts and batches, whatever the rows and bounds: each holds as many rows as fit (a row costs
    its tokens, one at least), never more than fit unless one row alone is over, and the rows come
    out once each, in order. A bulk job's bound is max_bulk_batch_tokens (never below
    max_batch_tokens)."""

    def cost(rows):
        return sum(max(n, 1) for n in rows)

    async def run():
        q = _queue(
            max_batch_tokens=max_tokens,
            max_batch_rows=max_rows,
            max_queued_rows=100,
            max_bulk_batch_tokens=max_bulk_tokens,
        )
        q.bulk_batch_tokens = bulk_tokens
        job = _job([[7] * n for n in lengths])
        q.submit(job)
        parts = [(p.start, p.stop, p.tokens) for p in q._bulk[job.caller]]
        batches = []
        while q.queued_rows:
            batch = await asyncio.wait_for(q.next_batch(), 1)
            batches.append((batch.parts[0].start, batch.parts[-1].stop, batch.tokens))
        return parts, batches

    parts, batches = asyncio.run(run())
    most = max(max_tokens, max_bulk_tokens or 0)
    budget = min(most, bulk_tokens)
    for cuts, tokens_bound, rows_bound in ((parts, most, max_rows), (batches, budget, max_rows)):
        assert [c[0] for c in cuts] == [0] + [c[1] for c in cuts[:-1]] and cuts[-1][1] == len(lengths)
        for start, stop, tokens in cuts:
            assert tokens == cost(lengths[start:stop])
            assert stop - start == 1 or (tokens <= tokens_bound and stop - start <= rows_bound)
            if stop < len(lengths):  # the next row would not have fit
                assert tokens + max(lengths[stop], 1) > tokens_bound or stop - start + 1 > rows_bound


def test_a_row_over_the_bulk_budget_still_goes_alone():
    async def run():
        q = _queue(max_batch_tokens=100)
        q.bulk_batch_tokens = 2
        q.submit(_job([[1, 2, 3, 4], [5]]))
        first = await asyncio.wait_for(q.next_batch(), 1)
        second = await asyncio.wait_for(q.next_batch(), 1)
        return (first.row_count, first.tokens), (second.row_count, second.tokens)

    assert asyncio.run(run()) == ((1, 4), (1, 1))


def test_the_bulk_budget_does_not_cut_interactive_batches():
    async def run():
        q = _queue(max_batch_tokens=100)
        q.bulk_batch_tokens = 2
        job = _job([[1, 2]] * 4)
        job.interactive = True
        q.submit(job)
        b = await asyncio.wait_for(q.next_batch(), 1)
        return b.row_count, b.tokens

    assert asyncio.run(run()) == (4, 8)


def test_while_bulk_work_runs_queries_gather_to_share_one_step():
    """``--interactive-gather-ms``: the first query waits (here up to a minute) for others; the
    batch closes with both once the rows of a batch have come, never with bulk rows in it."""

    async def run():
        q = _queue(max_batch_tokens=100, max_batch_rows=2, max_batch_delay_s=60)
        q.interactive_gather_s = 60.0
        q.submit(_classed([[7, 7]], interactive=True))
        waiter = asyncio.ensure_future(q.next_batch(bulk_running=lambda: True))
        await settle()
        assert not waiter.done()  # gathering
        q.submit(_classed([[8]], interactive=True))
        return await asyncio.wait_for(waiter, 5)

    batch = asyncio.run(run())
    assert batch.rows.to_lists() == [[7, 7], [8]] and batch.interactive_rows == 2


@pytest.mark.parametrize("queries_wait_for", ["gathering", "room"])
def test_bulk_batches_go_while_queries_gather_or_wait_for_room_on_their_replica(queries_wait_for):
    """With an interactive replica the classes run on different engines: bulk rows must not wait
    for the queries' gather window, nor for room on the queries' replica, or the bulk engine
    starves while queries come steadily. The queries' batch then still holds them alone."""

    async def run():
        q = _queue(max_batch_tokens=100, max_batch_rows=2, max_batch_delay_s=60)
        q.interactive_gather_s = 60.0 if queries_wait_for == "gathering" else 0.0
        query_room = queries_wait_for != "room"
        q.submit(_classed([[7]], interactive=True))
        q.submit(_classed([[1]] * 4, caller="scan"))
        room = lambda interactive: query_room if interactive else True  # noqa: E731
        taken = [await asyncio.wait_for(q.next_batch(room=room, bulk_running=lambda: True), 5) for _ in range(2)]
        assert q.queued_interactive_rows == 1  # still gathering, or still without room
        q.interactive_gather_s, query_room = 0.0, True
        taken.append(await asyncio.wait_for(q.next_batch(room=room, bulk_running=lambda: True), 5))
        return taken

    first, second, query = asyncio.run(run())
    assert (
        first.rows.to_lists() == second.rows.to_lists() == [[1], [1]]
        and first.interactive_rows == second.interactive_rows == 0
    )
    assert query.rows.to_lists() == [[7]] and query.interactive_rows == 1


@pytest.mark.parametrize("bulk_queued", [False, True])
def test_queries_gather_only_while_bulk_work_runs_or_waits(bulk_queued):
    """On an idle server a query goes at once (nothing to save); bulk rows in the queue count as
    bulk work, as do bulk batches on the engines (``bulk_running``)."""

    async def run():
        q = _queue(max_batch_tokens=100, max_batch_delay_s=60)
        q.interactive_gather_s = 60.0
        if bulk_queued:
            q.submit(_classed([[1]] * 8, caller="scan"))
        q.submit(_classed([[7]], interactive=True))
        try:
            return await asyncio.wait_for(q.next_batch(bulk_running=lambda: False), 0.5)
        except TimeoutError:
            return None

    batch = asyncio.run(run())
    assert (batch is None) is bulk_queued
    if batch is not None:
        assert batch.rows.to_lists() == [[7]]


def test_a_query_gathers_for_at_most_half_of_what_its_deadline_left_it():
    async def run():
        q = _queue(max_batch_tokens=100, max_batch_delay_s=60)
        q.interactive_gather_s = 60.0
        q.submit(_classed([[1]] * 8, caller="scan"))
        query = _classed([[7]], interactive=True)
        query.deadline = query.enqueued_at + 0.2
        q.submit(query)
        return await asyncio.wait_for(q.next_batch(bulk_running=lambda: True), 30)  # not the minute

    assert asyncio.run(run()).rows.to_lists() == [[7]]


def test_a_dispatcher_cancelled_as_rows_arrive_stops():
    """A stopping server cancels its dispatcher while it waits for a fuller batch; rows that arrive
    in the same turn of the event loop must not swallow the cancel (Python 3.11's wait_for did, and
    stop() then waited for ever)."""

    async def run():
        q = _queue(max_batch_tokens=100, max_batch_delay_s=60)
        q.submit(_classed([[1]] * 8, caller="scan"))  # too few tokens for a batch: it waits a minute
        waiting = asyncio.create_task(q.next_batch(bulk_running=lambda: True))
        await asyncio.sleep(0)
        q.submit(_classed([[2]] * 8, caller="index"))  # more rows arrive ...
        waiting.cancel()  # ... as the server stops
        async with asyncio.timeout(10):  # the old wait went on for its minute
            await waiting

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run())


def test_bulk_batches_may_hold_several_engine_steps_and_interactive_ones_one():
    """With max_bulk_batch_tokens, a bulk request goes as one batch over max_batch_tokens (the
    engine cuts it into steps); an interactive request is still cut at max_batch_tokens."""

    async def run():
        q = _queue(max_batch_tokens=10, max_bulk_batch_tokens=40, max_queued_rows=100)
        bulk = _job([[1, 2, 3]] * 10)  # 30 tokens
        query = EmbedJob(rows=[[1, 2, 3]] * 5, future=asyncio.get_running_loop().create_future(), interactive=True)
        q.submit(bulk)
        q.submit(query)
        sizes = []
        while q.queued_rows:
            b = await asyncio.wait_for(q.next_batch(), 1)
            sizes.append((b.interactive_rows, b.row_count, b.tokens))
        return sizes

    assert asyncio.run(run()) == [(3, 3, 9), (2, 2, 6), (0, 10, 30)]
