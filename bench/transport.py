"""Transport suite, NULL ENGINE: what the wire format and the server cost with the model taken out
(raw bytes vs protobuf repeated float vs JSON); docs/benchmarks.md."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.baselines import OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.queries import load_docs, scan_measure
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import embedtext_server, null_json_server
from embedtext.connectors.client import Client

SUITE = "transport"
HEADLINE_DIM = 768
_REPLIES = (("bytes", "float32"), ("repeated_float", "float32-repeated"))
# label -> (case prefix, what it runs)
PATHS = {
    "bytes": ("null_engine_udf_bytes", "embed_text -> gRPC float32 reply (NULL ENGINE)"),
    "repeated_float": ("null_engine_udf_repeated_float", "embed_text -> gRPC float32-repeated reply (NULL ENGINE)"),
    "http_json": ("null_engine_http_json", "Arrow UDF -> OpenAI-format JSON HTTP (NULL ENGINE)"),
}


def run_transport(models: dict[int, Path], rows: int, tokens: int, *, rounds: int = 3, progress=print) -> list[dict]:
    """``models``: dim -> generated model dir; each dim a workload. No path has a vLLM engine polling
    after its runs, so none waits for another to settle (one engine name for all)."""
    corpus = BenchCorpus(next(iter(models.values())))  # the generated models share one vocabulary
    with ExitStack() as stack:
        con = stack.enter_context(duckdb.connect())
        load_docs(con, corpus.texts(rows, tokens))
        server = stack.enter_context(
            embedtext_server([f"d{d}={p}" for d, p in models.items()], args=["--set", "engine=null"])
        )
        http = stack.enter_context(null_json_server({f"d{d}": str(p) for d, p in models.items()}))
        for dim in models:
            for label, reply_dtype in _REPLIES:
                client = stack.enter_context(
                    Client(server.target, reply_dtype=reply_dtype, max_batch_rows=512, max_in_flight=8)
                )
                embedtext.register(con, client, name=f"et_{label}_{dim}", model=f"d{dim}")
            embedder = OpenAIJsonEmbedder(http.url, f"d{dim}")
            stack.callback(embedder.close)
            register_udf(con, f"json_{dim}", embedder, dim)

        dim_of = {f"d{dim}": dim for dim in models}  # workload label -> its dim

        def scan(fn: str, pid: int | None):
            def measure(workload: Workload, warmup: bool) -> dict:
                dim = dim_of[workload.label]
                return {**scan_measure(con, SUITE, f"{fn}_{dim}", pid)(workload, warmup), "dim": dim}

            return measure

        measures = {
            "bytes": scan("et_bytes", server.pid),
            "repeated_float": scan("et_repeated_float", server.pid),
            "http_json": scan("json", http.pid),
        }
        paths = [RoundsPath(label, *PATHS[label], measure, engine="null") for label, measure in measures.items()]
        headline = f"d{HEADLINE_DIM if HEADLINE_DIM in models else next(iter(models))}"
        at_headline = dict(across=(headline, headline))  # the headline ratios, at the headline dim
        ratios = [
            Ratio("bytes_vs_repeated_float_{workload}", "bytes", "repeated_float"),
            Ratio("bytes_vs_repeated_float", "bytes", "repeated_float", **at_headline),
            Ratio("bytes_vs_json_{workload}", "bytes", "http_json"),
            Ratio("bytes_vs_json", "bytes", "http_json", **at_headline),
        ]
        progress(f"transport: {len(paths)} paths, dims {list(models)}, {rounds} rotating rounds")
        workloads = [Workload(tokens, rows, name=label) for label in dim_of]
        return run_rounds(paths, workloads, suite=SUITE, rounds=rounds, ratios=ratios, progress=progress)
