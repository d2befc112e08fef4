"""Least in-flight tokens routing: accounting through one context manager never drifts."""

import asyncio

from event_loop import settle

from embedtext.server.scheduler.routing import LeastInFlightTokensPolicy, Replica


def _policy(n=2, per=2):
    replicas = [Replica(index=i, backend=None, healthy=True) for i in range(n)]
    return LeastInFlightTokensPolicy(replicas, max_batches_per_replica=per), replicas


def test_picks_least_loaded_and_returns_to_zero():
    async def run():
        policy, replicas = _policy()
        async with policy.lease(100) as first:
            async with policy.lease(10) as second:
                assert first is not second
                async with policy.lease(5) as third:
                    assert third is second  # 10 < 100
        return replicas

    replicas = asyncio.run(run())
    assert [(r.inflight_tokens, r.inflight_batches) for r in replicas] == [(0, 0), (0, 0)]


def test_errors_and_cancellations_do_not_drift():
    """30 leases on 12 slots: the 10 slow ones hold theirs until cancelled, the others take turns on
    the two left. Cancelled once every lease was taken (an event, however busy the host)."""
    modes = [(7, "ok"), (3, "error"), (11, "slow"), (5, "ok"), (2, "slow"), (9, "error")] * 5
    taken = []

    async def work(policy, cost, mode, every_lease_taken):
        async with policy.lease(cost):
            taken.append(cost)
            if len(taken) == len(modes):
                every_lease_taken.set()
            await asyncio.sleep(0.01)
            if mode == "error":
                raise RuntimeError("boom")
            if mode == "slow":
                await asyncio.sleep(10)

    async def run():
        policy, replicas = _policy(n=3, per=4)
        every_lease_taken = asyncio.Event()
        tasks = [asyncio.ensure_future(work(policy, cost, mode, every_lease_taken)) for cost, mode in modes]
        await asyncio.wait_for(every_lease_taken.wait(), 60)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return replicas

    replicas = asyncio.run(run())
    assert all(r.inflight_tokens == 0 and r.inflight_batches == 0 for r in replicas)
    assert sum(r.batches_total for r in replicas) == 30


def test_unhealthy_replicas_are_skipped_and_waiters_wake():
    async def run():
        policy, (a, b) = _policy()
        a.healthy = False
        async with policy.lease(1) as r:
            assert r is b
        b.healthy = False
        waiter = asyncio.ensure_future(policy.lease(1).__aenter__())
        await settle()
        assert not waiter.done()
        a.healthy = True
        policy.changed()
        got = await asyncio.wait_for(waiter, 1)
        return got, a

    got, a = asyncio.run(run())
    assert got is a


def test_avoid_prefers_another_replica_but_falls_back():
    async def run():
        policy, (a, b) = _policy()
        async with policy.lease(1, avoid=[a]) as r:
            assert r is b
        b.healthy = False
        async with policy.lease(1, avoid=[a]) as r:
            assert r is a  # the only healthy one, even though avoided

    asyncio.run(run())


def test_room_is_bounded_per_replica():
    async def run():
        policy, _ = _policy(n=1, per=1)
        async with policy.lease(1):
            assert not policy.has_room()
            assert policy.has_room(extra=1)  # the slot an interactive batch may take
            async with policy.lease(1, extra=1):
                assert not policy.has_room(extra=1)
        assert policy.has_room()

    asyncio.run(run())


def test_any_idle_means_a_healthy_replica_with_nothing_in_flight():
    async def run():
        policy, replicas = _policy(n=2, per=2)
        seen = [policy.any_idle]
        async with policy.lease(1):
            seen.append(policy.any_idle)  # the other replica is idle
            async with policy.lease(1):
                seen.append(policy.any_idle)  # one batch on each
                replicas[0].healthy = False
        replicas[1].healthy = False
        seen.append(policy.any_idle)  # nothing in flight, but nothing healthy either
        return seen

    assert asyncio.run(run()) == [True, True, False, False]


def _with_interactive_replica(bulk=2, per=2):
    policy = LeastInFlightTokensPolicy.of_count(bulk, max_batches_per_replica=per, interactive_replicas=1)
    for replica in policy.replicas:
        replica.healthy = True
    return policy, policy.replicas


def test_each_class_runs_on_its_own_replicas():
    async def run():
        policy, replicas = _with_interactive_replica()
        query = replicas[-1]
        assert query.interactive_only and query.index == 2 and not any(r.interactive_only for r in replicas[:-1])
        bulk_got, query_got = [], []
        async with policy.lease(5, interactive=True) as r:
            query_got.append(r)
            # The interactive replica is the least loaded of the rest, yet bulk batches never go there.
            async with policy.lease(100) as a, policy.lease(100) as b, policy.lease(100) as c:
                bulk_got += [a, b, c]
            async with policy.lease(5, interactive=True) as r2:
                query_got.append(r2)  # busy, but still the queries' own
        return bulk_got, query_got, query, replicas

    bulk_got, query_got, query, replicas = asyncio.run(run())
    assert query not in bulk_got and set(bulk_got) == set(replicas[:-1])
    assert query_got == [query, query]
    assert all(r.inflight_batches == 0 for r in replicas)


def test_room_and_idleness_are_per_class():
    async def run():
        policy, replicas = _with_interactive_replica(bulk=1, per=1)
        seen = []
        async with policy.lease(100):  # the bulk replica's one slot
            seen.append((policy.has_room(), policy.has_room(interactive=True), policy.any_idle, policy.bulk_in_flight))
        async with policy.lease(5, interactive=True):
            # An interactive batch in flight leaves the bulk replica idle and with room.
            seen.append((policy.has_room(), policy.has_room(interactive=True), policy.any_idle, policy.bulk_in_flight))
        seen.append(policy.bulk_in_flight)
        return seen

    assert asyncio.run(run()) == [(False, True, False, True), (True, False, True, False), False]


def test_queries_in_flight_on_a_shared_engine_are_not_bulk_work():
    """Queries gather only while bulk work runs: on engines that run both, a query's batch in
    flight does not count as bulk work (the next query would wait for nothing)."""

    async def run():
        policy = LeastInFlightTokensPolicy.of_count(1, max_batches_per_replica=2)
        policy.replicas[0].healthy = True
        seen = []
        async with policy.lease(5, interactive=True):
            seen.append(policy.bulk_in_flight)
            async with policy.lease(100):
                seen.append(policy.bulk_in_flight)
            seen.append(policy.bulk_in_flight)
        return seen

    assert asyncio.run(run()) == [False, True, False]


def test_a_class_borrows_the_other_replicas_while_its_own_are_down():
    async def run():
        policy, replicas = _with_interactive_replica(bulk=1)
        bulk, query = replicas
        query.healthy = False  # restarting: queries run on the bulk engine meanwhile
        async with policy.lease(5, interactive=True) as r:
            got = [r]
        query.healthy, bulk.healthy = True, False  # and bulk work on the interactive one
        async with policy.lease(100) as r:
            got.append(r)
        bulk.healthy = True
        async with policy.lease(100) as r:
            got.append(r)  # back on its own
        return got, bulk, query

    got, bulk, query = asyncio.run(run())
    assert got == [bulk, query, bulk]
