"""The ``embedtext`` command: one group; each subcommand imports only what it needs."""

from __future__ import annotations

import importlib
import sys

import click

from embedtext.protocol import DEFAULT_TARGET
from embedtext.server.cli import serve_command
from embedtext.server.models.families import FAMILIES
from embedtext.sql_command import sql_command


class LazyGroup(click.Group):
    """A group whose heavy subcommands are imported only to run them or show their own help."""

    # name -> (module, attribute, the line `embedtext --help` shows)
    LAZY = {
        "bench": (
            "embedtext.bench.cli",
            "bench_command",
            "Benchmarks, side by side in rotating rounds: ratios on one machine.",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            module, attribute, _ = self.LAZY[name]
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.LAZY:
                rows.append((name, self.LAZY[name][2]))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="embedtext")
def main() -> None:
    """embedtext: table columns to embeddings on a co-deployed vLLM gRPC server."""


main.add_command(serve_command)
main.add_command(sql_command)


@main.command()
@click.option("--target", default=DEFAULT_TARGET, envvar="EMBEDTEXT_TARGET", show_default=True)
def info(target: str) -> None:
    """Show what a server serves."""
    from embedtext.connectors.client import Client
    from embedtext.protocol.errors import EmbedTextError

    try:
        with Client(target) as client:
            i = client.info()
    except EmbedTextError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{target}: {i.protocol_version}, server {i.server_version}, default model {i.default_model}")
    for m in i.models:
        click.echo(
            f"  {m.name}: dim {m.dim}, max tokens {m.max_tokens}, pooling {m.pooling}, "
            f"normalized {m.normalize_default}, replicas {m.replicas}"
            + (
                f" ({m.interactive_replicas} for interactive requests only{_on_threads(m.interactive_threads)})"
                if m.interactive_replicas
                else ""
            )
            + (f", {m.starting_replicas} more starting" if m.starting_replicas else "")
            + (f", dtype {m.dtype}" if m.dtype else "")
            + (f", engine loop {m.engine_loop}" if m.engine_loop else "")
            + (", eager" if m.enforce_eager else "")
            + (f", aliases {', '.join(m.aliases)}" if m.aliases else "")
        )
        for name, text in sorted(m.prompts.items()):
            default = " (the default)" if name == m.default_prompt_name else ""
            click.echo(f"    prompt {name!r}{default}: {text!r}")
        click.echo(
            f"    queue: {m.queued_interactive_rows} interactive rows, {m.queued_bulk_rows} bulk rows "
            f"from {m.waiting_bulk_callers} caller(s)"
            + (
                f"; {m.held_bulk_rows} bulk rows in {m.held_bulk_requests} request(s) held before tokenizing"
                if m.held_bulk_requests
                else ""
            )
        )
        speed = (
            f"{m.engine_tokens_per_second:,.0f} tokens/s per engine"
            if m.engine_tokens_per_second
            else "speed not measured yet"
        )
        target = (
            f"paced for interactive requests within {m.interactive_slo_ms:.0f} ms"
            if m.interactive_slo_ms
            else "not paced"
        )
        turns = f" (bulk callers' turns: about {m.bulk_turn_ms:.0f} ms of engine time)" if m.bulk_turn_ms else ""
        if m.engine_loop:  # the engines pace their own steps; bulk batches only feed them
            steps = " / ".join(f"{tokens:,}" for tokens in m.engine_step_tokens) or "not reported yet"
            click.echo(f"    engine steps: {steps} tokens, {target}; {speed}")
            click.echo(f"    bulk batches: {m.bulk_batch_tokens:,} tokens{turns}")
        else:
            click.echo(f"    bulk batches: {m.bulk_batch_tokens:,} tokens{turns}, {target}; {speed}")
        if m.interactive_gather_ms:
            click.echo(
                f"    queries gather for up to {m.interactive_gather_ms:.0f} ms while bulk work runs, "
                "to share an engine step"
            )
        if m.interactive_requests:
            held = ""
            if m.interactive_slo_ms:
                held = f"; target {m.interactive_slo_ms:.0f} ms " + (
                    "held" if m.interactive_p99_ms <= m.interactive_slo_ms else "missed at p99"
                )
            click.echo(
                f"    interactive requests (last {m.interactive_requests:,}, in the server): "
                f"p50 {m.interactive_p50_ms:.1f} ms, p99 {m.interactive_p99_ms:.1f} ms{held}"
            )
        if m.interactive_slo_missed:
            click.echo(
                f"    the engines are too slow to hold {m.interactive_slo_ms:.0f} ms even at their smallest "
                "size: raise --interactive-slo-ms"
            )
    if i.event_loop_ticks:
        click.echo(
            f"  event loop (gRPC, the queue, the hand-overs): late by p99 {i.event_loop_lag_p99_ms:.1f} ms, "
            f"at most {i.event_loop_lag_max_ms:.1f} ms, over its last {i.event_loop_ticks:,} timer ticks"
        )


@main.command()
@click.argument("texts", nargs=-1, required=True)
@click.option("--target", default=DEFAULT_TARGET, envvar="EMBEDTEXT_TARGET", show_default=True)
@click.option("--model", default=None)
@click.option("--dimensions", type=int, default=None)
def embed(texts: tuple[str, ...], target: str, model: str | None, dimensions: int | None) -> None:
    """Embed TEXTS and print their cosine similarities."""
    from embedtext.connectors.client import Client
    from embedtext.protocol.errors import EmbedTextError

    try:
        with Client(target) as client:
            vectors = client.embed(list(texts), model=model, dimensions=dimensions)
    except EmbedTextError as exc:
        raise click.ClickException(str(exc)) from None
    _print_similarities(list(texts), vectors)


def _on_threads(threads: int) -> str:
    """ ", on 1 thread" for the interactive replica's engine (empty where not set)."""
    return f", on {threads} thread{'s' if threads != 1 else ''}" if threads else ""


def _print_similarities(texts: list[str], vectors) -> None:
    import numpy as np

    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit.T
    click.echo(f"{len(texts)} embeddings of dim {vectors.shape[1]}")
    for i, text in enumerate(texts):
        order = [j for j in np.argsort(-sims[i]) if j != i]
        if order:
            j = order[0]
            click.echo(f"  {text!r:45.45} nearest: {texts[j]!r:40.40} cos {sims[i, j]:.3f}")


@main.command()
@click.option("--target", default=None, envvar="EMBEDTEXT_TARGET", help="Use this server instead of starting one.")
@click.option(
    "--rows", type=click.IntRange(min=1), default=None, help="Embed only this many paragraphs [default: all]."
)
@click.option("--database", default=":memory:", show_default=True, help="DuckDB database file.")
def demo(target: str | None, rows: int | None, database: str) -> None:
    """The main job: embed the standard library's docstrings in DuckDB with embed_text() and search them.

    With no --target, a server for the default model (all-MiniLM-L6-v2) starts on a private
    Unix socket and stops at the end.
    """
    from embedtext.corpus import CorpusUnavailable
    from embedtext.demo import run_demo
    from embedtext.protocol.errors import EmbedTextError

    try:
        run_demo(target, rows=rows, database=database)
    except (EmbedTextError, CorpusUnavailable) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.argument("database", type=click.Path(dir_okay=False))
@click.option("--table", "source", required=True, help="Source: a table or view, a Parquet/CSV glob, or a query.")
@click.option("--key", required=True, help="Key column (unique per row).")
@click.option("--text", required=True, help="Text column to embed.")
@click.option("--into", default=None, help="Embeddings table [default: <table>_embeddings, or <table>_chunks].")
@click.option(
    "--target", default=None, envvar="EMBEDTEXT_TARGET", help="Server(s), comma-separated [default: start one]."
)
@click.option("--model", default=None, help="Served model [default: the server's default].")
@click.option("--dimensions", type=int, default=None, help="Matryoshka size of the stored vectors.")
@click.option("--batch-rows", default=2048, show_default=True, help="Rows per committed batch.")
@click.option("--retries", default=5, show_default=True, help="Retries (with backoff) when the server is unavailable.")
@click.option(
    "--truncate/--no-truncate",
    default=True,
    show_default=True,
    help="Cut long texts to the model's max tokens; with --no-truncate they go to the failed-rows table.",
)
@click.option(
    "--prompt", "prompt_name", default=None, help="One of the model's prompts before each text (`embedtext info`)."
)
@click.option(
    "--chunk-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Keep a chunk table: each text cut into chunks of at most this many of the model's tokens.",
)
@click.option("--overlap", type=click.IntRange(min=0), default=0, show_default=True, help="Tokens chunks share.")
@click.option("--every", default=None, help="Run again every interval (90s, 10m, 2h).")
@click.option("--cron", default=None, help='Run on a crontab schedule ("*/10 * * * *").')
@click.option(
    "--wait", "wait_s", default=0.0, show_default=True, help="Seconds to wait for another run holding the database."
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where batches are embedded: this process, or Ray Data workers.",
)
@click.option("--ray-address", default=None, help="Ray cluster to join (default: a local Ray instance).")
@click.option("--workers", type=int, default=None, help="Ray workers [default: one per target, at least 2].")
def index(
    database,
    source,
    key,
    text,
    into,
    target,
    model,
    dimensions,
    batch_rows,
    retries,
    truncate,
    prompt_name,
    chunk_tokens,
    overlap,
    every,
    cron,
    wait_s,
    engine,
    ray_address,
    workers,
) -> None:
    """Keep an embeddings table in step with a source: only new and changed rows are embedded.

    The last line of each run is `N rows embedded, M removed, K failed in S s`.
    """
    from embedtext.connectors.jobs import IndexSpec, run_index, run_on_schedule

    targets = tuple(t for t in target.split(",") if t.strip()) if target else None
    try:
        spec = IndexSpec(
            database,
            source,
            key=key,
            text=text,
            into=into,
            target=targets,
            model=model,
            dimensions=dimensions,
            batch_rows=batch_rows,
            retries=retries,
            truncate=truncate,
            prompt_name=prompt_name,
            chunk_tokens=chunk_tokens,
            overlap=overlap,
        )
        spec.source_kind  # validate now
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if spec.target is None:
        from embedtext.udf.co_deployed import default_target

        spec = IndexSpec(**{**spec.__dict__, "target": (default_target(),)})
    if engine == "ray":
        from embedtext.connectors.ray import run_index_on_ray

        def one_pass():
            return run_index_on_ray(spec, workers=workers, ray_address=ray_address, wait_for_lock_s=wait_s)
    else:

        def one_pass():
            return run_index(spec, wait_for_lock_s=wait_s)

    if every or cron:
        try:
            run_on_schedule(one_pass, every=every, cron=cron)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return
    summary = one_pass()
    if summary.error:
        sys.exit(1)


@main.command("make-model")
@click.argument("path", type=click.Path(file_okay=False))
@click.option(
    "--arch",
    type=click.Choice(FAMILIES),
    default="bert",
    show_default=True,
    help="The model family, with a tokenizer of its own kind.",
)
@click.option("--layers", default=2, show_default=True)
@click.option("--hidden", default=128, show_default=True)
@click.option("--heads", default=4, show_default=True)
@click.option("--max-tokens", default=128, show_default=True)
@click.option("--pooling", type=click.Choice(["mean", "cls"]), default=None, help="BERT only (default mean).")
@click.option("--seed", default=0, show_default=True)
def make_model(
    path: str, arch: str, layers: int, hidden: int, heads: int, max_tokens: int, pooling: str | None, seed: int
) -> None:
    """Write a random-weight embedding model (for tests and benchmarks; no network needed).

    `--layers 12 --hidden 768 --heads 12 --max-tokens 512 --pooling cls` has the cost of
    snowflake-arctic-embed-m-v1.5.
    """
    from embedtext.server.models.families import write_family_model

    try:
        out = write_family_model(
            path, arch, layers=layers, hidden=hidden, heads=heads, max_tokens=max_tokens, pooling=pooling, seed=seed
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
