"""The ``embedtext`` command: one group; each subcommand imports only what it needs."""

from __future__ import annotations

import sys

import click

from embedtext.server.cli import serve_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="embedtext")
def main() -> None:
    """embedtext: table columns to embeddings on a co-deployed vLLM gRPC server."""


main.add_command(serve_command)


@main.command()
@click.option("--target", default="127.0.0.1:50051", envvar="EMBEDTEXT_TARGET", show_default=True)
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
            + (f", aliases {', '.join(m.aliases)}" if m.aliases else "")
        )


@main.command()
@click.argument("texts", nargs=-1, required=True)
@click.option("--target", default="127.0.0.1:50051", envvar="EMBEDTEXT_TARGET", show_default=True)
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
@click.option("--rows", default=3000, show_default=True, help="Rows of the demo corpus to embed.")
@click.option("--database", default=":memory:", show_default=True, help="DuckDB database file.")
def demo(target: str | None, rows: int, database: str) -> None:
    """The main job: embed a corpus in DuckDB with embed_text() and run semantic searches.

    With no --target, a server for the default model (all-MiniLM-L6-v2) starts on a private
    Unix socket and stops at the end.
    """
    from embedtext.demo import run_demo
    from embedtext.protocol.errors import EmbedTextError

    try:
        run_demo(target, rows=rows, database=database)
    except EmbedTextError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("make-model")
@click.argument("path", type=click.Path(file_okay=False))
@click.option("--layers", default=2, show_default=True)
@click.option("--hidden", default=128, show_default=True)
@click.option("--heads", default=4, show_default=True)
@click.option("--max-tokens", default=128, show_default=True)
@click.option("--pooling", type=click.Choice(["mean", "cls"]), default="mean", show_default=True)
@click.option("--seed", default=0, show_default=True)
def make_model(path: str, layers: int, hidden: int, heads: int, max_tokens: int, pooling: str, seed: int) -> None:
    """Write a random-weight BERT embedding model (for tests and benchmarks; no network needed).

    `--layers 12 --hidden 768 --heads 12 --max-tokens 512 --pooling cls` has the cost of
    snowflake-arctic-embed-m-v1.5.
    """
    from embedtext.server.synthetic_model import write_synthetic_bert

    out = write_synthetic_bert(
        path, layers=layers, hidden=hidden, heads=heads, max_tokens=max_tokens, pooling=pooling, seed=seed
    )
    click.echo(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
