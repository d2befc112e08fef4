"""Idle dispatch: the same server closing a batch at once while its engine idles, and waiting
up to ``--max-batch-delay-ms`` for more rows (the behaviour before ``--idle-dispatch``).

The evidence for ``embedtext serve --idle-dispatch`` (server/batching.py). For each engine, two
servers run side by side (the tiny model, one replica each; ``dispatch``: the default,
``wait``: ``--no-idle-dispatch``), and the measurements alternate between them in rounds, so
drift on a shared machine hits both alike (an idle vLLM-CPU engine stops spinning about 1 s
after its last step; the suite pauses longer than that between servers):

  idle_dispatch_{engine}_{mode}_sequential   single-row requests one after another: the latency
                                             a point lookup (``embed_text('query')``) sees
  idle_dispatch_{engine}_{mode}_concurrent16 single-row requests, 16 in flight: moderate load
  idle_dispatch_{engine}_{mode}_{T}tok       the cpu suite's DuckDB query: full batches, where
                                             idle dispatch must cost nothing

engine: ``null`` (NULL ENGINE: vectors without a model, so what remains is the server's own work
and the delay) or ``vllm`` (vLLM-CPU). Ratios (dispatch / wait): ``idle_dispatch_p50_{engine}_sequential``
and ``..._concurrent16`` (lower is better), ``idle_dispatch_rows_per_s_{engine}_{T}tok``. Not in
the default suites (about 5 minutes at full size):

    uv run --extra cpu embedtext bench --only idle-dispatch
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import make_case
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.rounds import SETTLE_S
from embedtext.bench.servers import embedtext_server
from embedtext.connectors.client import AsyncClient

SUITE = "idle-dispatch"
MODES = (("dispatch", ("--idle-dispatch",)), ("wait", ("--no-idle-dispatch",)))
CONCURRENCY = 16


async def _single_rows(target: str, texts: Sequence[str], concurrency: int) -> tuple[list[float], float]:
    """Send each text as its own request, ``concurrency`` at a time; latencies and elapsed seconds."""
    latencies: list[float] = []
    async with AsyncClient(target, max_in_flight=max(8, concurrency)) as client:
        await client.embed(list(texts[:8]))  # connect and warm up
        pending = iter(texts)

        async def worker() -> None:
            for text in pending:
                t0 = time.perf_counter()
                await client.embed([text])
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - t0


def run_idle_dispatch(
    model_dir: Path,
    corpus: BenchCorpus,
    work: tuple[int, int],
    sequential: int,
    concurrent: int,
    *,
    rounds: int = 3,
    args: Sequence[str] = (),
    repeats: int = 1,
    progress=print,
) -> list[dict]:
    """``work``: (tokens per row, rows) of the DuckDB query; ``sequential`` / ``concurrent``:
    single-row requests per round and mode."""
    tokens, rows = work
    texts = corpus.texts(max(sequential, concurrent), tokens)
    cases = []
    for engine in ("null", "vllm"):
        progress(f"idle-dispatch: {engine} engine, servers with and without idle dispatch")
        with ExitStack() as stack:
            servers = {
                mode: stack.enter_context(
                    embedtext_server([f"tiny={model_dir}"], args=[*args, *flags, "--engine", engine])
                )
                for mode, flags in MODES
            }
            # (mode, kind) -> every latency, total seconds, total rows, rows/s of each round
            seen: dict[tuple[str, str], tuple[list[float], float, int, list[float]]] = {}
            for _ in range(rounds):
                for mode, server in servers.items():
                    for kind, n, concurrency in (
                        ("sequential", sequential, 1),
                        (f"concurrent{CONCURRENCY}", concurrent, CONCURRENCY),
                    ):
                        time.sleep(SETTLE_S)
                        latencies, elapsed = asyncio.run(_single_rows(server.target, texts[:n], concurrency))
                        old = seen.get((mode, kind), ([], 0.0, 0, []))
                        seen[(mode, kind)] = (
                            old[0] + latencies,
                            old[1] + elapsed,
                            old[2] + n,
                            old[3] + [round(n / elapsed, 1)],
                        )
            for (mode, kind), (latencies, elapsed, n, per_round) in seen.items():
                cases.append(
                    make_case(
                        f"idle_dispatch_{engine}_{mode}_{kind}",
                        SUITE,
                        rows=n,
                        seconds=elapsed,
                        tokens_per_row=tokens,
                        latencies=latencies,
                        engine=engine,
                        mode=mode,
                        kind=kind,
                        rounds=rounds,
                        rows_per_s_by_round=per_round,
                    )
                )
            for mode, server in servers.items():
                time.sleep(SETTLE_S)
                con = duckdb.connect()
                embedtext.register(con, server.target)
                load_docs(con, corpus.texts(rows, tokens))
                cases.append(
                    embed_query_case(
                        con,
                        f"idle_dispatch_{engine}_{mode}_{tokens}tok",
                        SUITE,
                        fn="embed_text",
                        source="docs",
                        rows=rows,
                        tokens_per_row=tokens,
                        server_pid=server.pid,
                        repeats=repeats,
                        engine=engine,
                        mode=mode,
                        kind=f"{tokens}tok",
                    )
                )
                con.close()
    return cases


def idle_dispatch_ratios(cases: Sequence[dict]) -> dict[str, float]:
    mine = {(c["engine"], c["mode"], c["kind"]): c for c in cases if c["suite"] == SUITE}
    ratios: dict[str, float] = {}
    for engine, mode, kind in sorted(mine):
        if mode != "dispatch" or (engine, "wait", kind) not in mine:
            continue
        new, old = mine[(engine, "dispatch", kind)], mine[(engine, "wait", kind)]
        if kind.endswith("tok"):
            ratios[f"idle_dispatch_rows_per_s_{engine}_{kind}"] = round(new["rows_per_s"] / old["rows_per_s"], 3)
        elif new.get("p50_ms") and old.get("p50_ms"):
            ratios[f"idle_dispatch_p50_{engine}_{kind}"] = round(new["p50_ms"] / old["p50_ms"], 3)
    return ratios
