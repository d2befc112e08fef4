"""`embedtext serve`: parse arguments into a ServerConfig and run. Nothing else lives here."""

from __future__ import annotations

import asyncio
import os

import click

from embedtext.protocol import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_PORT
from embedtext.server.config import ServerConfig


@click.command("serve", context_settings={"auto_envvar_prefix": "EMBEDTEXT", "show_default": True})
@click.option(
    "--model",
    "models",
    multiple=True,
    default=("default",),
    envvar="EMBEDTEXT_MODEL",
    help="[NAME=]SOURCE: 'default' (all-MiniLM-L6-v2 from PyPI), a model directory, or a hub name "
    "such as Snowflake/snowflake-arctic-embed-m-v1.5 (the production choice). Repeat to serve several; "
    "the first is the default model.",
)
@click.option("--replicas", type=click.IntRange(1), default=1, help="Engines per model on the one device.")
@click.option("--host", default="127.0.0.1", help="Interface to listen on (loopback only without TLS).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, help="TCP port (0 = any free port).")
@click.option("--uds", type=click.Path(dir_okay=False), default=None, help="Listen on this Unix socket instead.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None, help="TLS certificate chain (PEM); needs --tls-key.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="TLS private key (PEM).")
@click.option("--tls-client-ca", type=click.Path(exists=True, dir_okay=False), default=None, help="Require client certificates signed by this CA (mutual TLS).")
@click.option("--token", default=None, show_default=False, help="Require 'authorization: Bearer TOKEN' on every call but health checks (prefer EMBEDTEXT_TOKEN or --token-file: arguments are visible to other users).")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None, help="Read the token from this file.")
@click.option("--max-batch-tokens", type=click.IntRange(1), default=16384, help="A batch closes at this many tokens.")
@click.option("--max-batch-rows", type=click.IntRange(1), default=1024, help="... or at this many rows.")
@click.option("--max-batch-delay-ms", type=click.FloatRange(0), default=2.0, help="... or when its oldest row waited this long.")
@click.option(
    "--idle-dispatch/--no-idle-dispatch",
    default=True,
    help="Close a batch at once while a replica has nothing to do and no other request is being tokenized, "
    "instead of waiting up to --max-batch-delay-ms for more rows (lower latency at light load; busy replicas still get full batches).",
)
@click.option("--max-batches-per-replica", type=click.IntRange(1), default=2, help="Batches in flight per engine.")
@click.option(
    "--scheduling",
    type=click.Choice(["classes", "fifo"]),
    default="classes",
    help="classes: interactive requests (small ones, or marked) go first in the queue, in a spare engine slot and in "
    "vLLM's scheduler, and bulk callers share the rest fairly; fifo: one queue in arrival order.",
)
@click.option(
    "--interactive-slo-ms",
    type=click.FloatRange(0),
    default=None,
    help="With classes: size engine steps (stepped) or bulk batches (async) from the engines' measured speed so an "
    "interactive request waits about this long at most; bulk work gives up the throughput of smaller engine steps. 0: off "
    "[default: 250 on a CPU, off on a GPU].",
)
@click.option("--max-queued-rows", type=click.IntRange(1), default=65536, help="Queue bound per model; beyond it RESOURCE_EXHAUSTED.")
@click.option("--max-request-rows", type=click.IntRange(1), default=16384, help="Rows per request at most.")
@click.option("--max-concurrent-rpcs", type=click.IntRange(1), default=4096, help="Calls handled at once; beyond it RESOURCE_EXHAUSTED.")
@click.option("--max-stream-inflight", type=click.IntRange(1), default=64, help="Requests of one EmbedStream handled at once.")
@click.option("--max-message-bytes", type=click.IntRange(1024), default=DEFAULT_MAX_MESSAGE_BYTES, help="gRPC message size limit, both ways.")
@click.option("--memory-fraction", type=click.FloatRange(0.01, 1.0), default=None, help="Device memory share of all engines together [default: 0.9 GPU, 0.2 CPU].")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto")
@click.option(
    "--engine",
    type=click.Choice(["vllm", "null"]),
    default="vllm",
    help="vllm, or null: fixed vectors without a model, to measure the server's own overhead (benchmarks only).",
)
@click.option("--dtype", default="auto", help="Engine dtype (auto, float32, bfloat16, float16).")
@click.option("--max-num-seqs", type=click.IntRange(1), default=1024, help="vLLM max_num_seqs per engine.")
@click.option("--enforce-eager/--no-enforce-eager", default=False, help="Disable CUDA graphs / compilation.")
@click.option("--tokenizer-threads", type=click.IntRange(1), default=2)
@click.option(
    "--ascii-normalizer/--no-ascii-normalizer",
    default=True,
    help="Normalize pure-ASCII texts for BERT-family tokenizers ahead of the tokenizer: the same ids for "
    "~40% less tokenizer CPU. Off: the tokenizer normalizes every text itself.",
)
@click.option(
    "--word-cache",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Split those ASCII texts into words in Python and take each word's ids from a cache filled by "
    "the tokenizer: the same ids for ~4x less tokenizer CPU, but under the GIL. auto: on unless the "
    "engines run on a GPU, whose spare cores tokenize in parallel anyway. Needs --ascii-normalizer.",
)
@click.option(
    "--replica-processes",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Run each replica's engine client in a process of its own: vLLM's per-row request work then "
    "spreads over cores instead of the server's one event loop. auto: on for several replicas on a GPU.",
)
@click.option(
    "--engine-loop",
    type=click.Choice(["auto", "async", "stepped"]),
    default="auto",
    show_default=True,
    help="async: vLLM's AsyncLLM, its engine core in processes of its own; stepped: each replica's worker "
    "process holds its whole engine and steps it itself, each step's rows chosen by latency class and sized to "
    "--interactive-slo-ms (one vLLM import at start-up, no waiting between steps). auto: stepped on a CPU.",
)
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, help="Serve Prometheus metrics on 127.0.0.1:PORT.")
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def serve_command(**kwargs) -> None:
    """Serve embedding models over gRPC (embedtext.v1)."""
    from embedtext.server.app import configure_logging, serve

    token_file = kwargs.pop("token_file")
    if token_file:
        if kwargs["token"]:
            raise click.UsageError("give --token or --token-file, not both")
        kwargs["token"] = open(token_file, encoding="utf-8").read().strip()
    try:
        config = ServerConfig(**{k: (tuple(v) if k == "models" else v) for k, v in kwargs.items()})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    configure_logging(config.log_level)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING" if config.log_level.upper() != "DEBUG" else "DEBUG")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")
    from embedtext.server.host.allocator import AllocatorError
    from embedtext.server.models import ModelSourceError

    try:
        asyncio.run(serve(config))
    except (ModelSourceError, AllocatorError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
