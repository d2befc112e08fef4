"""Start and supervise a model's N engines on one device.

Engines start one after another (each checks free device memory at start-up, so they must not
race), each worker loading its code (vLLM's imports) before its turn. A watchdog takes a dead
engine out of rotation at once and restarts it in the background; the router sends its retried
batches elsewhere meanwhile.

On a CPU the server is ready once one bulk engine is up (``rest_after_ready``): the others start
behind it, the interactive replica first, then the other bulk engines, one after another, each
one's worker loading its code while the engine before it starts. Their workers' vLLM imports
beside the first's would slow its start on a few cores (bench: --only startup). Until its engine
is up, queries run on the bulk engines, as while it restarts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from embedtext.server.engine.base import Backend
from embedtext.server.metrics import ServerMetrics
from embedtext.server.pacing import PaceReport
from embedtext.server.scheduler.routing import LeastInFlightTokensPolicy, Replica

log = logging.getLogger(__name__)


class ReplicaSupervisor:
    """Owns a model's replicas: start, health watch, restart, stop."""

    def __init__(
        self,
        model: str,
        router: LeastInFlightTokensPolicy,
        backend_factory: Callable[[int], Backend],
        *,
        metrics: ServerMetrics,
        watch_interval_s: float = 0.5,
        rest_after_ready: bool = False,
    ) -> None:
        self.model = model
        self._factory = backend_factory
        self._metrics = metrics
        self._watch_interval_s = watch_interval_s
        self.replicas = router.replicas
        self.policy = router
        router.on_change = self._export
        self._tasks: set[asyncio.Task] = set()
        self._restarting: set[int] = set()
        self._closed = False
        self._rest_after_ready = rest_after_ready
        self._never_up: set[int] = set()  # replicas whose engine has not been up yet
        self._first: list[Replica] | None = None  # what start() brings up (spawn_workers), and after it
        self._later: list[Replica] = []
        self.every_engine_up = asyncio.Event()

    def _export(self, replica: Replica) -> None:
        labels = (self.model, str(replica.index))
        m = self._metrics
        m.replica_inflight_tokens.labels(*labels).set(replica.inflight_tokens)
        m.replica_inflight_batches.labels(*labels).set(replica.inflight_batches)
        m.replica_healthy.labels(*labels).set(1 if replica.healthy else 0)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("supervisor task of %s failed", self.model, exc_info=t.exception())

        task.add_done_callback(done)
        return task

    async def spawn_workers(self) -> None:
        """Each replica's backend, and the workers of the engines ``start`` brings up first, spawned:
        they load their code side by side (server/engine/process_backend.py). A server of several
        models spawns every model's before it starts any engine, so that a model's worker loads its
        code while an earlier model's engine starts."""
        if self._first is not None:
            return
        for replica in self.replicas:
            replica.backend = self._factory(replica.index)  # not healthy (routed to) until started
        self._never_up = {r.index for r in self.replicas}
        first, later = self.replicas, []
        if self._rest_after_ready:
            bulk = [r for r in self.replicas if not r.interactive_only]
            first = bulk[:1]
            # The queries' engine first: until it is up, queries wait behind unpaced bulk steps.
            later = [r for r in self.replicas if r.interactive_only] + bulk[1:]
        self._first, self._later = first, later
        await asyncio.gather(*(r.backend.spawn() for r in first))

    async def start(self) -> None:
        """Start the engines; with ``rest_after_ready``, return once the first bulk engine is up,
        and start the others in the background (``every_engine_up`` is set once all have been up)."""
        await self.spawn_workers()
        # Engines start one after another.
        for replica in self._first:
            await self._start(replica)
        self._spawn(self._watch())
        if self._later:
            self._spawn(self._start_later(self._later))

    def _up(self, replica: Replica) -> None:
        replica.healthy = True
        self._export(replica)
        self.policy.changed()
        self._never_up.discard(replica.index)
        if not self._never_up:
            self.every_engine_up.set()

    async def _start(self, replica: Replica) -> None:
        await replica.backend.start()
        self._up(replica)

    async def _start_later(self, replicas: list[Replica]) -> None:
        # One worker ahead: the next engine's worker loads its code while this one's engine starts
        # (a task of the supervisor's: stop() cancels it with the others).
        ahead = self._spawn(replicas[0].backend.spawn())
        for index, replica in enumerate(replicas):
            what = "interactive requests" if replica.interactive_only else "bulk work"
            log.info("model %s: starting replica %d (%s) after the server is ready", self.model, replica.index, what)
            if not ahead.done():
                await asyncio.wait([ahead])  # a failed spawn fails the start below
            if index + 1 < len(replicas):
                ahead = self._spawn(replicas[index + 1].backend.spawn())
            try:
                await self._start(replica)
            except Exception as exc:
                log.exception("model %s replica %d failed to start", self.model, replica.index)
                self.report_dead(replica, f"its engine failed to start: {exc}")
                continue
            log.info("model %s replica %d (%s) is up", self.model, replica.index, what)

    async def _watch(self) -> None:
        while not self._closed:
            for replica in self.replicas:
                if replica.healthy and replica.backend is not None and not replica.backend.alive:
                    self.report_dead(replica, "its engine stopped")
            await asyncio.sleep(self._watch_interval_s)

    def report_dead(self, replica: Replica, why: str) -> None:
        """Take ``replica`` out of rotation and restart it in the background."""
        if self._closed or replica.index in self._restarting:
            return
        log.warning("model %s replica %d is dead (%s); restarting it", self.model, replica.index, why)
        replica.healthy = False
        self._export(replica)
        self.policy.changed()
        self._restarting.add(replica.index)
        self._spawn(self._restart(replica))

    async def _restart(self, replica: Replica) -> None:
        delay = 1.0
        try:
            old = replica.backend
            if old is not None:
                await old.stop()
            while not self._closed:
                backend = self._factory(replica.index)
                try:
                    await backend.start()
                except Exception:
                    log.exception(
                        "restarting model %s replica %d failed; retrying in %.0fs", self.model, replica.index, delay
                    )
                    await backend.stop()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 60.0)
                    continue
                replica.backend = backend
                replica.generation += 1
                replica.restarts += 1
                self._metrics.replica_restarts.labels(self.model, str(replica.index)).inc()
                self._up(replica)
                log.info("model %s replica %d is back", self.model, replica.index)
                return
        finally:
            self._restarting.discard(replica.index)

    @property
    def healthy_count(self) -> int:
        return sum(1 for r in self.replicas if r.healthy)

    @property
    def starting_count(self) -> int:
        """Replicas whose engine has not been up yet: starting behind a ready server, or retrying
        a failed first start."""
        return len(self._never_up)

    async def stop(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for replica in self.replicas:
            replica.healthy = False
        # Side by side: each worker's engine takes a second or more to shut down.
        await stop_side_by_side(r.backend.stop() for r in self.replicas if r.backend is not None)


async def stop_side_by_side(stops: Iterable[Awaitable[None]]) -> None:
    """Await every stop at once; the first failure is raised only once all have ended, so that
    no stop is left running (and then cancelled) behind it."""
    results = await asyncio.gather(*stops, return_exceptions=True)
    for failed in (r for r in results if isinstance(r, BaseException)):
        raise failed


def reported_pace(replica: Replica) -> PaceReport | None:
    """The step budget a serving replica's engine reported (None: it reports none, or is not serving)."""
    backend = replica.backend
    return backend.pace if replica.healthy and backend is not None else None
