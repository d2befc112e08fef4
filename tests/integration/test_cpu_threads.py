"""On a small CPU machine the engines compute on the cores the server gives them
(server/host/cpu_threads.py, server/config/resolve.py).

vLLM-CPU keeps one core per engine for its scheduler by default, which on 2 cores leaves the
model one OpenMP thread. Checked on the session's real server, on its defaults: each stepped
engine, built in its replica's own process, says in the log how many threads it computes on, and
a bulk engine's worker starts with as many OpenMP threads.
"""

import os
import re
from pathlib import Path

import psutil
import pytest

from embedtext.server.config.resolve import resolve
from embedtext.server.config.settings import ServerConfig
from embedtext.server.host.cpu_threads import RESERVED_VAR, SMALL_MACHINE_CORES, usable_cores


def _physical_cores() -> int:
    siblings = set()
    for cpu in os.sched_getaffinity(0):
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        siblings.add(path.read_text().strip() if path.exists() else str(cpu))
    return len(siblings)


def _environ(process: psutil.Process) -> dict[str, str]:
    """The environment a process started with. Read from /proc directly: vLLM renames its processes
    (setproctitle), which leaves the start of that area holding title bytes psutil stops at."""
    try:
        raw = Path(f"/proc/{process.pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)
    return dict(pair for pair in pairs if len(pair) == 2)


@pytest.mark.skipif(usable_cores() > SMALL_MACHINE_CORES, reason="vLLM's own thread binding applies on larger machines")
@pytest.mark.skipif(RESERVED_VAR in os.environ, reason=f"{RESERVED_VAR} set by the user wins")
def test_engine_workers_use_every_core_on_a_small_machine(servers):
    if servers.minilm.pid is None:
        pytest.skip("external test servers: their environment is theirs")
    tree = psutil.Process(servers.minilm.pid).children(recursive=True)
    workers = [p for p in tree if "OMP_NUM_THREADS" in _environ(p)]
    stepped = [int(n) for n in re.findall(r"the engine computes on (\d+) threads", servers.minilm.log_path.read_text())]
    assert workers or stepped, (
        f"no engine worker with OMP_NUM_THREADS among {[p.name() for p in tree]}, no stepped engine"
    )
    # The defaults on this host: each bulk engine on its share of the cores, the interactive
    # replica's on every core (0: torch's own, which is every core here).
    default = resolve(ServerConfig(), "cpu")
    wanted = [default.bulk_threads or _physical_cores()] * default.replicas
    wanted += [default.interactive_threads or _physical_cores()] * int(default.interactive_replica)
    assert sorted(stepped) == sorted(wanted)
    for worker in workers:
        env = _environ(worker)
        assert int(env["OMP_NUM_THREADS"]) in set(wanted), f"worker {worker.pid}: {env['OMP_NUM_THREADS']} threads"


def _threads_named(pid: int, name: str) -> list[int]:
    """The threads of ``pid`` whose name (/proc/PID/task/TID/comm, what top -H shows) is ``name``."""
    found = []
    for thread in psutil.Process(pid).threads():
        try:
            if Path(f"/proc/{pid}/task/{thread.id}/comm").read_text().strip() == name:
                found.append(thread.id)
        except OSError:  # ended meanwhile
            pass
    return found


def test_each_stepped_engine_runs_on_a_named_thread(servers, minilm_client):
    """top -H finds an engine's own host work by its thread's name, and that thread does the work."""
    from embedtext.server.engine.base import ENGINE_THREAD_NAME

    if servers.minilm.pid is None:
        pytest.skip("external test servers: their processes are not ours to read")
    tree = [servers.minilm.pid] + [p.pid for p in psutil.Process(servers.minilm.pid).children(recursive=True)]
    named = {pid: _threads_named(pid, ENGINE_THREAD_NAME) for pid in tree}
    engines = sum(m.replicas for m in minilm_client.info(refresh=True).models)
    # An engine thread in each replica's worker. A thread it starts inherits its name (Linux copies
    # it to new threads), so after some work a worker may show more than one.
    assert sum(1 for tids in named.values() if tids) == engines, named
    assert not named[servers.minilm.pid]  # in the replicas' worker processes, not the server's

    def engine_cpu_s() -> float:
        times = {t.id: t.user_time + t.system_time for pid in named for t in psutil.Process(pid).threads()}
        return sum(times.get(tid, 0.0) for tids in named.values() for tid in tids)

    before = engine_cpu_s()
    minilm_client.embed([f"row {i} of a bulk call" for i in range(256)], latency_class="bulk")
    assert engine_cpu_s() > before
