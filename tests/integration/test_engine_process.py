"""A replica's engine in a worker process of its own (server/engine/process_backend.py, worker.py).

Here with the null engine (no model: vectors from the token ids), so the worker process, the socketpair and
the frames are real and quick to start; the vLLM engines in worker processes are the session's
servers, which the service, fault and DuckDB tests use, including killing an engine under load
(test_embedding_service).
"""

import asyncio
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from embedtext.server.engine.base import WORKER_NAME, EngineSettings, EngineStartError, ReplicaDeadError
from embedtext.server.engine.null_backend import NullBackend
from embedtext.server.engine.process_backend import EngineProcessBackend
from embedtext.server.models.source import load_model_spec

SETTINGS = EngineSettings(memory_fraction=0.1, max_batch_tokens=2048, max_num_seqs=64, device="cpu")
ROWS = [[101, 7, 102], [101, 102], list(range(1, 129)), [5]]


@pytest.fixture
def spec(tiny_model_dir):
    return load_model_spec(str(tiny_model_dir), name="tiny")


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def _process_name(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def test_worker_process_returns_what_the_engine_returns(spec):
    async def scenario():
        inline = NullBackend(spec)
        await inline.start()
        expected = await inline.embed(ROWS)
        backend = EngineProcessBackend(spec, SETTINGS, name="tiny/0", engine="null")
        await backend.start()
        try:
            worker = backend.pids[0]
            assert worker != os.getpid() and backend.alive
            name = _process_name(worker)
            # Batches in flight at once come back to their own callers.
            batches = [ROWS[i:] for i in range(len(ROWS))]
            got = await asyncio.gather(*(backend.embed(b) for b in batches))
        finally:
            await backend.stop()
        return expected, got, name, worker, backend.alive

    expected, got, name, worker, alive_after_stop = _run(scenario())
    for i, vectors in enumerate(got):
        assert vectors.dtype == np.float32
        np.testing.assert_array_equal(vectors, expected[i:])
    assert name == WORKER_NAME
    assert not alive_after_stop and not os.path.exists(f"/proc/{worker}")


def test_a_killed_worker_fails_its_batches_as_a_dead_replica(spec):
    """The batch in flight fails with ReplicaDeadError (the runtime retries it elsewhere and the
    supervisor restarts the replica); later batches fail at once instead of hanging."""

    async def scenario():
        backend = EngineProcessBackend(spec, SETTINGS, name="tiny/0", engine="null")
        await backend.start()
        worker = backend.pids[0]
        os.kill(worker, signal.SIGSTOP)  # the batch below cannot be answered before the kill
        in_flight = asyncio.ensure_future(backend.embed(ROWS))
        await asyncio.sleep(0.2)
        assert not in_flight.done()
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(ReplicaDeadError, match="tiny/0 died"):
            await in_flight
        for _ in range(50):
            if not backend.alive:
                break
            await asyncio.sleep(0.1)
        alive = backend.alive
        with pytest.raises(ReplicaDeadError, match="not running"):
            await backend.embed(ROWS)
        await backend.stop()
        return alive

    assert _run(scenario()) is False


def test_a_worker_that_cannot_start_says_why(spec, tmp_path):
    """A model directory that vanished before the worker read it: start() raises with the reason."""
    gone = spec.__class__(**{**spec.__dict__, "path": tmp_path / "gone"})

    async def scenario():
        backend = EngineProcessBackend(gone, SETTINGS, name="tiny/0", engine="null")
        with pytest.raises(
            RuntimeError, match=r"tiny/0's engine process did not start \(model tiny at .*gone, engine null\): .*gone"
        ):
            await backend.start()
        return backend.alive

    assert _run(scenario()) is False


@pytest.mark.parametrize(
    "how,engine,ending,setting",
    [
        (signal.SIGKILL, "null", "killed by SIGKILL: the kernel's out-of-memory killer", "Fewer engines (--replicas 1"),
        (signal.SIGSEGV, "vllm-packed", "killed by SIGSEGV", "--set engine_loop=stepped"),
    ],
)
def test_a_worker_killed_before_it_was_ready_says_how_it_ended(spec, how, engine, ending, setting):
    """SIGKILL is what the kernel's out-of-memory killer sends, SIGSEGV a crash in native code: the
    error names the model, the engine, how its process ended, and the setting to change."""

    async def scenario():
        backend = EngineProcessBackend(spec, SETTINGS, name="tiny/0", engine=engine)
        await backend.spawn()
        os.kill(backend.pids[0], how)
        await asyncio.wait_for(backend._process.wait(), 60)
        with pytest.raises(EngineStartError, match="did not start .*: it exited before it was ready") as raised:
            await backend.start()
        return str(raised.value), backend.alive

    message, alive = _run(scenario())
    assert f"(model tiny at {spec.path}, engine {engine})" in message
    assert ending in message and setting in message and not alive


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        caught = next(line for line in fh if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def test_a_worker_stopped_before_its_engine_started_exits(spec):
    """The supervisor spawns every worker at once and starts engines one by one: a server stopped
    in between (or a SIGTERM) ends the workers still waiting, without starting their engines."""

    async def scenario():
        stopped, terminated = (EngineProcessBackend(spec, SETTINGS, name=f"tiny/{i}", engine="null") for i in (0, 1))
        await stopped.spawn()
        await terminated.spawn()
        await stopped.stop()
        while not _catches_sigterm(terminated.pids[0]):  # past its start-up, waiting for its turn
            await asyncio.sleep(0.05)
        os.kill(terminated.pids[0], signal.SIGTERM)
        await asyncio.wait_for(terminated._process.wait(), 60)
        return [(b.pids[0], b._process.returncode) for b in (stopped, terminated)]

    for worker, code in _run(scenario()):
        assert code == 0 and not os.path.exists(f"/proc/{worker}")


def test_a_worker_lowers_its_priority_as_told_before_its_threads_start(spec):
    """``EngineSettings.nice`` (``--bulk-nice`` for the bulk engines): the worker process and every
    thread it starts (the engine's compute threads among them) run at that much lower priority."""
    import dataclasses

    import psutil

    async def scenario():
        backend = EngineProcessBackend(spec, dataclasses.replace(SETTINGS, nice=3), name="tiny/0", engine="null")
        await backend.start()
        try:
            np.testing.assert_array_equal(await backend.embed(ROWS[:1]), await backend.embed(ROWS[:1]))
            worker = psutil.Process(backend.pids[0])
            session = os.getsid(worker.pid), Path(f"/proc/{worker.pid}/autogroup").read_text().split()  # noqa: ASYNC240
            return {thread.id: psutil.Process(thread.id).nice() for thread in worker.threads()}, worker.pid, session
        finally:
            await backend.stop()

    threads, pid, (session, autogroup) = _run(scenario())
    assert len(threads) > 1, threads  # the worker's event loop started threads of its own
    assert set(threads.values()) == {min(os.nice(0) + 3, 19)}, threads
    # Its session is its own and lowered too: against the host's other sessions it weighs as nice 3.
    assert session == pid
    if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1":
        assert autogroup[-2:] == ["nice", "3"], autogroup
