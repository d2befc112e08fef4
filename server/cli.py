"""`embedtext serve`: options made from ServerConfig's fields, parsed into one, and run. Nothing else lives here."""

from __future__ import annotations

import asyncio
import os
from dataclasses import fields

import click

from embedtext.server.config import Flag, ServerConfig


def _click_type(annotation: str, flag: Flag):
    if flag.choices:
        return click.Choice(flag.choices, case_sensitive=flag.case_sensitive)
    if flag.existing_file:
        return click.Path(exists=True, dir_okay=False)
    if annotation.startswith("int"):
        return click.IntRange(flag.min, flag.max) if flag.min is not None or flag.max is not None else int
    if annotation.startswith("float"):
        return click.FloatRange(flag.min, flag.max) if flag.min is not None or flag.max is not None else float
    return str


def config_options(command):
    """One click option per ServerConfig field: its name, default, type, bounds and help come
    from the field (server/config.py); ``EMBEDTEXT_<OPTION>`` gives it from the environment."""
    for f in reversed(fields(ServerConfig)):
        flag: Flag = f.metadata["flag"]
        name = flag.option(f.name)
        envvar = "EMBEDTEXT_" + name.replace("-", "_").upper()
        help_text = flag.help
        if isinstance(flag.show_default, str):
            help_text += f" [default: {flag.show_default}]"
        if f.type == "bool":
            decls, kind = [f"--{name}/--no-{name}", f.name], {}
        else:
            decls = [f"--{name}", f.name]
            kind = {"type": _click_type(str(f.type), flag), "multiple": str(f.type).startswith("tuple")}
            if flag.flag_value is not None:  # the option alone means this value; a value may follow
                kind.update(is_flag=False, flag_value=flag.flag_value)
        command = click.option(
            *decls, default=f.default, envvar=envvar, help=help_text, show_default=flag.show_default is True, **kind
        )(command)
    return command


@click.command("serve")
@config_options
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    envvar="EMBEDTEXT_TOKEN_FILE",
    help="Read the token from this file.",
)
def serve_command(**kwargs) -> None:
    """Serve embedding models over gRPC (embedtext.v1)."""
    from embedtext.server.app import configure_logging, serve

    token_file = kwargs.pop("token_file")
    if token_file:
        if kwargs["token"]:
            raise click.UsageError("give --token or --token-file, not both")
        kwargs["token"] = open(token_file, encoding="utf-8").read().strip()
    try:
        config = ServerConfig(**kwargs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    configure_logging(config.log_level)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING" if config.log_level.upper() != "DEBUG" else "DEBUG")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")
    from embedtext.server.engine.base import EngineStartError
    from embedtext.server.host.allocator import AllocatorError
    from embedtext.server.models import ModelSourceError

    try:
        asyncio.run(serve(config))
    except (ModelSourceError, AllocatorError, EngineStartError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
