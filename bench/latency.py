"""Latency under load: open-loop Poisson arrivals at fractions of each client's own closed-loop
maximum (single rows saturate far below 2048-row chunks), latency counted from the planned arrival.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from embedtext.bench.measure import make_case
from embedtext.connectors.client import AsyncClient
from embedtext.protocol.errors import EmbedTextError, OverloadedError

SUITE = "latency"
SLO_S = 0.2
CHUNK_ROWS = 2048
SINGLE_ROW_CALLERS = 256  # enough rows in flight to fill the batcher's batches


async def _closed_loop_rows_per_s(client: AsyncClient, texts: list[str]) -> float:
    await client.embed(texts[:CHUNK_ROWS])  # warm-up
    t0 = time.perf_counter()
    await client.embed(texts)
    return len(texts) / (time.perf_counter() - t0)


async def _closed_loop_single_rows_per_s(client: AsyncClient, texts: list[str], seconds: float) -> tuple[float, int]:
    """Single-row calls back to back from ``SINGLE_ROW_CALLERS`` callers for ``seconds``: (rows/s, rows)."""
    deadline = time.perf_counter() + seconds
    done = [0]

    async def caller(first: int) -> None:
        j = first
        while time.perf_counter() < deadline:
            await client.embed([texts[j % len(texts)]], timeout=60)
            done[0] += 1
            j += SINGLE_ROW_CALLERS

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(SINGLE_ROW_CALLERS)))
    return done[0] / (time.perf_counter() - t0), done[0]


async def _open_loop(client: AsyncClient, requests: list[list[str]], rate: float, seed: int) -> dict:
    """Send ``requests`` at Poisson arrivals of ``rate`` per second; never wait before sending."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    latencies: list[float] = []
    counts = {"ok_rows": 0, "errors": 0, "overloaded": 0}
    errors_by_type: dict[str, int] = {}
    done_at = [0.0]

    async def one(batch: list[str], planned: float) -> None:
        try:
            await client.embed(batch, timeout=60)
        except OverloadedError:
            counts["overloaded"] += 1
            return
        except EmbedTextError as exc:
            counts["errors"] += 1
            errors_by_type[type(exc).__name__] = errors_by_type.get(type(exc).__name__, 0) + 1
            return
        now = loop.time()
        latencies.append(now - planned)
        counts["ok_rows"] += len(batch)
        done_at[0] = max(done_at[0], now)

    start = planned = loop.time()
    tasks = []
    for batch in requests:
        planned += rng.expovariate(rate)
        delay = planned - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(batch, planned)))
    await asyncio.gather(*tasks)
    return {
        "latencies": latencies,
        "elapsed": max(done_at[0], planned) - start,
        "sent_over": planned - start,
        "errors_by_type": errors_by_type,
        **counts,
    }


async def _run(
    target: str, texts: list[str], tokens: int, loads: Sequence[float], single_s: float, chunk_requests: int
) -> list[dict]:
    cases = []
    # The single-row client must not cap its own concurrency: an SLO client sends as rows arrive.
    async with AsyncClient(target, max_batch_rows=512, max_in_flight=4096) as client:
        chunk_max = await _closed_loop_rows_per_s(client, texts[: 4 * CHUNK_ROWS])
        cases.append(
            make_case(
                f"latency_closed_loop_max_{tokens}tok",
                SUITE,
                rows=4 * CHUNK_ROWS,
                seconds=4 * CHUNK_ROWS / chunk_max,
                tokens_per_row=tokens,
                client="chunk_2048",
            )
        )
        single_max, single_rows = await _closed_loop_single_rows_per_s(client, texts, max(2.0, single_s / 2))
        cases.append(
            make_case(
                f"latency_closed_loop_max_single_row_{tokens}tok",
                SUITE,
                rows=single_rows,
                seconds=single_rows / single_max,
                tokens_per_row=tokens,
                client="single_row",
                callers=SINGLE_ROW_CALLERS,
            )
        )
        for kind, rows_per_request, max_rows_per_s in (
            ("single_row", 1, single_max),
            ("chunk_2048", CHUNK_ROWS, chunk_max),
        ):
            for i, load in enumerate(loads):
                rate = load * max_rows_per_s / rows_per_request
                n = max(20, int(rate * single_s)) if rows_per_request == 1 else chunk_requests
                requests = [
                    [texts[(j * rows_per_request + k) % len(texts)] for k in range(rows_per_request)] for j in range(n)
                ]
                r = await _open_loop(client, requests, rate, seed=i)
                over = sum(1 for x in r["latencies"] if x > SLO_S)
                cases.append(
                    make_case(
                        f"latency_{kind}_{round(load * 100)}pct",
                        SUITE,
                        rows=r["ok_rows"],
                        seconds=r["elapsed"],
                        tokens_per_row=tokens,
                        latencies=r["latencies"],
                        offered_load=load,
                        offered_requests_per_s=round(rate, 2),
                        achieved_requests_per_s=round(len(r["latencies"]) / r["elapsed"], 2) if r["elapsed"] else None,
                        requests=n,
                        share_over_200ms=round(over / len(r["latencies"]), 3) if r["latencies"] else None,
                        errors=r["errors"],
                        errors_by_type=r["errors_by_type"],
                        resource_exhausted=r["overloaded"],
                    )
                )
    return cases


def run_latency(
    target: str, texts: list[str], tokens: int, *, loads: Sequence[float], single_s: float, chunk_requests: int
) -> list[dict]:
    return asyncio.run(_run(target, texts, tokens, loads, single_s, chunk_requests))
