"""`embedtext serve`: options for the settings a user sets, ``--set`` for the advanced ones, parsed into one
ServerConfig and run. Nothing else lives here."""

from __future__ import annotations

import asyncio
import difflib
import os
from dataclasses import fields
from typing import Any

import click

from embedtext.server.config.settings import Flag, ServerConfig, advanced_settings, parse_setting
from embedtext.server.host.quiet import third_party_env

ENV_PREFIX = "EMBEDTEXT_"


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
    """One click option per setting a user sets: its name, default, type, bounds and help come from
    the field (server/config/settings.py); ``EMBEDTEXT_<OPTION>`` gives it from the environment."""
    for f in reversed(fields(ServerConfig)):
        flag: Flag = f.metadata["flag"]
        if flag.advanced:
            continue
        name = flag.option(f.name)
        help_text = flag.help
        if isinstance(flag.show_default, str):
            help_text += f" [default: {flag.show_default}]"
        kind = {"type": _click_type(str(f.type), flag), "multiple": str(f.type).startswith("tuple")}
        command = click.option(
            f"--{name}",
            f.name,
            default=f.default,
            envvar=ENV_PREFIX + name.replace("-", "_").upper(),
            help=help_text,
            show_default=flag.show_default is True,
            **kind,
        )(command)
    return command


def advanced_values(assignments: tuple[str, ...], environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The advanced settings given: each ``EMBEDTEXT_<NAME>`` in the environment, then each ``--set NAME=VALUE``
    (a later one wins). An unknown name or a malformed value is a ValueError that says what is known.

    >>> advanced_values(("max_batch_rows=64", "engine-loop=packed"), {"EMBEDTEXT_MAX_BATCH_ROWS": "32"})
    {'max_batch_rows': 64, 'engine_loop': 'packed'}
    >>> advanced_values(("max_batch_row=64",), {})
    Traceback (most recent call last):
    ...
    ValueError: --set max_batch_row: no such setting (did you mean max_batch_rows?); --set help lists them
    """
    environ = os.environ if environ is None else environ
    known = advanced_settings()
    values: dict[str, Any] = {}
    for name in known:
        if ENV_PREFIX + name.upper() in environ:
            values[name] = parse_setting(name, environ[ENV_PREFIX + name.upper()])
    for assignment in assignments:
        raw_name, equals, text = assignment.partition("=")
        name = raw_name.strip().replace("-", "_")
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"--set {raw_name}: no such setting{hint}; --set help lists them")
        if not equals:
            raise ValueError(f"--set {raw_name}: give NAME=VALUE")
        values[name] = parse_setting(name, text.strip())
    return values


def advanced_help() -> str:
    """The advanced settings, one line each: ``--set help`` prints it."""
    lines = ["Advanced settings: --set NAME=VALUE (repeatable) or EMBEDTEXT_NAME=VALUE (docs/tuning.md).", ""]
    defaults = {f.name: f.default for f in fields(ServerConfig)}
    for name, flag in advanced_settings().items():
        shown = flag.show_default if isinstance(flag.show_default, str) else defaults[name]
        choices = f" ({'|'.join(flag.choices)})" if flag.choices else ""
        lines.append(f"  {name}{choices}  [default: {shown}]\n      {flag.help}")
    return "\n".join(lines)


def _config(params: dict[str, Any]) -> ServerConfig:
    """The ServerConfig of ``embedtext serve``'s parsed options; a UsageError says what is wrong."""
    params = dict(params)
    assignments, token_file = params.pop("assignments"), params.pop("token_file")
    params.pop("stop_on_stdin_eof", None)
    if token_file:
        if params["token"]:
            raise click.UsageError("give --token or --token-file, not both")
        params["token"] = open(token_file, encoding="utf-8").read().strip()
    try:
        return ServerConfig(**params, **advanced_values(assignments))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def config_from_args(args: list[str]) -> ServerConfig:
    """What ``embedtext serve ARGS`` would run with, in this environment, without starting it."""
    return _config(serve_command.make_context("serve", list(args)).params)


@click.command(
    "serve",
    epilog="Advanced settings: --set NAME=VALUE or EMBEDTEXT_NAME; '--set help' lists them (docs/tuning.md).",
)
@config_options
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    envvar="EMBEDTEXT_TOKEN_FILE",
    help="Read the token from this file.",
)
@click.option("--set", "assignments", multiple=True, metavar="NAME=VALUE", help="An advanced setting ('--set help').")
# For a parent that starts a private server (connectors/local_server.py): its end of the pipe closes
# however it ends, a SIGKILL or a crash included, and the server stops with it.
@click.option("--stop-on-stdin-eof", is_flag=True, hidden=True, help="Stop when standard input closes.")
def serve_command(**kwargs) -> None:
    """Serve embedding models over gRPC (embedtext.v1)."""
    from embedtext.server.app import configure_logging, serve

    if "help" in kwargs["assignments"]:
        click.echo(advanced_help())
        return
    config = _config(kwargs)
    configure_logging(config.log_level)
    for name, value in third_party_env(config.log_level).items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")
    from embedtext.server.engine.base import EngineStartError
    from embedtext.server.host.allocator import AllocatorError
    from embedtext.server.models.source import ModelSourceError

    try:
        asyncio.run(serve(config, stop_on_stdin_eof=kwargs["stop_on_stdin_eof"]))
    except (ModelSourceError, AllocatorError, EngineStartError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
