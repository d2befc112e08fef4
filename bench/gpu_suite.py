"""GPU suite: our full path vs vLLM's HTTP/JSON server on one GPU, replicas 1..32.

Model: BERT-base with random weights in snowflake-arctic-embed-m-v1.5's shape (12 layers, 768,
12 heads, 512 tokens, CLS pooling: the same cost). Rows of 50 and 512 tokens. Per replica count:

  gpu_udf_embed_text_{T}tok_r{N}   DuckDB ``SELECT sum(embed_text(body)[1]) FROM read_parquet(...)``
                                   (row groups of 16,384 rows, so DuckDB calls the UDF from many threads)
  gpu_client_embed_{T}tok_r{N}     the Python client alone (2048-row requests, 32 in flight): shows
                                   whether DuckDB's side or the server is the limit
  gpu_vllm_http_json_{T}tok        vLLM's OpenAI server (one engine, JSON floats), the same Arrow UDF
                                   as the CPU suite's naive path

Each case also reports its share of the compute ceiling (BERT-base on an H200: 4.60M tokens/s at
50 tokens, 4.19M at 512, as published for vLLM). Targets: >= 2.3M tokens/s at 50, >= 2.1M at 512.

``--gpu-processes K`` splits each replica count over K embedtext server processes (N/K replicas and
1/K of the device memory each; cases ``..._r{N}_p{K}``); the client and DuckDB spread calls over
all of them. The servers hold no interactive target (``--interactive-slo-ms 0``): the suite is bulk
work alone, as a server that only runs indexing jobs is set up; ``--gpu-paced`` keeps the servers'
default target (20 ms on a GPU; cases ``..._paced``), as a server shared with queries runs.
Each engine lives in a worker process of its own, stepped there.

A GPU machine allows 10 minutes per command: run one replica count per command and merge:

    embedtext bench --only gpu --replicas 1 --json bench/results/gpu-r1.json
    embedtext bench --only gpu --replicas 4 --no-gpu-http --json bench/results/gpu-r4.json
    python -m embedtext.bench.report merge bench/results/gpu.json bench/results/gpu-r*.json

On a CPU, ``--gpu-model tiny --replicas 1 --rows 200`` checks the code path in a minute or two.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import embedtext
from embedtext.bench.baselines import OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.hardware import hardware_info
from embedtext.bench.measure import PeakRss, make_case, timed
from embedtext.bench.plan import GPU_REPLICAS, GeneratedModels, uneven_replica_counts
from embedtext.bench.queries import embed_query_case
from embedtext.bench.servers import embedtext_server, vllm_http_server
from embedtext.connectors.client import Client
from embedtext.server.config.resolve import CPU_MEMORY_FRACTION, GPU_MEMORY_FRACTION

SUITE = "gpu"
CEILING_TOKENS_PER_S = {50: 4.60e6, 512: 4.19e6}  # BERT-base on an H200, as published for vLLM
TOKENS = (50, 512)
ROW_GROUP = 16_384


def _rows(tokens: int, rows: int | None, quick: bool) -> int:
    if rows:
        return rows if tokens == 50 else max(64, rows // 10)
    full = {50: 400_000, 512: 40_000}[tokens]
    return full // 10 if quick else full


def _with_ceiling(case: dict, tokens: int, replicas: int | None, model: str) -> dict:
    case["replicas"] = replicas
    case["model"] = model
    if case["tokens_per_s"]:
        case["pct_of_ceiling"] = round(100 * case["tokens_per_s"] / CEILING_TOKENS_PER_S[tokens], 2)
    return case


def _client_case(target: str | list[str], texts: pa.Array, tokens: int, name: str, server_pid: int | None) -> dict:
    with Client(target, max_batch_rows=2048, max_in_flight=32) as client:
        client.embed_arrow(texts[:2048])  # warm-up
        with PeakRss({"client": os.getpid()}, {"server": server_pid}) as rss:
            seconds, _ = timed(lambda: client.embed_arrow(texts))
    return make_case(
        name,
        SUITE,
        rows=len(texts),
        seconds=seconds,
        tokens_per_row=tokens,
        peak_rss_mb=rss.peaks["client"],
        server_peak_rss_mb=round(rss.peaks.get("server", 0), 1) or None,
        path="embedtext.Client.embed_arrow (no DuckDB)",
    )


def gpu_server_args(
    replicas: int,
    processes: int,
    *,
    on_gpu: bool,
    paced: bool = False,
    engine_loop: str = "auto",
) -> tuple[str, list[str]]:
    """The case tag and ``embedtext serve`` arguments of each of ``processes`` servers that share
    ``replicas`` replicas (``processes`` at most ``replicas``, dividing it); ``engine_loop`` other
    than auto: the servers' ``--engine-loop`` (cases get ``_stepped`` or ``_packed``)."""
    tag = f"r{replicas}" + (f"_p{processes}" if processes > 1 else "")
    tag += "" if engine_loop == "auto" else f"_{engine_loop}"
    tag += "_paced" if paced else ""
    # Started one after another (vLLM profiles device memory at start); each gets 1/k of it.
    share = GPU_MEMORY_FRACTION if on_gpu else CPU_MEMORY_FRACTION
    args = ["--set", f"memory_fraction={round(share / processes, 4)}"] if processes > 1 else []
    args += ["--set", "interactive_replica=off"]  # bulk work alone: every engine runs it
    if not paced:  # bulk work alone: no query's wait to pace steps for
        args += ["--interactive-slo-ms", "0"]
    if engine_loop != "auto":
        args += ["--set", f"engine_loop={engine_loop}"]
    return tag, args


