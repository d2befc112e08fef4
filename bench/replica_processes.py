"""Replica processes: the same server with its replica in its own process, and in a worker process.

The evidence for ``embedtext serve --replica-processes`` (server/engine/process_backend.py). One server
per mode and engine (the tiny model, one replica; each stopped before the next starts), each
running the cpu suite's DuckDB query:

  replica_processes_{engine}_{mode}_{T}tok
      engine: ``null`` (NULL ENGINE: vectors without a model, so what remains is the server's
              own work and, with worker processes, the hand-over) or ``vllm`` (vLLM-CPU);
      mode:   ``shared`` (the replica's engine client in the server's process: ``--replica-processes
              off``, the default on a CPU) or ``processes`` (``--replica-processes on``).

Per case: rows/s, and CPU per row of the server's main thread (``server_main_thread_us_per_row``),
where its event loop runs. That one thread caps what one server process can push whatever the
engines could do (gRPC, batching, and, in ``shared`` mode, vLLM's per-row request path); the
tokenizer's Rust threads run beside it. Ratios: ``replica_processes_rows_per_s_{engine}_{T}tok``
(processes / shared) and ``replica_processes_main_thread_us_per_row_{engine}_{T}tok`` (processes /
shared, lower is better). Not in the default suites (about 5 minutes at full size):

    uv run --extra cpu embedtext bench --only replica-processes
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.servers import embedtext_server

SUITE = "replica-processes"
MODES = (("shared", ("--replica-processes", "off")), ("processes", ("--replica-processes", "on")))


def run_replica_processes(
    model_dir: Path,
    corpus: BenchCorpus,
    work: Sequence[tuple[int, int]],
    null_rows: int,
    *,
    args: Sequence[str] = (),
    repeats: int = 1,
    progress=print,
) -> list[dict]:
    cases = []
    for engine, engine_work in (("null", ((work[0][0], null_rows),)), ("vllm", tuple(work))):
        for mode, flags in MODES:
            progress(f"replica-processes: {engine} engine, {mode}, {engine_work}")
            with embedtext_server([f"tiny={model_dir}"], args=[*args, *flags, "--engine", engine]) as server:
                con = duckdb.connect()
                embedtext.register(con, server.target)
                for tokens, rows in engine_work:
                    load_docs(con, corpus.texts(rows, tokens))
                    case = embed_query_case(
                        con,
                        f"replica_processes_{engine}_{mode}_{tokens}tok",
                        SUITE,
                        fn="embed_text",
                        source="docs",
                        rows=rows,
                        tokens_per_row=tokens,
                        server_pid=server.pid,
                        repeats=repeats,
                        engine=engine,
                        mode=mode,
                    )
                    main = (case.get("cpu_s_per_run") or {}).get("server:main-thread")
                    case["server_main_thread_us_per_row"] = round(1e6 * main / rows, 1) if main else None
                    cases.append(case)
                con.close()
    return cases


def replica_processes_ratios(cases: Sequence[dict]) -> dict[str, float]:
    mine = {(c["engine"], c["mode"], c["tokens_per_row"]): c for c in cases if c["suite"] == SUITE}
    ratios: dict[str, float] = {}
    for engine, mode, tokens in sorted(mine):
        if mode != "processes" or (engine, "shared", tokens) not in mine:
            continue
        new, old = mine[(engine, "processes", tokens)], mine[(engine, "shared", tokens)]
        label = f"{engine}_{tokens:g}tok"
        ratios[f"replica_processes_rows_per_s_{label}"] = round(new["rows_per_s"] / old["rows_per_s"], 3)
        if new.get("server_main_thread_us_per_row") and old.get("server_main_thread_us_per_row"):
            ratios[f"replica_processes_main_thread_us_per_row_{label}"] = round(
                new["server_main_thread_us_per_row"] / old["server_main_thread_us_per_row"], 3
            )
    return ratios
