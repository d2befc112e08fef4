"""What a private child server inherits from its parent's environment."""

from embedtext.connectors.local_server import LocalServer


def test_a_child_server_gets_the_settings_but_not_the_remote_servers_secrets(monkeypatch):
    for name, value in {
        "EMBEDTEXT_TOKEN": "s3cret",
        "EMBEDTEXT_TOKEN_FILE": "/run/token",
        "EMBEDTEXT_TLS_CA": "ca.pem",
        "EMBEDTEXT_TOKENIZER_THREADS": "3",
        "EMBEDTEXT_HOLD_BULK_TOKENIZING": "false",
    }.items():
        monkeypatch.setenv(name, value)
    env = LocalServer(["tiny=/nowhere"]).env
    assert "EMBEDTEXT_TOKEN" not in env and "EMBEDTEXT_TOKEN_FILE" not in env and "EMBEDTEXT_TLS_CA" not in env
    assert env["EMBEDTEXT_TOKENIZER_THREADS"] == "3" and env["EMBEDTEXT_HOLD_BULK_TOKENIZING"] == "false"


def test_a_server_that_fails_to_start_leads_with_its_own_error():
    """A real child server given a model that is not there: the caller's error says why on its first line."""
    import pytest

    from embedtext.protocol.errors import UnavailableError

    server = LocalServer(["tiny=/nowhere"]).start()
    with pytest.raises(UnavailableError) as raised:
        server.wait_ready(120)
    first, *rest = str(raised.value).splitlines()
    assert first.startswith("the embedtext server exited with code 1 while starting: model source '/nowhere'")
    assert f"its log, {server.log_path}, ends:" in rest


def test_the_servers_warnings_come_before_its_logs_tail(tmp_path):
    """An engine's noise may fill the log's last lines: the server's own warnings (why it may have
    failed, such as too little memory) are lifted out of the whole log."""
    log = tmp_path / "server.log"
    warning = "too little memory: 1 engine would take about 1.6 GiB where 1.0 GiB is available to the server"
    noise = [f"(MainProcess pid=7) WARNING [utils.py:333] weight {i}" for i in range(60)]
    log.write_text("\n".join([f"2026-11-28 15:55:49,170 WARNING embedtext.server: {warning}", *noise]) + "\n")
    message = LocalServer(["tiny=/nowhere"], log_path=log)._failure("the embedtext server did not become ready in 5s")
    lines = message.splitlines()
    assert lines[:2] == ["the embedtext server did not become ready in 5s.", f"  its warning: {warning}"]
    assert lines[-40:] == noise[-40:] and warning not in "\n".join(lines[2:])


def test_waiting_for_every_engine_waits_past_ready(tiny_model_dir):
    """A real child server on the NULL ENGINE (a stand-in: the order of its start is what is tested)
    with two engines on a CPU: ready with the first, then every engine up, and Info counts none
    still starting."""
    from embedtext import Client
    from embedtext.protocol import EVERY_ENGINE_UP_LINE, READY_LINE

    server = LocalServer(
        [f"tiny={tiny_model_dir}"], replicas=2, args=["--set", "engine=null", "--device", "cpu"]
    ).start()
    try:
        server.wait_ready(120, every_engine=True)
        with Client(server.target) as client:
            model = client.info().model()
        log = server.log_path.read_text().splitlines()
    finally:
        server.stop()
    assert (model.replicas, model.starting_replicas) == (2, 0)
    later = [i for i, line in enumerate(log) if "starting replica 1 (bulk work) after the server is ready" in line]
    assert len(later) == 1 and log.index(READY_LINE) < later[0] < log.index(EVERY_ENGINE_UP_LINE), log


def test_a_child_server_stops_when_its_parent_is_killed(tiny_model_dir, tmp_path):
    """A parent killed by a signal runs no cleanup of its own: its real child server (NULL ENGINE, a
    stand-in: only its life is tested) sees its standard input close and stops."""
    import subprocess
    import sys

    import psutil

    parent = (
        "import os, signal\n"
        "from embedtext.connectors.local_server import LocalServer\n"
        f"server = LocalServer(['tiny={tiny_model_dir}'], replicas=1, args=['--set', 'engine=null']).start()\n"
        "server.wait_ready(120)\n"
        "print(server.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=180)
    assert run.returncode == -9, run.stderr
    server = psutil.Process(int(run.stdout))
    try:
        server.wait(timeout=60)  # returns once the orphaned server has exited
    except psutil.TimeoutExpired:
        server.kill()
        raise AssertionError("the server outlived the parent that started it") from None
