"""The bulk work of the mixed suite's phases: bulk callers in a loop, DuckDB scans, a flood of callers."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence

from embedtext.bench.probes import Prober
from embedtext.connectors.client import AsyncClient
from embedtext.protocol.errors import EmbedTextError

BULK_ROWS = 2048  # rows per bulk call: a DuckDB chunk, an indexing batch
SCAN_SQL = "CREATE TABLE v AS SELECT id, embed_text(body) AS v FROM docs"


async def probed_load(
    target: str, bulk_texts: Sequence[str], probe_texts: Sequence[str], clients: int, seconds: float, prober: Prober
) -> tuple[list[float], int, float]:
    """``clients`` bulk loops that start calls for ``seconds``, probed (if ``probe_texts``) until the
    last bulk call ends: on 2 cores one round of calls outlasts ``seconds``. Returns the probes'
    times, bulk rows served and the loops' elapsed seconds."""
    stop_at = time.monotonic() + seconds
    bulk_rows = 0

    async def bulk(i: int) -> None:
        nonlocal bulk_rows
        chunk = list(bulk_texts[i % len(bulk_texts) :]) + list(bulk_texts[: i % len(bulk_texts)])
        async with AsyncClient(target, timeout=600, max_batch_rows=BULK_ROWS) as client:
            while time.monotonic() < stop_at:
                served = len(await client.embed(chunk[:BULK_ROWS], latency_class="bulk"))
                bulk_rows += served  # after the await: += around it would lose other clients' rows

    async def loads() -> float:
        began = time.monotonic()
        await asyncio.gather(*(bulk(i) for i in range(clients)))
        return time.monotonic() - began

    loading = asyncio.ensure_future(loads())

    def done() -> bool:
        return loading.done() if clients else time.monotonic() >= stop_at

    probing = asyncio.create_task(prober.probe(target, probe_texts, done)) if probe_texts else None
    elapsed = await loading
    times = await probing if probing else []
    return times, bulk_rows, elapsed


def scan_seconds(target: str, texts: Sequence[str]) -> float:
    """One DuckDB scan of ``texts`` through ``embed_text``, as a user writes it; its seconds."""
    import duckdb

    import embedtext
    from embedtext.bench.queries import load_docs

    with duckdb.connect() as con:
        load_docs(con, list(texts))
        embedtext.register(con, target)
        started = time.perf_counter()
        con.execute(SCAN_SQL).fetchall()
        seconds = time.perf_counter() - started
        assert con.execute("SELECT count(*) FROM v WHERE v IS NOT NULL").fetchall()[0][0] == len(texts)
        return seconds


async def warm_up(target: str, bulk_texts: Sequence[str]) -> float:
    """One untimed bulk call: a paced engine sizes its steps cautiously until it has timed bulk work."""
    began = time.monotonic()
    async with AsyncClient(target, timeout=600, max_batch_rows=BULK_ROWS) as client:
        await client.embed(list(bulk_texts), latency_class="bulk")
    return time.monotonic() - began


async def flood_calls(target: str, texts: Sequence[str], clients: int, seconds: float) -> dict:
    """``clients`` loops of embed(2048 rows) for ``seconds`` (each call ends, however long it
    takes); the callers' view: calls served, calls failed, rows lost, by error type."""
    stop_at = time.monotonic() + seconds
    served = [0]
    errors: Counter[str] = Counter()
    first_errors: dict[str, str] = {}  # each type's first message: where the calls failed

    async def caller() -> None:
        async with AsyncClient(target, max_batch_rows=BULK_ROWS) as client:  # the default deadline
            while time.monotonic() < stop_at:
                try:
                    await client.embed(texts[:BULK_ROWS])
                    served[0] += 1
                except EmbedTextError as exc:
                    errors[type(exc).__name__] += 1
                    first_errors.setdefault(type(exc).__name__, exc.message)  # without the socket path

    began = time.monotonic()
    await asyncio.gather(*(caller() for _ in range(clients)))
    failed = sum(errors.values())
    calls = {"served_calls": served[0], "failed_calls": failed, "rows_lost": failed * BULK_ROWS}
    rows = {"rows": served[0] * BULK_ROWS, "seconds": time.monotonic() - began}
    return calls | rows | {"errors": dict(errors), "first_errors": first_errors}
