"""Interactive probes: single-row queries on a fixed schedule from a process of their own (as a
user's query comes from another process than a bulk job), and each one's queue and engine time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import multiprocessing
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from embedtext.bench.measure import percentiles_ms
from embedtext.connectors.client import AsyncClient
from embedtext.connectors.requests import RequestOptions, plan_text_requests

PROBE_GAP_S = 0.05  # between interactive probes' starts: a few people's queries, not a load of their own


MIN_PROBES = 5  # per phase, even when the phase is shorter


# 200 s of probes: a 2-core CPU's bulk phase runs 110-225 s (a longer one has queries for its first
# 200 s only). All may be in flight at once (a server may answer none before its bulk calls), still under
# the server's max_concurrent_rpcs (4,096) with the bulk clients' calls.
MAX_PROBES_A_PHASE = 4000


@dataclass(frozen=True)
class ProbeTime:
    """One probe's latency from its scheduled start, and the server's parts of it from its reply."""

    total_s: float
    queue_s: float | None = None  # its rows waiting for an engine (the reply's queue_time_ns)
    engine_s: float | None = None  # the engine time of the batch that carried it (inference_time_ns)

    @staticmethod
    def of(total_s: float, reply) -> ProbeTime:
        if reply is None:
            return ProbeTime(total_s)
        return ProbeTime(total_s, reply.queue_time_ns / 1e9, reply.inference_time_ns / 1e9)


PROBE_PARTS = ("queue", "engine")


def probe_figures(times: Sequence[ProbeTime]) -> dict:
    """A phase's probe figures: the latencies, and each part where every reply carried it."""
    got: dict = {"latencies": [t.total_s for t in times]}
    for part in PROBE_PARTS:
        values = [getattr(t, f"{part}_s") for t in times]
        if values and all(v is not None for v in values):
            got[f"probe_{part}"] = values
    return got


def probe_parts_ms(got: dict) -> dict[str, float]:
    """p50 and p99 of each part of the probes' time (``queue_p50_ms`` ...), where they were timed."""
    out = {}
    for part in PROBE_PARTS:
        p50, p99 = percentiles_ms(got.get(f"probe_{part}", ()))
        if p50 is not None:
            out[f"{part}_p50_ms"], out[f"{part}_p99_ms"] = p50, p99
    return out


async def send_probes(
    send: Callable[[str], Awaitable], probe_texts: Sequence[str], done: Callable[[], bool]
) -> list[ProbeTime]:
    """Single rows (``send``) one every ``PROBE_GAP_S`` until ``done()``, timed from each one's
    scheduled start. Open loop: a slow server gets the same queries and every wait is counted."""
    times: list[ProbeTime] = []

    async def probe(text: str, scheduled: float) -> None:
        reply = await send(text)
        times.append(ProbeTime.of(time.perf_counter() - scheduled, reply))

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


def _probe_request(text: str):
    """One probe's request as ``client.embed([text])`` sends it (classed interactive by its size)."""
    _, (batch,) = plan_text_requests([text], RequestOptions(), max_rows=1)
    return batch.request


async def _probing(target: str, probe_texts: Sequence[str], done: Callable[[], bool]) -> list[ProbeTime]:
    """``send_probes`` through one client that may hold them all in flight; each reply says how long
    its rows waited for an engine and how long the engine took."""
    async with AsyncClient(target, timeout=600, max_in_flight=MAX_PROBES_A_PHASE) as client:
        await client.embed([probe_texts[0]])  # connect; not timed
        return await send_probes(lambda text: client.embed_request(_probe_request(text)), probe_texts, done)


def _prober_main(conn, stop) -> None:
    """The prober process: for each (target, texts) it receives, ``_probing`` until ``stop`` is
    set, then sends back the probes' times (JSON); None ends it."""
    while (message := conn.recv_bytes()) != b"null":
        target, texts = json.loads(message)
        try:
            times = asyncio.run(_probing(target, texts, stop.is_set))
            conn.send_bytes(json.dumps([dataclasses.astuple(t) for t in times]).encode())
        except Exception as exc:  # the parent raises it
            conn.send_bytes(json.dumps(f"{type(exc).__name__}: {exc}").encode())


class Prober:
    """Sends the probes from a process of its own: in the bench's event loop and GIL, its bulk
    clients and scans made about a third of the probes' p99 on 2 cores."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._stop = context.Event()
        self._process = context.Process(target=_prober_main, args=(child, self._stop), name="embedtext-prober")
        self._process.start()
        child.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    async def probe(self, target: str, probe_texts: Sequence[str], done: Callable[[], bool]) -> list[ProbeTime]:
        self._stop.clear()
        try:
            self._conn.send_bytes(json.dumps([target, list(probe_texts)]).encode())
            while not done():
                await asyncio.sleep(PROBE_GAP_S / 5)
            self._stop.set()
            got = json.loads(await asyncio.to_thread(self._conn.recv_bytes))
        except (BrokenPipeError, EOFError):
            self._process.join(timeout=5)
            code = self._process.exitcode
            raise RuntimeError(f"the prober's process ended (exit code {code}); its error is above") from None
        if isinstance(got, str):
            raise RuntimeError(f"the prober failed: {got}")
        return [ProbeTime(*row) for row in got]

    def warm_up(self, target: str, probe_texts: Sequence[str]) -> None:
        """One untimed round (MIN_PROBES probes) to ``target``: the process's first calls cost
        seconds (the first phase of a run got 5 probes in 2 s where the next server's got 41)."""
        asyncio.run(self.probe(target, probe_texts, lambda: True))

    def close(self) -> None:
        try:
            self._conn.send_bytes(b"null")
        except OSError:
            pass  # it is gone already
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def probe_during(prober: Prober, target: str, probe_texts: Sequence[str], work) -> tuple[list[ProbeTime], object]:
    """Probe (``send_probes``, from the prober's process) until ``work`` (an awaitable) is done; its result too."""
    task = asyncio.ensure_future(work)
    times = await prober.probe(target, probe_texts, task.done)
    return times, await task
