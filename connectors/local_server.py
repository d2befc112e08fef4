"""Start an ``embedtext serve`` process on this machine and stop it again.

Used by ``embedtext demo``, by the DuckDB function's co-deployed default, and by the tests.
The server runs as a child process (``python -m embedtext.server``) on a private Unix socket
unless a port is given; its log goes to a file whose tail is shown if it fails to start.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from embedtext.protocol import EVERY_ENGINE_UP_LINE, READY_LINE
from embedtext.protocol.errors import UnavailableError

# The server's token settings, never handed to a private child server (EMBEDTEXT_TOKENIZER_THREADS is).
_SECRETS = ("EMBEDTEXT_TOKEN", "EMBEDTEXT_TOKEN_FILE")
# How the server's own warnings appear in its log (server/app.py's logging format).
_SERVER_WARNING = " WARNING embedtext.server: "


class LocalServer:
    """A child ``embedtext serve`` process.

    Args:
        models: ``--model`` values (``default``, a directory, or ``NAME=SOURCE``).
        replicas: bulk engines per model (None: the server's own choice, ``--replicas`` unset).
        port: listen on 127.0.0.1:port instead of a Unix socket.
        args: further ``embedtext serve`` flags.
        python: the interpreter to run it with (another environment's); default this one.
    """

    def __init__(
        self,
        models: Sequence[str] = ("default",),
        *,
        replicas: int | None = None,
        port: int | None = None,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        python: str | None = None,
    ) -> None:
        self._dir = tempfile.mkdtemp(prefix="embedtext-")
        self.uds = None if port is not None else os.path.join(self._dir, "embedtext.sock")
        self.port = port
        self.target = f"unix:{self.uds}" if self.uds else f"127.0.0.1:{port}"
        self.log_path = Path(log_path) if log_path else Path(self._dir) / "server.log"
        cmd = [python or sys.executable, "-m", "embedtext.server"]
        cmd += ["--replicas", str(replicas)] if replicas is not None else []
        for model in models:
            cmd += ["--model", model]
        cmd += ["--uds", self.uds] if self.uds else ["--port", str(port)]
        self.command = cmd + ["--stop-on-stdin-eof", *args]
        # A private server: security settings meant for a remote server (EMBEDTEXT_TLS_*,
        # EMBEDTEXT_TOKEN, EMBEDTEXT_TOKEN_FILE) are not inherited; pass them in args or env to use them.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDTEXT_TLS_") and k not in _SECRETS}
        self.env = {**inherited, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), **(env or {})}
        self.process: subprocess.Popen | None = None

    def start(self) -> LocalServer:
        log = open(self.log_path, "ab")
        # Its standard input is a pipe that this process never writes: the pipe closes when this
        # process ends, however it ends, and an embedtext server then stops (--stop-on-stdin-eof).
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        atexit.register(self.stop)  # never leave a server (and its engines) behind
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _failure(self, what: str, lines: int = 40) -> str:
        """``what`` went wrong, led by the server's own error and warnings (its last lines may be an
        engine's noise), then where its log is and its last ``lines``."""
        try:
            log = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            log = []
        errors = [line.removeprefix("Error: ") for line in log if line.startswith("Error: ")]
        warnings = [line.split(_SERVER_WARNING, 1)[1] for line in log if _SERVER_WARNING in line]
        return "\n".join(
            [
                f"{what}: {errors[-1]}" if errors else f"{what}.",
                *(f"  its warning: {warning}" for warning in warnings),
                f"its log, {self.log_path}, ends:",
                *log[-lines:],
            ]
        )

    def wait_ready(self, timeout: float = 600.0, on_wait=None, *, every_engine: bool = False) -> None:
        """Block until the server logs that it is ready; raise with its log if it dies first.

        A server on a CPU is ready once each model's first engine is up, and starts its others
        behind it; ``every_engine`` waits for those too (for measurements at full speed)."""
        line = (EVERY_ENGINE_UP_LINE if every_engine else READY_LINE).encode()
        deadline = time.monotonic() + timeout
        while True:
            if self.process is None:
                raise RuntimeError("start() the server first")
            if self.process.poll() is not None:
                raise UnavailableError(
                    self._failure(f"the embedtext server exited with code {self.process.returncode} while starting"),
                    target=self.target,
                )
            try:
                if line in self.log_path.read_bytes():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                what = "start every engine" if every_engine else "become ready"
                raise UnavailableError(
                    self._failure(f"the embedtext server did not {what} in {timeout:.0f}s"), target=self.target
                )
            if on_wait is not None:
                on_wait()
            time.sleep(0.25)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self, timeout: float = 30.0) -> None:
        atexit.unregister(self.stop)
        if self.process is None:
            return
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
        finally:
            if self.process.stdin is not None:
                self.process.stdin.close()

    def __enter__(self) -> LocalServer:
        self.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
