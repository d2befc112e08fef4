"""GPU suite: our full path (DuckDB over Parquet) vs vLLM's HTTP/JSON server on one
GPU, replicas 1..32, on a BERT-base-shaped model. A GPU machine allows 10 minutes a command: run one
replica count per command and merge them (``python -m embedtext.bench.report merge``); docs/benchmarks.md.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import embedtext
from embedtext.bench.baselines import OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.hardware import hardware_info
from embedtext.bench.plan import GPU_REPLICAS, GeneratedModels
from embedtext.bench.queries import embed_query_case
from embedtext.bench.servers import embedtext_server, vllm_http_server
from embedtext.server.config.resolve import CPU_MEMORY_FRACTION, GPU_MEMORY_FRACTION

SUITE = "gpu"
CEILING_TOKENS_PER_S = {50: 4.60e6, 512: 4.19e6}  # BERT-base on an H200, as published for vLLM
TOKENS = (50, 512)
ROW_GROUP = 16_384
# vLLM's HTTP server answers about 1,000 rows/s at 50 tokens (its one API process serialising JSON,
# bench/results/gpu-headline-h200/): it scans a tenth of the rows, so it ends in a minute.
HTTP_SHARE = 10


def _rows(tokens: int, rows: int | None, quick: bool) -> int:
    if rows:
        return rows if tokens == 50 else max(64, rows // 10)
    full = {50: 400_000, 512: 40_000}[tokens]
    return full // 10 if quick else full


def gpu_model_dir(models: GeneratedModels, model: str) -> Path:
    """The suite's model: ``base`` (BERT-base's shape, snowflake-arctic-embed-m-v1.5's cost) or ``tiny``."""
    if model == "base":
        return models.get("bert-base", layers=12, hidden=768, heads=12, max_tokens=512, pooling="cls")
    return models.tiny()


