"""Extension suite: the native DuckDB extension (udf/extension) against the Python Arrow UDF, the same
rows through the same server (null engine, default model), in rotating rounds; docs/benchmarks.md.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import ExitStack
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.queries import load_docs, scan_measure
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import embedtext_server

SUITE = "extension"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_extension.sh"


def extension_path() -> str:
    """EMBEDTEXT_EXTENSION, else the extension built from this checkout (scripts/build_extension.sh)."""
    path = os.environ.get("EMBEDTEXT_EXTENSION")
    if path:
        return path
    if not BUILD_SCRIPT.exists():
        raise RuntimeError("set EMBEDTEXT_EXTENSION to the extension's path (scripts/build_extension.sh builds it)")
    built = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=True)
    return built.stdout.strip().splitlines()[-1]


def run_extension(
    corpus: BenchCorpus,
    work: dict[str, tuple[tuple[int, int], ...]],
    *,
    rounds: int,
    args: tuple[str, ...] = (),
    progress=print,
) -> list[dict]:
    """``work``: server ("null" or "model") -> its (tokens per row, rows) workloads."""
    path = extension_path()
    progress(f"extension: {path}")
    cases: list[dict] = []
    with ExitStack() as stack:
        servers = {
            "null": stack.enter_context(embedtext_server(["default"], args=["--set", "engine=null"])),
            "model": stack.enter_context(embedtext_server(["default"], args=list(args))),
        }
        native = stack.enter_context(duckdb.connect(config={"allow_unsigned_extensions": "true"}))
        native.execute(f"LOAD '{path}'")
        python = stack.enter_context(duckdb.connect())

        def load(workload: Workload) -> None:
            texts = corpus.texts(workload.rows, int(workload.tokens))
            load_docs(native, texts)
            load_docs(python, texts)

        for name, server in servers.items():
            native.execute(f"SELECT embedtext_connect('{server.target}')").fetchall()
            embedtext.register(python, server.target, name=f"embed_{name}")
        for name, server in servers.items():

            def native_scan(workload: Workload, warmup: bool, target=server.target, pid=server.pid) -> dict:
                native.execute(f"SET embedtext_target = '{target}'")
                return scan_measure(native, SUITE, "embed_text", pid)(workload, warmup)

            python_scan = scan_measure(python, SUITE, f"embed_{name}", server.pid)
            paths = [
                RoundsPath("extension", f"extension_{name}", f"DuckDB extension -> {name} server", native_scan, name),
                RoundsPath("python_udf", f"python_udf_{name}", f"Python Arrow UDF -> {name} server", python_scan, name),
            ]
            ratios = [
                Ratio(f"extension_vs_udf_{name}{{suffix}}", "extension", "python_udf"),
                Ratio(f"extension_cpu_vs_udf_{name}{{suffix}}", "extension", "python_udf", "client_cpu_us_per_row"),
            ]
            workloads = [Workload(tokens, rows) for tokens, rows in work[name]]
            options = dict(suite=SUITE, rounds=rounds, ratios=ratios, load=load, progress=progress)
            cases += run_rounds(paths, workloads, **options)
    return cases
