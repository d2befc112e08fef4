"""The settings as given: where a server may listen, bounds, `embedtext serve`'s options, --set and the environment."""

import os

import pytest

from embedtext.server.config.settings import ServerConfig, advanced_settings


def test_loopback_and_uds_are_allowed():
    assert ServerConfig().address == "127.0.0.1:50051"
    assert ServerConfig(host="::1").address == "[::1]:50051"
    assert ServerConfig(uds="/tmp/x.sock", host="0.0.0.0").address == "unix:/tmp/x.sock"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com"])
def test_wider_binds_are_refused_without_tls(host):
    with pytest.raises(ValueError, match="loopback"):
        ServerConfig(host=host)


def test_bounds_must_be_positive():
    with pytest.raises(ValueError, match="max_queued_rows"):
        ServerConfig(max_queued_rows=0)


def test_the_engine_loop_is_stepped_or_packed():
    with pytest.raises(ValueError, match="engine_loop must be stepped or packed, not 'async'"):
        ServerConfig(engine_loop="async")


def test_interactive_threads_need_an_interactive_replica():
    with pytest.raises(ValueError, match="interactive_threads sets the threads of the interactive replica's"):
        ServerConfig(interactive_threads=1, interactive_replica="off")
    ServerConfig(interactive_replica="off")  # unset: fine


def test_an_advanced_setting_comes_from_set_or_the_environment_and_set_wins():
    assert _serve_config(["--set", "interactive_replica=off"]).interactive_replica == "off"
    assert _serve_config(["--set", "max-batch-rows=64"]).max_batch_rows == 64  # dashes as the options have them
    env = {"EMBEDTEXT_MAX_BATCH_ROWS": "32", "EMBEDTEXT_ENFORCE_EAGER": "off"}
    assert (_serve_config([], env=env).max_batch_rows, _serve_config([], env=env).enforce_eager) == (32, "off")
    assert _serve_config(["--set", "max_batch_rows=64"], env=env).max_batch_rows == 64
    assert _serve_config(["--set", "bulk_threads=auto"]).bulk_threads is None


def test_serve_help_lists_the_user_settings_and_set_help_the_advanced_ones():
    from click.testing import CliRunner

    from embedtext.server import cli

    shown = CliRunner().invoke(cli.serve_command, ["--help"]).output
    options = [line.split()[0] for line in shown.splitlines() if line.strip().startswith("--")]
    assert len([o for o in options if o not in ("-h,", "--help")]) <= 15, options
    assert "--set" in options and "--max-batch-tokens" not in shown
    listed = CliRunner().invoke(cli.serve_command, ["--set", "help"]).output
    assert all(f"  {name}" in listed for name in advanced_settings()) and "  engine_loop" in listed


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("max_batch_row=64", "no such setting (did you mean max_batch_rows?)"),
        ("max_batch_rows", "give NAME=VALUE"),
        ("max_batch_rows=many", "max_batch_rows takes a whole number, not 'many'"),
        ("max_batch_rows=0", "max_batch_rows must be at least 1, not 0"),
        ("max_batch_delay_ms=soon", "max_batch_delay_ms takes a number, not 'soon'"),
        ("idle_dispatch=off", "no such setting"),  # a settled experiment is no setting (docs/tuning.md)
        ("tls_client_ca=/no/such/ca.pem", "tls_client_ca: no file /no/such/ca.pem"),
        ("model=x", "no such setting"),  # a setting with an option of its own is not set this way
    ],
)
def test_a_bad_set_is_refused_with_what_is_wrong(assignment, message):
    from click.testing import CliRunner

    from embedtext.server import cli

    result = CliRunner().invoke(cli.serve_command, ["--set", assignment])
    assert result.exit_code == 2 and message in result.output, result.output


def test_enforce_eager_takes_a_value():
    assert _serve_config(["--set", "enforce_eager=on"]).enforce_eager == "on"
    assert _serve_config(["--set", "enforce_eager=off"]).enforce_eager == "off"
    assert _serve_config([], env={"EMBEDTEXT_ENFORCE_EAGER": "on"}).enforce_eager == "on"
    assert _serve_config([]).enforce_eager == "auto"


def test_a_config_built_in_code_is_held_to_the_options_bounds():
    with pytest.raises(ValueError, match="memory_fraction must be at most 1"):
        ServerConfig(memory_fraction=1.5)
    with pytest.raises(ValueError, match="--dtype must be auto, float32, bfloat16 or float16"):
        ServerConfig(dtype="fp8")
    assert ServerConfig(log_level="debug").log_level == "debug"  # as the option takes it


def _serve_config(args: list[str], env: dict | None = None) -> ServerConfig:
    """What `embedtext serve ARGS` would run with (the server itself not started)."""
    from unittest import mock

    from click.testing import CliRunner

    from embedtext.server import app, cli

    seen = []

    async def record(config, *, stop_on_stdin_eof=False):
        seen.append(config)

    with mock.patch.object(app, "serve", record), mock.patch.object(app, "configure_logging"):
        # The test session's own EMBEDTEXT_* settings (conftest) are not this command's.
        clean = {name: None for name in os.environ if name.startswith("EMBEDTEXT_")}
        result = CliRunner().invoke(cli.serve_command, args, env={**clean, **(env or {})})
    assert result.exit_code == 0, result.output
    return seen[0]


def test_every_config_field_is_an_option_with_the_fields_default():
    from dataclasses import fields

    from embedtext.server.cli import serve_command
    from embedtext.server.config.settings import advanced_settings

    options = {p.name for p in serve_command.params}
    assert {f.name for f in fields(ServerConfig)} - set(advanced_settings()) <= options
    assert not set(advanced_settings()) & options  # the advanced ones only through --set
    assert _serve_config([]) == ServerConfig()


def test_options_and_environment_variables_reach_the_config():
    config = _serve_config(
        [
            "--model",
            "a",
            "--model",
            "b=dir",
            "--replicas",
            "3",
            "--interactive-slo-ms",
            "100",
            "--set",
            "tokenizer_threads=3",
        ],
        env={"EMBEDTEXT_MAX_BATCH_TOKENS": "512", "EMBEDTEXT_ENGINE_LOOP": "stepped"},
    )
    assert config.models == ("a", "b=dir") and config.replicas == 3
    assert config.interactive_slo_ms == 100 and config.tokenizer_threads == 3
    assert config.max_batch_tokens == 512 and config.engine_loop == "stepped"


def test_the_options_refuse_what_the_config_refuses():
    from click.testing import CliRunner

    from embedtext.server import cli

    for args, message in (
        (["--replicas", "0"], "x>=1"),
        (["--set", "engine_loop=own"], "engine_loop must be stepped or packed, not 'own'"),
        (["--dtype", "fp8"], "'fp8' is not one of"),
    ):
        result = CliRunner().invoke(cli.serve_command, args)
        assert result.exit_code == 2 and message in result.output, result.output


def test_bulk_nice_needs_an_interactive_replica():
    with pytest.raises(ValueError, match="bulk_nice lowers the bulk engines' priority beside an interactive"):
        ServerConfig(bulk_nice=10, interactive_replica="off")
    with pytest.raises(ValueError, match="bulk_nice"):
        ServerConfig(bulk_nice=20)  # beyond the host's range
    ServerConfig(bulk_nice=0, interactive_replica="off")  # the same priority: fine
