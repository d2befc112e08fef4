"""Transport suite, NULL ENGINE: what the wire format and the server cost, with the model taken out.

Every case names the null engine: ``embedtext serve --engine null`` answers fixed vectors of the
model's dimension after a real tokenizer stage, so the cases compare transports, not models.
Many rows of short text, so overhead dominates. At each dim (384, 768, 1024; 1-layer generated
models), the same rows through DuckDB:

  null_engine_udf_bytes_d{D}           embed_text, Client(reply_dtype="float32"): one bytes field
  null_engine_udf_repeated_float_d{D}  embed_text, Client(reply_dtype="float32-repeated")
  null_engine_http_json_d{D}           an Arrow UDF posting to an OpenAI-format /v1/embeddings JSON
                                       server over the same null vectors (bench/null_json_server.py)
  null_inprocess_udf_d{D}              the same vectors computed inside the UDF (tokenizer included),
                                       no server at all: the ceiling

And the wire format alone (no server, no DuckDB), one 2048-row reply per repetition, the
server's encoding + serialization + the client's parse + conversion to Arrow:

  wire_bytes_d{D}                      ``embeddings_f32le`` bytes (spliced and viewed by reply_wire)
  wire_repeated_float_d{D}             ``embeddings_f32`` repeated float (as the servicer fills it)

Ratios ``bytes_vs_repeated_float`` and ``bytes_vs_json`` (rows/s end to end; headline at 768, and
per dim ``_{D}``), ``bytes_vs_null_inprocess_{D}``, and ``wire_bytes_vs_repeated_float`` (+ ``_{D}``).

    uv run --extra cpu embedtext bench --only transport --rows 20000 --dims 384
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

import embedtext
from embedtext.bench.baselines import NullInProcessEmbedder, OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import make_case, timed
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.servers import embedtext_server, null_json_server
from embedtext.connectors.client import Client
from embedtext.connectors.requests import reply_to_arrow
from embedtext.protocol import codec, reply_wire
from embedtext.protocol import embedding_pb2 as pb

SUITE = "transport"
HEADLINE_DIM = 768
_REPLIES = (("bytes", "float32"), ("repeated_float", "float32-repeated"))


def run_transport(models: dict[int, Path], rows: int, tokens: int) -> list[dict]:
    """``models``: dim -> generated model dir. Each server is started once, for all dims."""
    corpus = BenchCorpus(next(iter(models.values())))  # the generated models share one vocabulary
    con = duckdb.connect()
    load_docs(con, corpus.texts(rows, tokens))
    common = dict(source="docs", rows=rows, tokens_per_row=tokens, engine="null")
    cases = []
    with embedtext_server([f"d{d}={p}" for d, p in models.items()], args=["--engine", "null"]) as server:
        for dim in models:
            for label, reply_dtype in _REPLIES:
                client = Client(server.target, reply_dtype=reply_dtype, max_batch_rows=512, max_in_flight=8)
                fn = f"et_{label}_{dim}"
                embedtext.register(con, client, name=fn, model=f"d{dim}")
                cases.append(
                    embed_query_case(
                        con,
                        f"null_engine_udf_{label}_d{dim}",
                        SUITE,
                        fn=fn,
                        dim=dim,
                        server_pid=server.pid,
                        reply_dtype=reply_dtype,
                        path=f"embed_text -> gRPC {reply_dtype} reply (NULL ENGINE)",
                        **common,
                    )
                )
                client.close()
    with null_json_server({f"d{d}": str(p) for d, p in models.items()}) as http:
        for dim in models:
            embedder = OpenAIJsonEmbedder(http.url, f"d{dim}")
            register_udf(con, f"json_{dim}", embedder, dim)
            cases.append(
                embed_query_case(
                    con,
                    f"null_engine_http_json_d{dim}",
                    SUITE,
                    fn=f"json_{dim}",
                    dim=dim,
                    server_pid=http.pid,
                    path="Arrow UDF -> OpenAI-format JSON HTTP (NULL ENGINE)",
                    **common,
                )
            )
            embedder.close()
    for dim, path in models.items():
        register_udf(con, f"inproc_{dim}", NullInProcessEmbedder(str(path)), dim)
        cases.append(
            embed_query_case(
                con,
                f"null_inprocess_udf_d{dim}",
                SUITE,
                fn=f"inproc_{dim}",
                dim=dim,
                path="Arrow UDF computing the null vectors in-process (tokenizer, no server)",
                **common,
            )
        )
    con.close()
    return cases + wire_cases(tuple(models))


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


def wire_cases(dims: Sequence[int], rows: int = 2048, repeats: int = 20) -> list[dict]:
    """Encode + serialize + parse + to Arrow, one reply of ``rows`` x dim, ``repeats`` times."""
    cases = []
    for dim in dims:
        vectors = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
        for label, repeated in (("bytes", False), ("repeated_float", True)):
            _wire_round_trip(vectors, repeated)  # warm-up
            # Each result is dropped before the next: keeping 20 replies alive would measure page
            # faults on fresh memory, not the format.
            seconds, _ = timed(lambda: [_wire_round_trip(vectors, repeated) and None for _ in range(repeats)])
            cases.append(
                make_case(
                    f"wire_{label}_d{dim}",
                    SUITE,
                    rows=rows * repeats,
                    seconds=seconds,
                    tokens_per_row=None,
                    dim=dim,
                    path="protobuf encode + parse + Arrow, no server",
                )
            )
    return cases


def transport_ratios(cases: Sequence[dict]) -> dict[str, float]:
    by = {c["name"]: c["rows_per_s"] for c in cases if c["suite"] == SUITE}
    dims = sorted({c["dim"] for c in cases if c["suite"] == SUITE})
    ratios: dict[str, float] = {}
    headline = HEADLINE_DIM if HEADLINE_DIM in dims else (dims[0] if dims else None)
    for dim in dims:
        ours = by.get(f"null_engine_udf_bytes_d{dim}")
        for key, other in (
            ("bytes_vs_repeated_float", f"null_engine_udf_repeated_float_d{dim}"),
            ("bytes_vs_json", f"null_engine_http_json_d{dim}"),
            ("bytes_vs_null_inprocess", f"null_inprocess_udf_d{dim}"),
        ):
            if ours and by.get(other):
                ratios[f"{key}_{dim}"] = round(ours / by[other], 3)
                if dim == headline and key != "bytes_vs_null_inprocess":
                    ratios[key] = ratios[f"{key}_{dim}"]
        if by.get(f"wire_bytes_d{dim}") and by.get(f"wire_repeated_float_d{dim}"):
            ratios[f"wire_bytes_vs_repeated_float_{dim}"] = round(
                by[f"wire_bytes_d{dim}"] / by[f"wire_repeated_float_d{dim}"], 3
            )
            if dim == headline:
                ratios["wire_bytes_vs_repeated_float"] = ratios[f"wire_bytes_vs_repeated_float_{dim}"]
    return ratios
