"""Transport suite, NULL ENGINE: what the wire format and the server cost with the model taken out
(raw bytes vs protobuf repeated float vs JSON vs in-process, and the wire format alone). Cases and
ratios: docs/benchmarks.md.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

import embedtext
from embedtext.bench.baselines import NullInProcessEmbedder, OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import timed
from embedtext.bench.queries import load_docs, scan_measure
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import embedtext_server, null_json_server
from embedtext.connectors.client import Client
from embedtext.connectors.requests import reply_to_arrow
from embedtext.protocol import codec, reply_wire
from embedtext.protocol import embedding_pb2 as pb

SUITE = "transport"
HEADLINE_DIM = 768
_REPLIES = (("bytes", "float32"), ("repeated_float", "float32-repeated"))
# label -> (case prefix, what it runs)
PATHS = {
    "bytes": ("null_engine_udf_bytes", "embed_text -> gRPC float32 reply (NULL ENGINE)"),
    "repeated_float": ("null_engine_udf_repeated_float", "embed_text -> gRPC float32-repeated reply (NULL ENGINE)"),
    "http_json": ("null_engine_http_json", "Arrow UDF -> OpenAI-format JSON HTTP (NULL ENGINE)"),
    "inprocess": ("null_inprocess_udf", "Arrow UDF computing the null vectors in-process (tokenizer, no server)"),
    "wire_bytes": ("wire_bytes", "protobuf encode + parse + Arrow, no server"),
    "wire_repeated_float": ("wire_repeated_float", "protobuf encode + parse + Arrow, no server"),
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
        for dim, path in models.items():
            for label, reply_dtype in _REPLIES:
                client = stack.enter_context(
                    Client(server.target, reply_dtype=reply_dtype, max_batch_rows=512, max_in_flight=8)
                )
                embedtext.register(con, client, name=f"et_{label}_{dim}", model=f"d{dim}")
            embedder = OpenAIJsonEmbedder(http.url, f"d{dim}")
            stack.callback(embedder.close)
            register_udf(con, f"json_{dim}", embedder, dim)
            register_udf(con, f"inproc_{dim}", NullInProcessEmbedder(str(path)), dim)

        dim_of = {f"d{dim}": dim for dim in models}  # workload label -> its dim

        def scan(fn: str, pid: int | None):
            def measure(workload: Workload, warmup: bool) -> dict:
                dim = dim_of[workload.label]
                return {**scan_measure(con, SUITE, f"{fn}_{dim}", pid)(workload, warmup), "dim": dim}

            return measure

        def wire(repeated: bool):
            return lambda workload, warmup: wire_run(dim_of[workload.label], repeated)

        measures = {
            "bytes": scan("et_bytes", server.pid),
            "repeated_float": scan("et_repeated_float", server.pid),
            "http_json": scan("json", http.pid),
            "inprocess": scan("inproc", None),
            "wire_bytes": wire(False),
            "wire_repeated_float": wire(True),
        }
        paths = [RoundsPath(label, *PATHS[label], measure, engine="null") for label, measure in measures.items()]
        headline = f"d{HEADLINE_DIM if HEADLINE_DIM in models else next(iter(models))}"
        at_headline = dict(across=(headline, headline))  # the headline ratios, at the headline dim
        ratios = [
            Ratio("bytes_vs_repeated_float_{workload}", "bytes", "repeated_float"),
            Ratio("bytes_vs_repeated_float", "bytes", "repeated_float", **at_headline),
            Ratio("bytes_vs_json_{workload}", "bytes", "http_json"),
            Ratio("bytes_vs_json", "bytes", "http_json", **at_headline),
            Ratio("bytes_vs_null_inprocess_{workload}", "bytes", "inprocess"),
            Ratio("wire_bytes_vs_repeated_float_{workload}", "wire_bytes", "wire_repeated_float"),
            Ratio("wire_bytes_vs_repeated_float", "wire_bytes", "wire_repeated_float", **at_headline),
        ]
        progress(f"transport: {len(paths)} paths, dims {list(models)}, {rounds} rotating rounds")
        workloads = [Workload(tokens, rows, name=label) for label in dim_of]
        return run_rounds(paths, workloads, suite=SUITE, rounds=rounds, ratios=ratios, progress=progress)


def _wire_round_trip(vectors: np.ndarray, repeated: bool) -> pa.FixedSizeListArray:
    """What the servicer and the client do with one reply, minus the socket."""
    count, dim = vectors.shape
    response = pb.EmbedResponse(count=count, dim=dim)
    if repeated:  # OUTPUT_DTYPE_FLOAT32_REPEATED: protobuf all the way
        response.dtype = pb.OUTPUT_DTYPE_FLOAT32_REPEATED
        response.embeddings_f32.extend(vectors.reshape(-1).tolist())
        data = reply_wire.serialize_reply(response)
    else:
        response.dtype = pb.OUTPUT_DTYPE_FLOAT32
        data = reply_wire.serialize_reply(reply_wire.OutgoingReply(response, codec.embeddings_as(vectors)))
    return reply_to_arrow(reply_wire.parse_reply(data), count)


def wire_run(dim: int, repeated: bool, rows: int = 2048, repeats: int = 20) -> dict:
    """Encode + serialize + parse + to Arrow, one reply of ``rows`` x dim, ``repeats`` times."""
    vectors = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    _wire_round_trip(vectors, repeated)  # warm-up
    # Each result is dropped before the next: keeping 20 replies alive would measure page faults
    # on fresh memory, not the format.
    seconds, _ = timed(lambda: [_wire_round_trip(vectors, repeated) and None for _ in range(repeats)])
    return {"seconds": seconds, "rows": rows * repeats, "dim": dim, "tokens_per_row": None}
