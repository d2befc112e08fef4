"""The co-deployed default server: one ``embedtext serve`` per process, started on first use.

``embedtext.register(con)`` with no target uses it: the default model on a private Unix
socket, shared by every connection of the process and stopped when the process exits.
"""

from __future__ import annotations

import sys
import threading
import time

from embedtext.connectors.local_server import LocalServer

_lock = threading.Lock()
_server: LocalServer | None = None


def default_target(models: tuple[str, ...] = ("default",), timeout: float = 900.0) -> str:
    """The target of the process's co-deployed server, starting it if needed."""
    global _server
    with _lock:
        if _server is not None and _server.process is not None and _server.process.poll() is None:
            return _server.target
        server = LocalServer(models)
        print(f"embedtext: starting a co-deployed server for {', '.join(models)} ...", file=sys.stderr, flush=True)
        server.start()
        started = time.monotonic()
        last = [started]

        def progress() -> None:
            now = time.monotonic()
            if now - last[0] >= 15:
                last[0] = now
                print(
                    f"embedtext: still starting ({now - started:.0f}s; log: {server.log_path})",
                    file=sys.stderr,
                    flush=True,
                )

        try:
            server.wait_ready(timeout, on_wait=progress)
        except BaseException:
            server.stop()
            raise
        _server = server
        _echo_allocator(server)
        return server.target


def _echo_allocator(server: LocalServer) -> None:
    """Show the server's engine-allocator line (on a CPU without tcmalloc it says how to get it)."""
    try:
        lines = server.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        if "engine allocator:" in line:
            print("embedtext: " + line[line.index("engine allocator:") :], file=sys.stderr, flush=True)
            return
