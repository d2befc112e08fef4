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


DEMO_SENTENCES = [
    "A cat sleeps on the warm windowsill.",
    "The kitten is napping in the sun by the window.",
    "Stock markets fell sharply after the interest rate decision.",
    "Shares dropped as the central bank raised rates.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Mix the flour with salt before adding water to the dough.",
]


@main.command()
@click.option("--model", default="default", show_default=True, help="Model source for the demo server.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds to wait for the server to start.")
def demo(model: str, timeout: float) -> None:
    """Start a local server on the default model, embed a few sentences, print similarities."""
    from embedtext.connectors.client import Client
    from embedtext.connectors.local_server import LocalServer
    from embedtext.protocol.errors import EmbedTextError

    server = LocalServer([model])
    click.echo(f"starting `embedtext serve --model {model}` on {server.target} (log: {server.log_path}) ...")
    server.start()
    try:
        ticks = [0]

        def tick() -> None:
            ticks[0] += 1
            if ticks[0] % 40 == 0:
                click.echo(f"  still starting ({ticks[0] // 4}s) ...", err=True)

        server.wait_ready(timeout, on_wait=tick)
        with Client(server.target) as client:
            i = client.info()
            click.echo(f"serving {i.default_model} (dim {i.model().dim})")
            vectors = client.embed(DEMO_SENTENCES)
        _print_similarities(DEMO_SENTENCES, vectors)
    except EmbedTextError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        server.stop()


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
