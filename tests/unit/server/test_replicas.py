"""ReplicaSupervisor: every replica's engine stops side by side, and on a CPU the engines after the
first bulk one start behind a ready server.

The engines are STAND-INS (the null engine with a stop that waits to be released,
``SlowStopBackend``, or a start that waits or fails, ``GatedStartBackend``), so the tests see
which stops have begun while none has finished, and what is routed where while an engine starts;
the real workers' stop is in tests/integration/test_engine_process.py, the late starts of a
real server's engines in test_interactive_replica.py and test_duckdb_udf.py (the co-deployed default).
"""

import asyncio

from event_loop import settle

from embedtext.server.engine.null_backend import NullBackend
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models.source import load_model_spec
from embedtext.server.scheduler.replicas import ReplicaSupervisor
from embedtext.server.scheduler.routing import LeastInFlightTokensPolicy


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
    """Its start waits for ``gate``, is logged in ``started``, and fails while ``failures`` lasts
    (test stand-in: an engine that takes its time to start, or fails to)."""

    def __init__(
        self, spec, index: int, gate: asyncio.Event, failures: list[int], started: list[int], entered=None
    ) -> None:
        super().__init__(spec, name=f"gated/{index}")
        self.index, self.gate, self.failures, self.started = index, gate, failures, started
        self.entered = entered  # set as its start begins to wait for the gate

    async def start(self) -> None:
        if self.entered is not None:
            self.entered.set()
        await self.gate.wait()
        self.started.append(self.index)
        if self.failures and self.failures[0] == self.index:
            self.failures.pop(0)
            raise RuntimeError("the engine would not start")
        await super().start()


def test_the_engines_after_the_first_bulk_one_may_start_behind_a_ready_server(tiny_model_dir):
    """``rest_after_ready``: start() returns once the first bulk engine is up. The interactive engine
    starts next, then the other bulk one; queries go to the bulk engine until theirs is up; a failed
    late start is retried like a dead engine; ``every_engine_up`` and ``starting_count`` say when all
    have been up."""
    spec = load_model_spec(str(tiny_model_dir), name="tiny")

    async def scenario():
        gates = {i: asyncio.Event() for i in range(3)}  # 0, 1: bulk; 2: interactive
        entered = {i: asyncio.Event() for i in range(3)}
        gates[0].set()
        failures = [2]  # the interactive engine's first start fails
        started: list[int] = []
        router = LeastInFlightTokensPolicy.of_count(2, max_batches_per_replica=2, interactive_replicas=1)
        supervisor = ReplicaSupervisor(
            "tiny",
            router,
            lambda i: GatedStartBackend(spec, i, gates[i], failures, started, entered[i]),
            metrics=ServerMetrics(),
            rest_after_ready=True,
        )

        def state():
            return (
                [r.healthy for r in supervisor.replicas],
                router.pick(interactive=True).index,
                supervisor.starting_count,
                supervisor.every_engine_up.is_set(),
            )

        await asyncio.wait_for(supervisor.start(), 10)  # waiting for the first engine only
        seen = [state()]
        gates[1].set()  # the other bulk engine could start now, but the interactive one goes first:
        await asyncio.wait_for(entered[2].wait(), 10)  # it waits at its gate
        await settle()  # anything else that could run now has run: bulk engine 1 must not have started
        seen.append(state())
        gates[2].set()
        await asyncio.wait_for(supervisor.every_engine_up.wait(), 10)  # the restart after a second
        seen.append(state())
        restarts = supervisor.replicas[2].restarts
        await supervisor.stop()
        return seen, started, failures, restarts

    seen, started, failures, restarts = asyncio.run(scenario())
    assert seen == [
        ([True, False, False], 0, 2, False),
        ([True, False, False], 0, 2, False),
        ([True, True, True], 2, 0, True),
    ]
    assert started[:3] == [0, 2, 1]  # then the failed interactive engine's restart
    assert failures == [] and restarts == 1


def test_a_server_that_starts_every_engine_first_has_none_left_to_start(tiny_model_dir):
    """Without ``rest_after_ready`` (a GPU) start() returns with every engine up."""
    spec = load_model_spec(str(tiny_model_dir), name="tiny")

    async def scenario():
        gate = asyncio.Event()
        gate.set()
        router = LeastInFlightTokensPolicy.of_count(2, max_batches_per_replica=2, interactive_replicas=1)
        started: list[int] = []
        supervisor = ReplicaSupervisor(
            "tiny", router, lambda i: GatedStartBackend(spec, i, gate, [], started), metrics=ServerMetrics()
        )
        await asyncio.wait_for(supervisor.start(), 10)
        got = [r.healthy for r in supervisor.replicas], supervisor.starting_count, supervisor.every_engine_up.is_set()
        await supervisor.stop()
        return got, started

    got, started = asyncio.run(scenario())
    assert got == ([True, True, True], 0, True)
    assert started == [0, 1, 2]


class LoggedStartBackend(NullBackend):
    """Logs its spawn, and its start's beginning and end; the start waits for its gate (test
    stand-in: a worker loading its code, then an engine taking its time to start)."""

    def __init__(self, spec, index: int, log: list[str], gates: dict[int, asyncio.Event]) -> None:
        super().__init__(spec, name=f"logged/{index}")
        self.index, self.log, self.gate = index, log, gates[index]

    async def spawn(self) -> None:
        self.log.append(f"spawn {self.index}")

    async def start(self) -> None:
        self.log.append(f"start {self.index}")
        await self.gate.wait()
        await super().start()
        self.log.append(f"up {self.index}")


def test_the_next_engines_worker_loads_its_code_while_an_engine_starts(tiny_model_dir):
    """Behind a ready server each later engine's worker is spawned while the engine before it
    starts, not after it is up; the engines themselves still start one after another. And
    ``spawn_workers`` (what a server of several models calls for each before starting any) spawns
    the first engine's worker without starting it."""
    spec = load_model_spec(str(tiny_model_dir), name="tiny")

    async def scenario():
        log: list[str] = []
        gates = {i: asyncio.Event() for i in range(3)}  # 0, 1: bulk; 2: interactive
        gates[0].set(), gates[1].set()
        router = LeastInFlightTokensPolicy.of_count(2, max_batches_per_replica=2, interactive_replicas=1)
        supervisor = ReplicaSupervisor(
            "tiny",
            router,
            lambda i: LoggedStartBackend(spec, i, log, gates),
            metrics=ServerMetrics(),
            rest_after_ready=True,
        )
        await supervisor.spawn_workers()
        spawned = list(log)
        await asyncio.wait_for(supervisor.start(), 10)
        await settle()  # the interactive engine's start waits at its gate: what can run meanwhile has run
        held = list(log)
        gates[2].set()
        await asyncio.wait_for(supervisor.every_engine_up.wait(), 10)
        await supervisor.stop()
        return spawned, held, log

    spawned, held, log = asyncio.run(scenario())
    assert spawned == ["spawn 0"]
    assert held == ["spawn 0", "start 0", "up 0", "spawn 2", "start 2", "spawn 1"]
    assert log[len(held) :] == ["up 2", "start 1", "up 1"]
