"""Mixed workloads: single-row interactive calls while bulk clients load the same server, with
latency classes (``--scheduling classes``, the default) and without (``--scheduling fifo``, the
order before them).

Two servers run side by side on the same model, one per mode; the rounds alternate which goes
first, so drift on a shared machine hits both alike. Cases, per mode:

  mixed_{mode}_idle          interactive single rows, one after another, nothing else running
  mixed_{mode}_bulk{N}       the same probe while N clients each send 2048-row bulk calls in a loop;
                             rows/s is the bulk clients'
  mixed_{mode}_bulk{N}_alone the N bulk clients without the probe (bulk rows/s on its own)

Ratios (classes / fifo): ``mixed_interactive_p99_bulk{N}`` (lower is better; p99 over every
round's probes), ``mixed_bulk_rows_per_s`` and ``mixed_bulk_rows_per_s_alone`` (target: at least
0.95). Not in the default suites:

    uv run --extra cpu embedtext bench --only mixed
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from contextlib import ExitStack

from embedtext.bench.measure import make_case
from embedtext.bench.rounds import SETTLE_S
from embedtext.bench.servers import embedtext_server
from embedtext.connectors.client import AsyncClient

SUITE = "mixed"
MODES = ("classes", "fifo")
BULK_ROWS = 2048  # rows per bulk call: a DuckDB chunk, an indexing batch
PROBE_GAP_S = 0.05  # between interactive probes: a person's queries, not a load of their own
MIN_PROBES = 5  # per phase, even when each probe outlasts the phase


async def _load(target: str, bulk_texts: Sequence[str], probe_texts: Sequence[str], clients: int,
                seconds: float) -> tuple[list[float], int, float]:
    """``clients`` bulk loops (none if 0) and, if ``probe_texts``, one interactive prober, for
    ``seconds``; returns the probe latencies, bulk rows served and elapsed seconds."""
    stop_at = time.monotonic() + seconds
    latencies: list[float] = []
    bulk_rows = 0

    async def bulk(i: int) -> None:
        nonlocal bulk_rows
        chunk = list(bulk_texts[i % len(bulk_texts):]) + list(bulk_texts[: i % len(bulk_texts)])
        async with AsyncClient(target, timeout=600, max_batch_rows=BULK_ROWS) as client:
            while time.monotonic() < stop_at:
                served = len(await client.embed(chunk[:BULK_ROWS], latency_class="bulk"))
                bulk_rows += served  # after the await: += around it would lose other clients' rows

    async def probe() -> None:
        async with AsyncClient(target, timeout=600) as client:
            await client.embed([probe_texts[0]])  # connect; not timed
            for text in itertools.cycle(probe_texts):
                if time.monotonic() >= stop_at and len(latencies) >= MIN_PROBES:
                    return
                t0 = time.perf_counter()
                await client.embed([text])
                latencies.append(time.perf_counter() - t0)
                await asyncio.sleep(PROBE_GAP_S)

    began = time.monotonic()
    await asyncio.gather(*(bulk(i) for i in range(clients)), *([probe()] if probe_texts else []))
    return latencies, bulk_rows, time.monotonic() - began


def run_mixed(models: Sequence[str], bulk_texts: Sequence[str], probe_texts: Sequence[str], *, clients: int = 16,
              seconds: float = 20.0, rounds: int = 3, args: Sequence[str] = (), settle_s: float = SETTLE_S,
              progress=print) -> list[dict]:
    """``models``: the servers' --model arguments; ``bulk_texts``: at least BULK_ROWS texts."""
    phases = (("idle", 0, True), (f"bulk{clients}", clients, True), (f"bulk{clients}_alone", clients, False))
    seen: dict[tuple[str, str], tuple[list[float], int, float]] = {}
    with ExitStack() as stack:
        progress(f"mixed: two servers ({', '.join(MODES)}) on {models[0]}")
        servers = {mode: stack.enter_context(embedtext_server(list(models), args=[*args, "--scheduling", mode]))
                   for mode in MODES}
        for number in range(rounds):
            order = MODES if number % 2 == 0 else MODES[::-1]
            for mode in order:
                for kind, n, probing in phases:
                    time.sleep(settle_s)  # the other engine stops spinning first
                    lat, rows, elapsed = asyncio.run(_load(
                        servers[mode].target, bulk_texts, probe_texts if probing else (), n,
                        seconds / 4 if kind == "idle" else seconds))
                    old = seen.get((mode, kind), ([], 0, 0.0))
                    seen[(mode, kind)] = (old[0] + lat, old[1] + rows, old[2] + elapsed)
                    progress(f"mixed: round {number + 1} {mode} {kind}: {len(lat)} probes, {rows} bulk rows in {elapsed:.1f}s")
    return [
        make_case(f"mixed_{mode}_{kind}", SUITE, rows=rows, seconds=elapsed, tokens_per_row=None, latencies=lat,
                  mode=mode, kind=kind, probes=len(lat), bulk_clients=clients if kind != "idle" else 0, rounds=rounds)
        for (mode, kind), (lat, rows, elapsed) in sorted(seen.items())
    ]


def mixed_ratios(cases: Sequence[dict]) -> dict[str, float]:
    mine = {(c["mode"], c["kind"]): c for c in cases if c["suite"] == SUITE}
    ratios: dict[str, float] = {}
    for (mode, kind), new in sorted(mine.items()):
        old = mine.get(("fifo", kind))
        if mode != "classes" or old is None or kind == "idle":
            continue
        if kind.endswith("_alone"):
            if new["rows_per_s"] and old["rows_per_s"]:
                ratios["mixed_bulk_rows_per_s_alone"] = round(new["rows_per_s"] / old["rows_per_s"], 3)
            continue
        if new.get("p99_ms") and old.get("p99_ms"):
            ratios[f"mixed_interactive_p99_{kind}"] = round(new["p99_ms"] / old["p99_ms"], 3)
        if new["rows_per_s"] and old["rows_per_s"]:
            ratios["mixed_bulk_rows_per_s"] = round(new["rows_per_s"] / old["rows_per_s"], 3)
    return ratios
