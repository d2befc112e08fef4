"""ReplicaSupervisor's stop: every replica's engine shuts down side by side.

The engines are STAND-INS (``SlowStopBackend``, the null engine with a stop that waits to be
released), so the test sees which stops have begun while none has finished; the real workers'
stop is in tests/integration/test_replica_processes.py.
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
