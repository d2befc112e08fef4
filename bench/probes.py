"""Interactive probes: single-row queries on a fixed schedule, from a process of their own (as a
user's query comes from another process than a bulk job)."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from embedtext.connectors.client import AsyncClient

PROBE_GAP_S = 0.05  # between interactive probes' starts: a few people's queries, not a load of their own
MIN_PROBES = 5  # per phase, even when the phase is shorter
# 200 s of probes: a 2-core CPU's bulk phase runs 110-225 s. All may be in flight at once, still
# under the server's max_concurrent_rpcs (4,096) with the bulk clients' calls.
MAX_PROBES_A_PHASE = 4000


async def send_probes(
    send: Callable[[str], Awaitable], probe_texts: Sequence[str], done: Callable[[], bool]
) -> list[float]:
    """Single rows (``send``) one every ``PROBE_GAP_S`` until ``done()``; each one's seconds from its
    scheduled start. Open loop: a slow server gets the same queries and every wait is counted."""
    times: list[float] = []

    async def probe(text: str, scheduled: float) -> None:
        await send(text)
        times.append(time.perf_counter() - scheduled)

    sent: list[asyncio.Task] = []
    start = time.perf_counter()
    for number, text in enumerate(itertools.cycle(probe_texts)):
        if (done() and number >= MIN_PROBES) or number >= MAX_PROBES_A_PHASE:
            break
        scheduled = start + number * PROBE_GAP_S
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        sent.append(asyncio.create_task(probe(text, scheduled)))
    await asyncio.gather(*sent)
    return times


async def _probing(target: str, probe_texts: Sequence[str], done: Callable[[], bool]) -> list[float]:
    """``send_probes`` through one client that may hold them all in flight (each classed
    interactive by its size, as ``client.embed([text])`` is)."""
    async with AsyncClient(target, timeout=600, max_in_flight=MAX_PROBES_A_PHASE) as client:
        await client.embed([probe_texts[0]])  # connect; not timed
        return await send_probes(lambda text: client.embed([text]), probe_texts, done)


_STOP = None  # in the prober's process: its stop event, set by the parent when a phase's work is done


def _init_prober(stop) -> None:
    global _STOP
    _STOP = stop


def _probe_phase(target: str, texts: list[str]) -> list[float]:
    """In the prober's process: ``_probing`` until the parent sets the stop event."""
    return asyncio.run(_probing(target, texts, _STOP.is_set))


class Prober:
    """Sends the probes from a process of its own: in the bench's event loop and GIL, its bulk
    clients and scans made about a third of the probes' p99 on 2 cores."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._pool = ProcessPoolExecutor(1, mp_context=context, initializer=_init_prober, initargs=(self._stop,))

    async def probe(self, target: str, probe_texts: Sequence[str], done: Callable[[], bool]) -> list[float]:
        self._stop.clear()
        probing = asyncio.wrap_future(self._pool.submit(_probe_phase, target, list(probe_texts)))
        while not done() and not probing.done():
            await asyncio.sleep(PROBE_GAP_S / 5)
        self._stop.set()
        return await probing  # the prober's error, if it failed

    def warm_up(self, target: str, probe_texts: Sequence[str]) -> None:
        """One untimed round (MIN_PROBES probes): the process's first calls cost seconds."""
        asyncio.run(self.probe(target, probe_texts, lambda: True))

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(cancel_futures=True)


async def probe_during(prober: Prober, target: str, probe_texts: Sequence[str], work) -> tuple[list[float], object]:
    """Probe (from the prober's process) until ``work`` (an awaitable) is done; its result too."""
    task = asyncio.ensure_future(work)
    times = await prober.probe(target, probe_texts, task.done)
    return times, await task
