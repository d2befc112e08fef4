"""Which replica runs a batch: least in-flight tokens, counted through one context manager.

Load is added and removed in exactly one place, :meth:`LeastInFlightTokensPolicy.lease`,
with the same cost, synchronously, so the count cannot drift on errors or cancellation.

With an interactive replica (``--interactive-replica``), each class has replicas of its own:
interactive batches go to the interactive replica, bulk batches to the others, so a query never
waits behind a bulk engine step. A class whose own replicas are all down borrows the others'.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class Replica:
    """One engine of a model and its routing state."""

    index: int
    backend: Any
    healthy: bool = False
    inflight_tokens: int = 0
    inflight_batches: int = 0
    inflight_bulk_batches: int = 0  # of those, the ones without interactive rows
    batches_total: int = 0
    restarts: int = 0
    generation: int = 0
    interactive_only: bool = False  # runs interactive batches only while a bulk replica is healthy


class LeastInFlightTokensPolicy:
    """Picks the healthy replica with the fewest tokens in flight, with room for one more batch."""

    def __init__(
        self,
        replicas: list[Replica],
        *,
        max_batches_per_replica: int = 2,
        on_change: Callable[[Replica], None] | None = None,
    ) -> None:
        self.replicas = replicas
        self.max_batches_per_replica = max_batches_per_replica
        self.on_change = on_change  # told of every replica whose load or health changed
        self._changed = asyncio.Event()

    @classmethod
    def of_count(
        cls, count: int, *, max_batches_per_replica: int = 2, interactive_replicas: int = 0
    ) -> LeastInFlightTokensPolicy:
        """A router over ``count`` replicas that have no engine yet (the supervisor starts them),
        and after them ``interactive_replicas`` that run interactive batches only."""
        if count < 1:
            raise ValueError("a model needs at least one replica")
        replicas = [Replica(index=i, backend=None) for i in range(count)]
        replicas += [Replica(index=count + i, backend=None, interactive_only=True) for i in range(interactive_replicas)]
        return cls(replicas, max_batches_per_replica=max_batches_per_replica)

    def changed(self) -> None:
        """Wake every waiter: a lease ended, or a replica's health changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _has_room(self, replica: Replica, extra: int = 0) -> bool:
        return replica.healthy and replica.inflight_batches < self.max_batches_per_replica + extra

    def _serving(self, interactive: bool) -> list[Replica]:
        """The replicas a batch of this class may run on: its class's own while one is healthy,
        else every replica (a class never waits for a restart while another class's engine runs)."""
        own = [r for r in self.replicas if r.interactive_only == interactive]
        return own if any(r.healthy for r in own) else self.replicas

    def has_room(self, extra: int = 0, interactive: bool = False) -> bool:
        """Some healthy replica could take one more batch of this class (``extra``: slots beyond
        the bound, which interactive batches may use so they do not wait behind bulk work)."""
        return any(self._has_room(r, extra) for r in self._serving(interactive))

    def pick(self, avoid: Collection[Replica] = (), extra: int = 0, interactive: bool = False) -> Replica | None:
        serving = self._serving(interactive)
        candidates = [r for r in serving if self._has_room(r, extra)]
        preferred = [r for r in candidates if r not in avoid]
        pool = preferred or ([] if any(r.healthy and r not in avoid for r in serving) else candidates)
        if not pool:
            return None
        return min(pool, key=lambda r: (r.inflight_tokens, r.inflight_batches, r.index))

    @property
    def any_idle(self) -> bool:
        """Some healthy replica that runs bulk batches has none in flight (interactive batches never wait)."""
        return any(r.healthy and r.inflight_batches == 0 for r in self._serving(False))

    @property
    def bulk_in_flight(self) -> bool:
        """Some replica has a bulk batch in flight (an engine shared with queries may run theirs too)."""
        return any(r.inflight_bulk_batches for r in self.replicas)

    def healthy_serving(self, interactive: bool = False) -> int:
        """Healthy replicas a batch of this class may run on now."""
        return sum(1 for r in self._serving(interactive) if r.healthy)

    @asynccontextmanager
    async def lease(
        self, cost: int, avoid: Collection[Replica] = (), extra: int = 0, interactive: bool = False
    ) -> AsyncIterator[Replica]:
        """Hold ``cost`` tokens on the chosen replica for the duration of the block."""
        while (replica := self.pick(avoid, extra, interactive)) is None:
            await self._changed.wait()
        bulk = 0 if interactive else 1
        replica.inflight_tokens += cost
        replica.inflight_batches += 1
        replica.inflight_bulk_batches += bulk
        replica.batches_total += 1
        self._notify(replica)
        try:
            yield replica
        finally:
            replica.inflight_tokens -= cost
            replica.inflight_batches -= 1
            replica.inflight_bulk_batches -= bulk
            self._notify(replica)
            self.changed()

    def _notify(self, replica: Replica) -> None:
        if self.on_change is not None:
            self.on_change(replica)