def gpu_server_args(
    replicas: int,
    processes: int,
    *,
    on_gpu: bool,
    paced: bool = False,
    engine_loop: str = "auto",
    settings: Sequence[str] = (),
) -> tuple[str, list[str]]:
    """The case tag and arguments of each of ``processes`` servers sharing ``replicas`` replicas;
    ``settings`` (``NAME=VALUE``) go to the servers as ``--set`` and into the tag."""
    tag = f"r{replicas}" + (f"_p{processes}" if processes > 1 else "")
    tag += "" if engine_loop == "auto" else f"_{engine_loop}"
    tag += "_paced" if paced else ""
    tag += "".join("_" + re.sub(r"[^A-Za-z0-9]+", "_", setting) for setting in settings)
    # Started one after another (vLLM profiles device memory at start); each gets 1/k of it.
    share = GPU_MEMORY_FRACTION if on_gpu else CPU_MEMORY_FRACTION
    args = ["--set", f"memory_fraction={round(share / processes, 4)}"] if processes > 1 else []
    args += ["--set", "interactive_replica=off"]  # bulk work alone: every engine runs it
    if not paced:  # bulk work alone: no query's wait to pace steps for
        args += ["--interactive-slo-ms", "0"]
    if engine_loop != "auto":
        args += ["--set", f"engine_loop={engine_loop}"]
    for setting in settings:
        args += ["--set", setting]
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
    settings: Sequence[str] = (),
    progress: Callable[[str], None] = print,
    on_case: Callable[[list[dict]], None] = lambda so_far: None,
) -> list[dict]:
    """Each case is printed and handed to ``on_case`` when it ends, so a run cut short keeps it."""
    progress(f"gpu: model {model}, replicas {tuple(replicas) or GPU_REPLICAS}")
    model_dir = gpu_model_dir(models, model)
    on_gpu = hardware_info()["gpu"] is not None
    corpus = BenchCorpus(model_dir)
    files: dict[tuple[int, bool], tuple] = {}  # (tokens, for HTTP) -> (path, texts)
    for tokens in TOKENS:
        texts = pa.array(corpus.texts(_rows(tokens, rows, quick), tokens), pa.string())
        http_rows = max(len(texts) // HTTP_SHARE, min(len(texts), 2048))
        for http_case, part in ((False, texts), (True, texts[:http_rows])):
            path = models.workdir / f"gpu_{tokens}{'_http' if http_case else ''}.parquet"
            pq.write_table(pa.table({"body": part}), path, row_group_size=ROW_GROUP)
            files[tokens, http_case] = (path, part)
    gc.collect()
    cases: list[dict] = []

    def scan(con, name: str, fn: str, pid: int, n: int | None, tokens: int, servers=(), **extra) -> None:
        path, texts = files[tokens, n is None]
        source = f"read_parquet('{path}')"
        query = dict(fn=fn, source=source, rows=len(texts), tokens_per_row=tokens, server_pid=pid, servers=servers)
        started = time.time()  # the case's window in the GPU and host samplers' lines (bench/gpu/summarize.py)
        case = embed_query_case(con, name, SUITE, **query, **extra, replicas=n, model=model)
        case["unix_window"] = [round(started, 2), round(time.time(), 2)]
        if case["tokens_per_s"]:
            case["pct_of_ceiling"] = round(100 * case["tokens_per_s"] / CEILING_TOKENS_PER_S[tokens], 2)
        cases.append(case)
        progress(f"gpu: {name}: {case['rows_per_s'] or 0:,.0f} rows/s, {case['tokens_per_s'] or 0:,.0f} tokens/s")
        on_case(cases)

    for n in replicas or GPU_REPLICAS:
        k = min(processes, n)
        progress(f"gpu: embedtext server, {n} replica(s)" + (f" in {k} processes" if k > 1 else ""))
        tag, share = gpu_server_args(n, k, on_gpu=on_gpu, paced=paced, engine_loop=engine_loop, settings=settings)
        with ExitStack() as stack:
            servers = [
                stack.enter_context(embedtext_server([f"{model}={model_dir}"], replicas=n // k, args=share))
                for _ in range(k)
            ]
            targets = [s.target for s in servers]
            pid = servers[0].pid  # memory: the first server's process tree (the others hold the same)
            loops = engine_loops(targets)
            con = stack.enter_context(duckdb.connect())
            embedtext.register(con, targets)
            for tokens in TOKENS:
                name = f"gpu_udf_embed_text_{tokens}tok_{tag}"
                scan(con, name, "embed_text", pid, n, tokens, targets, processes=k, paced=paced, engine_loop=loops)
    if http:
        progress("gpu: vLLM OpenAI HTTP server (JSON)")
        from embedtext.server.models.source import load_model_spec

        spec = load_model_spec(str(model_dir))
        settings = dict(dtype="auto", memory_fraction=0.9) if on_gpu else dict(dtype="float32", memory_fraction=0.2)
        with ExitStack() as stack:
            server = stack.enter_context(
                vllm_http_server(str(model_dir), model, max_tokens=spec.max_tokens, on_cpu=not on_gpu, **settings)
            )
            con = stack.enter_context(duckdb.connect())
            embedder = OpenAIJsonEmbedder(server.url, model)
            stack.callback(embedder.close)
            register_udf(con, "http_embed", embedder, spec.dim)
            for tokens in TOKENS:
                scan(con, f"gpu_vllm_http_json_{tokens}tok", "http_embed", server.pid, None, tokens)
    return cases


def engine_loops(targets: Sequence[str]) -> str:
    """How the servers' engines step, as their Info says once every engine is up: "packed" only
    where each packed engine passed its start-up check (otherwise it steps vLLM's requests)."""
    loops = set()
    for target in targets:
        with embedtext.Client(target) as client:
            loops.update(client.info(refresh=True).model().engine_loop.split(","))
    return ",".join(sorted(loops))


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