def run_gpu_suite(
    models: GeneratedModels,
    *,
    quick: bool,
    replicas: Sequence[int] = (),
    model: str = "base",
    rows: int | None = None,
    http: bool = True,
    processes: int = 1,
    paced: bool = False,
    engine_loop: str = "auto",
    progress: Callable[[str], None] = print,
) -> list[dict]:
    if model == "base":
        model_dir = models.get("bert-base", layers=12, hidden=768, heads=12, max_tokens=512, pooling="cls")
    else:
        model_dir = models.tiny()
    uneven = uneven_replica_counts(tuple(replicas), processes)
    if uneven:  # before any engine starts
        raise ValueError(f"replica counts {uneven} do not split evenly over {processes} server processes")
    on_gpu = hardware_info()["gpu"] is not None
    corpus = BenchCorpus(model_dir)
    files = {}
    for tokens in TOKENS:
        path = models.workdir / f"gpu_{tokens}.parquet"
        texts = pa.array(corpus.texts(_rows(tokens, rows, quick), tokens), pa.string())
        pq.write_table(pa.table({"body": texts}), path, row_group_size=ROW_GROUP)
        files[tokens] = (path, texts)
    gc.collect()
    cases: list[dict] = []
    for n in replicas or GPU_REPLICAS:
        k = min(processes, n)
        progress(f"gpu: embedtext server, {n} replica(s)" + (f" in {k} processes" if k > 1 else ""))
        tag, share = gpu_server_args(n, k, on_gpu=on_gpu, paced=paced, engine_loop=engine_loop)
        with ExitStack() as stack:
            servers = [
                stack.enter_context(embedtext_server([f"{model}={model_dir}"], replicas=n // k, args=share))
                for _ in range(k)
            ]
            targets = [s.target for s in servers]
            # Memory: the first server's process tree (the others hold the same).
            pid = servers[0].pid
            con = duckdb.connect()
            embedtext.register(con, targets)
            for tokens, (path, texts) in files.items():
                case = embed_query_case(
                    con,
                    f"gpu_udf_embed_text_{tokens}tok_{tag}",
                    SUITE,
                    fn="embed_text",
                    source=f"read_parquet('{path}')",
                    rows=len(texts),
                    tokens_per_row=tokens,
                    server_pid=pid,
                    processes=k,
                )
                cases.append(_with_ceiling(case, tokens, n, model))
                case = _client_case(targets, texts, tokens, f"gpu_client_embed_{tokens}tok_{tag}", pid)
                case["processes"] = k
                case["paced"] = paced
                cases.append(_with_ceiling(case, tokens, n, model))
            con.close()
    if http:
        progress("gpu: vLLM OpenAI HTTP server (JSON)")
        from embedtext.server.models.source import load_model_spec

        spec = load_model_spec(str(model_dir))
        with vllm_http_server(
            str(model_dir),
            model,
            max_tokens=spec.max_tokens,
            dtype="auto" if on_gpu else "float32",
            memory_fraction=0.9 if on_gpu else 0.2,
            on_cpu=not on_gpu,
        ) as server:
            con = duckdb.connect()
            embedder = OpenAIJsonEmbedder(server.url, model)
            register_udf(con, "http_embed", embedder, spec.dim)
            for tokens, (path, texts) in files.items():
                case = embed_query_case(
                    con,
                    f"gpu_vllm_http_json_{tokens}tok",
                    SUITE,
                    fn="http_embed",
                    source=f"read_parquet('{path}')",
                    rows=len(texts),
                    tokens_per_row=tokens,
                    server_pid=server.pid,
                )
                cases.append(_with_ceiling(case, tokens, None, model))
            embedder.close()
            con.close()
    return cases


def gpu_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Best tokens/s over replica counts per token length; vs vLLM's HTTP server."""
    mine = [c for c in cases if c["suite"] == SUITE]
    ratios: dict[str, float] = {}
    for tokens in TOKENS:
        ours = [c for c in mine if c["name"].startswith(f"gpu_udf_embed_text_{tokens}tok_") and c["tokens_per_s"]]
        if not ours:
            continue
        best = max(ours, key=lambda c: c["tokens_per_s"])
        prefix = "gpu" if best["model"] == "base" else f"gpu_{best['model']}"  # targets hold for BERT-base only
        ratios[f"{prefix}_tokens_per_s_{tokens}tok"] = best["tokens_per_s"]
        ratios[f"{prefix}_best_replicas_{tokens}tok"] = best["replicas"]
        ratios[f"{prefix}_pct_of_ceiling_{tokens}tok"] = best.get("pct_of_ceiling")
        http = next((c for c in mine if c["name"] == f"gpu_vllm_http_json_{tokens}tok"), None)
        if http and http["tokens_per_s"]:
            ratios[f"{prefix}_udf_vs_http_json_{tokens}tok"] = round(best["tokens_per_s"] / http["tokens_per_s"], 3)
    return ratios
