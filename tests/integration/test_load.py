"""Load: 64 concurrent clients against the real tiny server (two replicas), loopback only.

Below the queue bound (--max-queued-rows 4096 on the test server) nothing fails; above it the
server refuses the excess with RESOURCE_EXHAUSTED and a retry hint, and the clients back off and
retry inside their deadline: a caller sees at most an error saying its deadline ran out
(OverloadedError, or DeadlineExceededError for a request admitted and then outwaited), nothing
else; server memory stays bounded. Latency percentiles are printed (and go into
the README's reliability section); they are not asserted.
"""

import asyncio
import collections
import os
import time

import numpy as np
import pytest

import embedtext
from embedtext.protocol.errors import DeadlineExceededError, EmbedTextError, OverloadedError

CLIENTS = 64
# Long enough for every client's calls to queue behind the others' many times over (EMBEDTEXT_LOAD_SECONDS: longer).
SECONDS = float(os.environ.get("EMBEDTEXT_LOAD_SECONDS", "10"))
QUEUE_BOUND = 4096  # the tiny test server's --max-queued-rows
WARM_UP_S = 5.0


def _server_rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    import psutil

    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


async def _run_load(target: str, rows_per_request: int, seconds: float, pid: int | None):
    latencies: list[float] = []
    errors: collections.Counter = collections.Counter()
    rss: list[float] = []
    stop_at = time.monotonic() + seconds

    async def one_client(i: int) -> None:
        texts = [f"client {i} asks about row {j} of the table" for j in range(rows_per_request)]
        async with embedtext.AsyncClient(target, timeout=60, max_batch_rows=rows_per_request) as client:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    vectors = await client.embed(texts)
                    assert vectors.shape == (rows_per_request, 128)
                    latencies.append(time.perf_counter() - started)
                except EmbedTextError as exc:
                    errors[type(exc).__name__] += 1
                    await asyncio.sleep(0.05)  # back off as a well-behaved client does

    async def sample_memory() -> None:
        while time.monotonic() < stop_at:
            value = _server_rss_mb(pid)
            if value is not None:
                rss.append(value)
            await asyncio.sleep(1.0)

    began = time.monotonic()
    await asyncio.gather(sample_memory(), *(one_client(i) for i in range(CLIENTS)))
    elapsed = time.monotonic() - began
    return latencies, errors, rss, elapsed


def _report(label: str, rows: int, latencies, errors, rss, elapsed) -> str:
    ms = np.array(latencies) * 1000
    return (
        f"{label}: {CLIENTS} clients x {rows} rows, {elapsed:.0f}s: "
        f"{len(ms)} ok ({len(ms) * rows / elapsed:,.0f} rows/s), "
        f"p50 {np.percentile(ms, 50):.0f} ms, p99 {np.percentile(ms, 99):.0f} ms, "
        f"over 200 ms {np.mean(ms > 200):.0%}, errors {dict(errors) or 0}, "
        f"server RSS {min(rss or [0]):,.0f}-{max(rss or [0]):,.0f} MiB"
    )


@pytest.fixture(scope="module")
def warmed(servers):
    """A few seconds of the same load first: the engines' first batches of each size take memory
    once (an engine's working set), which is not growth under load."""
    asyncio.run(_run_load(servers.tiny.target, 16, WARM_UP_S, None))


@pytest.mark.slow
@pytest.mark.usefixtures("warmed")
def test_64_clients_below_the_queue_bound_all_succeed(servers, capsys):
    rows = 16  # 64 x 16 = 1,024 rows in flight at most, a quarter of the bound
    assert CLIENTS * rows < QUEUE_BOUND
    latencies, errors, rss, elapsed = asyncio.run(_run_load(servers.tiny.target, rows, SECONDS, servers.tiny.pid))
    with capsys.disabled():
        print("\n" + _report("below the bound", rows, latencies, errors, rss, elapsed))
    assert not errors
    assert len(latencies) > CLIENTS
    if rss:
        assert max(rss) - rss[0] < 1024, f"server memory grew from {rss[0]:.0f} to {max(rss):.0f} MiB"


def _refusals(servers) -> float:
    return sum(v for k, v in servers.tiny_metrics().items() if k.startswith("embedtext_refusals_total"))


@pytest.mark.slow
@pytest.mark.usefixtures("warmed")
def test_64_clients_above_the_queue_bound_back_off_and_are_served(servers, capsys):
    rows = 128  # 64 x 128 = 8,192 rows offered, twice the bound
    assert CLIENTS * rows > QUEUE_BOUND
    refused_before = _refusals(servers)
    latencies, errors, rss, elapsed = asyncio.run(_run_load(servers.tiny.target, rows, SECONDS, servers.tiny.pid))
    with capsys.disabled():
        print("\n" + _report("above the bound", rows, latencies, errors, rss, elapsed))
    assert _refusals(servers) > refused_before  # the server did refuse: the clients retried
    # At most a deadline that ran out: refused until it could not fit (OverloadedError), or admitted
    # and then outwaited by the queue's fair share among 64 callers (DeadlineExceededError). How
    # many, depends on the host's speed; nothing else may reach a caller.
    assert set(errors) <= {OverloadedError.__name__, DeadlineExceededError.__name__}, errors
    assert latencies, "the server must keep serving the requests it admitted"
    if rss:
        assert max(rss) - rss[0] < 1024, f"server memory grew from {rss[0]:.0f} to {max(rss):.0f} MiB"
    with embedtext.Client(servers.tiny.target) as client:
        assert client.embed(["after the flood"]).shape == (1, 128)
