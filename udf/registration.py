"""``embedtext.register``: put ``embed_text`` (and the shipped macros) on a DuckDB connection.

>>> import duckdb, embedtext
>>> con = duckdb.connect()
>>> embedtext.register(con)                     # doctest: +SKIP
>>> con.sql("SELECT typeof(embed_text('a cat'))").fetchone()   # doctest: +SKIP
('FLOAT[384]',)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import duckdb
from duckdb.func import FunctionNullHandling, PythonUDFType

from embedtext.connectors.client import Client
from embedtext.connectors.client_config import ClientConfig
from embedtext.protocol import UDF_BATCH_ROWS, UDF_IN_FLIGHT, UDF_TIMEOUT_S
from embedtext.udf.chunk import ChunkEmbedder, ChunkOptions, OptionsChunkEmbedder
from embedtext.udf.co_deployed import default_target
from embedtext.udf.text_chunks import ChunksEmbedder, chunk_list_type
from embedtext.udf.text_split import register_text_split

#: The UDF's client: several smaller requests per 2048-row chunk, all in flight at once, so the
#: server starts on the first while the rest are still on the wire and progress moves smoothly;
#: and a long deadline, since a query may wait behind other work.
UDF_CLIENT_CONFIG = ClientConfig(timeout=UDF_TIMEOUT_S, max_batch_rows=UDF_BATCH_ROWS, max_in_flight=UDF_IN_FLIGHT)
# The prompt sentence-transformers models name for a search query (arctic-embed, EmbeddingGemma, Qwen3-Embedding).
QUERY_PROMPT = "query"


@dataclass
class Registration:
    """What ``register`` put on the connection."""

    name: str
    target: str | list[str]
    model: str
    dim: int
    client: Client
    embedder: ChunkEmbedder
    options_embedder: OptionsChunkEmbedder


def _macros(name: str) -> list[str]:
    text = resources.files("embedtext.sql").joinpath("macros.sql").read_text(encoding="utf-8")
    text = text.replace("{embed_text}", name)
    return [
        s.strip()
        for s in text.split(";")
        if s.strip() and not all(line.strip().startswith("--") or not line.strip() for line in s.splitlines())
    ]


def register(
    con: duckdb.DuckDBPyConnection,
    target: str | Sequence[str] | Client | None = None,
    *,
    name: str = "embed_text",
    model: str | None = None,
    dimensions: int | None = None,
    truncate: bool = True,
    on_error: str = "fail",
    prompt_name: str | None = None,
    long_texts: str = "truncate",
    on_rows: Callable[[int], None] | None = None,
    config: ClientConfig | None = None,
    **settings,
) -> Registration:
    """Register ``name(text) -> FLOAT[dim]`` on ``con``, backed by an embedtext server.

    Args:
        con: the DuckDB connection.
        target: ``host:port``, ``unix:PATH`` or a list; None starts (once per process) a
            co-deployed server for the default model on a Unix socket. A ready-made
            :class:`~embedtext.Client` is used as it is (its own timeout, TLS and token).
        name: the SQL function name.
        model: served model to use (default: the server's default model).
        dimensions: Matryoshka size of the result (``FLOAT[dimensions]``).
        truncate: cut texts to the model's max tokens (else a long row is an error).
        on_error: ``"fail"`` (a row that cannot be embedded fails the query) or ``"null"``
            (that row gives NULL, the others their vectors).
        prompt_name: one of the model's prompts put before each text (None: the model's default
            prompt, if it has one).
        long_texts: a text over the model's max tokens is cut there (``"truncate"``), or embedded
            in chunks whose vectors' mean it gets (``"mean"``, normalized as the model normalizes).
        on_rows: called with the row count of each finished chunk (progress bars).
        config: the client's settings; default :data:`UDF_CLIENT_CONFIG`.
        **settings: any :class:`~embedtext.ClientConfig` field, replacing the config's
            (``timeout``, ``token``, ``tls``, ``max_in_flight``, ...).

    Also registered: ``name(text, model)``, ``name(text, model, dimensions)`` and ``name(text,
    model, dimensions, prompt)`` (named arguments work: ``name(body, model := 'm', dimensions :=
    256)``), returning ``FLOAT[]``; ``name_query(text) -> FLOAT[dim]``, with the model's "query"
    prompt where it has one; and the macros of ``sql/macros.sql``, whose search text is a query.
    """
    if isinstance(target, Client):
        client, target = target, target.targets
    else:
        if target is None:
            target = default_target()
        client = Client(target, ClientConfig.of(config or UDF_CLIENT_CONFIG, **settings))
    info = client.info().model(model)
    dim = info.output_dim(dimensions)  # InvalidInputError, a ValueError, when it is not available
    options = ChunkOptions(model, dimensions, dim, truncate, on_error, prompt_name, long_texts)
    embedder = ChunkEmbedder(client, options, on_rows=on_rows)
    # The chunks' own vectors: each chunk embedded as it is.
    chunks_embedder = ChunksEmbedder(ChunkEmbedder(client, dataclasses.replace(options, long_texts="truncate")))
    # The search text of the macros: a query, with the model's query prompt where it has one.
    query_prompt = QUERY_PROMPT if QUERY_PROMPT in info.prompts else prompt_name
    query_embedder = ChunkEmbedder(client, dataclasses.replace(options, prompt_name=query_prompt))
    options_embedder = OptionsChunkEmbedder(client, truncate, on_error, long_texts)
    float_type = duckdb.sqltype("FLOAT")
    varchar = duckdb.sqltype("VARCHAR")
    common = dict(
        type=PythonUDFType.ARROW,
        null_handling=FunctionNullHandling.SPECIAL,  # NULLs reach us: we answer NULL without a call
        exception_handling=duckdb.PythonExceptionHandling.DEFAULT,  # an exception fails the query
        side_effects=False,  # constant arguments (a search query) are embedded once, at planning
    )
    typed_name = f"__embedtext_{name}"
    options_name = f"__embedtext_{name}_options"
    query_name = f"{name}_query"
    chunks_name = f"__embedtext_{name}_chunks"
    for fn_name in (typed_name, options_name, query_name, chunks_name):
        try:
            con.remove_function(fn_name)
        except Exception:
            pass
    con.create_function(typed_name, embedder, [varchar], duckdb.array_type(float_type, dim), **common)
    con.create_function(query_name, query_embedder, [varchar], duckdb.array_type(float_type, dim), **common)
    con.create_function(
        options_name,
        options_embedder,
        [varchar, varchar, duckdb.sqltype("INTEGER"), varchar],
        duckdb.list_type(float_type),
        **common,
    )
    integer = duckdb.sqltype("INTEGER")
    con.create_function(chunks_name, chunks_embedder, [varchar, integer, integer], chunk_list_type(dim), **common)
    con.execute(
        f"CREATE OR REPLACE TEMP MACRO {name}_chunks(text, max_tokens := NULL, overlap := 0) AS "
        f"{chunks_name}(text, max_tokens, overlap)"
    ).fetchall()
    con.execute(
        f"CREATE OR REPLACE TEMP MACRO {name}(text) AS {typed_name}(text), "
        f"(text, model) AS {options_name}(text, model, NULL, NULL), "
        f"(text, model, dimensions) AS {options_name}(text, model, dimensions, NULL), "
        f"(text, model, dimensions, prompt) AS {options_name}(text, model, dimensions, prompt)"
    ).fetchall()  # duckdb 2.0 refuses further work while a result is unfinished
    for statement in _macros(name):
        con.execute(statement).fetchall()
    register_text_split(con)  # what transpile writes for Snowflake's SPLIT_TEXT_RECURSIVE_CHARACTER
    return Registration(name, target, info.name, dim, client, embedder, options_embedder)
