"""ReplicaSupervisor: every replica's engine stops side by side, and an interactive replica may start
after the others.

The engines are STAND-INS (the null engine with a stop that waits to be released,
``SlowStopBackend``, or a start that waits or fails, ``GatedStartBackend``), so the tests see
which stops have begun while none has finished, and what is routed where while an engine starts;
the real workers' stop is in tests/integration/test_replica_processes.py, a late interactive
replica's start in test_interactive_replica.py.
"""

import asyncio

from embedtext.server.engine.null_backend import NullBackend
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models import load_model_spec
from embedtext.server.replicas import ReplicaSupervisor
from embedtext.server.routing import LeastInFlightTokensPolicy


class SlowStopBackend(NullBackend):
    """Its stop waits for ``release`` (test stand-in: a worker's engine taking its time to shut down)."""

    def __init__(self, spec, index: int, log: list[str], release: asyncio.Event) -> None:
        super().__init__(spec, name=f"slow-stop/{index}")
        self.index, self.log, self.release = index, log, release

    async def stop(self) -> None:
        self.log.append(f"stop {self.index} begins")
        await self.release.wait()
        await super().stop()
        self.log.append(f"stop {self.index} ends")


def test_replicas_stop_side_by_side(tiny_model_dir):
    spec = load_model_spec(str(tiny_model_dir), name="tiny")
    log: list[str] = []

    async def scenario():
        release = asyncio.Event()
        router = LeastInFlightTokensPolicy.of_count(3, max_batches_per_replica=2)
        supervisor = ReplicaSupervisor(
            "tiny", router, lambda i: SlowStopBackend(spec, i, log, release), metrics=ServerMetrics()
        )
        await supervisor.start()
        stopping = asyncio.ensure_future(supervisor.stop())
        for _ in range(100):  # until every stop has begun, or one would have to end first
            if len(log) == 3:
                break
            await asyncio.sleep(0.01)
        begun = list(log)
        release.set()
        await asyncio.wait_for(stopping, 10)
        return begun, [r.healthy for r in supervisor.replicas]

    begun, healthy = asyncio.run(scenario())
    assert sorted(begun) == [f"stop {i} begins" for i in range(3)]  # none waited for another to end
    assert sorted(log[3:]) == [f"stop {i} ends" for i in range(3)]
    assert healthy == [False, False, False]


class GatedStartBackend(NullBackend):
    """Its start waits for ``gate`` and fails while ``failures`` lasts (test stand-in: an engine
    that takes its time to start, or fails to)."""

    def __init__(self, spec, index: int, gate: asyncio.Event, failures: list[int]) -> None:
        super().__init__(spec, name=f"gated/{index}")
        self.index, self.gate, self.failures = index, gate, failures

    async def start(self) -> None:
        await self.gate.wait()
        if self.failures and self.failures[0] == self.index:
            self.failures.pop(0)
            raise RuntimeError("the engine would not start")
        await super().start()


def test_an_interactive_replica_may_start_after_the_others(tiny_model_dir):
    """``interactive_later``: start() returns once the bulk engine is up; queries go to it until
    their own engine is up, then to theirs; a failed late start is retried like a dead engine."""
    spec = load_model_spec(str(tiny_model_dir), name="tiny")

    async def scenario():
        gates = {0: asyncio.Event(), 1: asyncio.Event()}
        gates[0].set()
        failures = [1]  # the interactive engine's first start fails
        router = LeastInFlightTokensPolicy.of_count(1, max_batches_per_replica=2, interactive_replicas=1)
        supervisor = ReplicaSupervisor(
            "tiny",
            router,
            lambda i: GatedStartBackend(spec, i, gates[i], failures),
            metrics=ServerMetrics(),
            interactive_later=True,
        )
        await asyncio.wait_for(supervisor.start(), 10)  # not waiting for the interactive engine
        seen = [([r.healthy for r in supervisor.replicas], router.pick(interactive=True).index)]
        gates[1].set()
        for _ in range(500):  # the failed start, then the restart (after a second's back-off)
            if supervisor.replicas[1].healthy:
                break
            await asyncio.sleep(0.01)
        seen.append(([r.healthy for r in supervisor.replicas], router.pick(interactive=True).index))
        restarts = supervisor.replicas[1].restarts
        await supervisor.stop()
        return seen, failures, restarts

    seen, failures, restarts = asyncio.run(scenario())
    assert seen == [([True, False], 0), ([True, True], 1)]
    assert failures == [] and restarts == 1
