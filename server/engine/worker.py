"""A replica's engine in a process of its own: ``python -m embedtext.server.engine.worker``.

Started by server/engine/process_backend.py with one end of a socketpair. It runs one backend
(vLLM's ``AsyncLLM``, vLLM's ``LLMEngine`` stepped here, or the null engine), reads ``EMBED``
frames, and answers each with the batch's vectors. vLLM's per-row request path (building,
sending and collecting one request per row) then runs here, on a core of its own, instead of in
the server's one event loop.

It exits when the server says ``STOP``, when the server's end of the socket closes (the
server died), on SIGTERM, or when its engine dies (the server sees the socket close and
restarts the replica). Ctrl-C is the server's to handle: this process ignores SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import sys

from embedtext.server.engine import frames
from embedtext.server.engine.base import WORKER_NAME, EngineRequestError, EngineSettings, ReplicaDeadError
from embedtext.server.engine.factory import make_backend
from embedtext.server.host.naming import PR_SET_PDEATHSIG, name_this_thread, prctl
from embedtext.server.host.quiet import quiet_python_warnings, third_party_env
from embedtext.server.models.source import spec_from_json

log = logging.getLogger("embedtext.server.engine.worker")

_WATCH_INTERVAL_S = 0.5


def _load_engine_code(kind: str) -> None:
    if kind in ("vllm-stepped", "vllm-packed"):
        from embedtext.server.engine.vllm_stepped import use_inprocess_engine

        use_inprocess_engine()
        import vllm.v1.engine.llm_engine  # noqa: F401


class EngineWorker:
    def __init__(self, backend, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, engine_kind: str) -> None:
        self.backend = backend
        self.engine_kind = engine_kind
        self.reader = reader
        self.writer = writer
        self.requests: dict[int, asyncio.Task] = {}
        self.stopping = asyncio.Event()

    def send(self, kind: int, request_id: int = 0, payload: bytes = b"", rows: int = 0, dim: int = 0) -> None:
        if not self.writer.is_closing():
            self.writer.write(frames.frame(kind, request_id, payload, rows, dim))

    async def run(self) -> int:
        # Load the engine's code (vLLM's imports take seconds) while other replicas start their
        # engines; build this one only when the server says so.
        try:
            await asyncio.to_thread(_load_engine_code, self.engine_kind)
            load_error = None
        except Exception as exc:  # reported as the start's failure, below
            load_error = exc
        reading = asyncio.ensure_future(frames.read_frame(self.reader))
        stopped = asyncio.ensure_future(self.stopping.wait())  # SIGTERM while waiting for our turn
        await asyncio.wait({reading, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not reading.done():
            reading.cancel()
            return 0
        found = reading.result()
        if found is None or found.kind == frames.STOP:
            return 0
        if found.kind != frames.START:
            raise frames.FrameError(f"expected a start frame, got kind {found.kind}")
        try:
            if load_error is not None:
                raise load_error
            path = self.backend.spec.path
            if not path.is_dir():  # say so plainly, not as an engine's traceback
                raise FileNotFoundError(f"the model directory {path} is gone")
            await self.backend.start()
        except Exception as exc:
            log.exception("%s did not start", self.backend.name)
            self.send(frames.FAILED, payload=f"{type(exc).__name__}: {exc}".encode())
            await self.writer.drain()
            return 1
        ready = {"pids": self.backend.pids, "loop": self.backend.loop}
        self.send(frames.READY, payload=json.dumps(ready).encode())
        await self.writer.drain()
        watching = [
            asyncio.create_task(self._read_requests()),
            asyncio.create_task(self._watch_engine()),
            asyncio.create_task(self.stopping.wait()),
        ]
        await asyncio.wait(watching, return_when=asyncio.FIRST_COMPLETED)
        for task in watching:
            task.cancel()
        for task in self.requests.values():
            task.cancel()
        await asyncio.gather(*watching, *self.requests.values(), return_exceptions=True)
        await self.backend.stop()
        return 0

    async def _read_requests(self) -> None:
        while True:
            found = await frames.read_frame(self.reader)
            if found is None or found.kind == frames.STOP:
                return
            if found.kind == frames.ABORT:
                task = self.requests.get(found.request_id)
                if task is not None:
                    task.cancel()  # the backend aborts the rows in the engine
            elif found.kind == frames.EMBED:
                # A packed engine keeps the rows flat, as they came; the others take a list per row.
                decode = frames.decode_token_rows if self.engine_kind == "vllm-packed" else frames.decode_rows
                rows = decode(found.payload, found.rows)
                task = asyncio.create_task(self._embed(found.request_id, rows, interactive_rows=found.dim))
                self.requests[found.request_id] = task
                task.add_done_callback(lambda _t, rid=found.request_id: self.requests.pop(rid, None))
            else:
                raise frames.FrameError(f"unexpected frame kind {found.kind}")

    async def _embed(self, request_id: int, rows: list[list[int]], interactive_rows: int) -> None:
        try:
            vectors = await self.backend.embed(rows, interactive_rows)
        except ReplicaDeadError as exc:
            self.send(frames.DEAD, request_id, str(exc).encode())
            self.stopping.set()  # the server restarts this replica as a new process
            return
        except EngineRequestError as exc:
            self.send(frames.REFUSED, request_id, str(exc).encode())
            return
        except Exception as exc:
            log.exception("%s failed a batch", self.backend.name)
            self.send(frames.REFUSED, request_id, f"{type(exc).__name__}: {exc}".encode())
            return
        vectors = vectors.astype("<f4", copy=False)
        spent = self.backend.take_model_seconds()
        if spent > 0.0:  # ahead of the vectors: the server counts it before the batch is done
            self.send(frames.MODEL_TIME, payload=frames.SECONDS.pack(spent))
        self.send(frames.VECTORS, request_id, vectors.tobytes(), rows=vectors.shape[0], dim=vectors.shape[1])
        await self.writer.drain()

    async def _watch_engine(self) -> None:
        reported = None
        while self.backend.alive:
            pace = self.backend.pace
            if pace is not None and pace != reported:  # the server shows it (Info, metrics): the budget lives here
                self.send(frames.PACE, payload=json.dumps(dataclasses.asdict(pace)).encode())
                reported = pace
            await asyncio.sleep(_WATCH_INTERVAL_S)
        log.error("%s: the engine stopped; exiting so the server restarts this replica", self.backend.name)


async def _main(args: argparse.Namespace, settings: EngineSettings) -> int:
    loop = asyncio.get_running_loop()
    sock = socket.socket(fileno=args.fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    spec = spec_from_json(args.spec)
    worker = EngineWorker(
        make_backend(spec, settings, engine=args.engine, own_process=False, name=args.name), reader, writer, args.engine
    )
    loop.add_signal_handler(signal.SIGTERM, worker.stopping.set)
    try:
        return await worker.run()
    finally:
        writer.close()


def _lower_priority(by: int) -> None:
    """Lower every thread of this process by ``by`` nice levels (Linux keeps a priority per thread,
    and some start at import: OpenBLAS's); threads started later keep their starter's."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # not Linux: the process's own
        os.nice(by)
        return
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + by, 19))
        except ProcessLookupError:  # ended meanwhile
            pass


def _lower_session_priority(nice: int) -> None:
    """Lower this worker's session against the host's other sessions: with the kernel's autogroups
    (Linux's default outside cpu cgroups) a process's nice weighs only against its own session's,
    and a session of busy engine threads takes cores from a query's client in another at equal
    weight. The worker leads a session of its own (``start_new_session``) for this. Also dies with
    the server that started it, as its session no longer does."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # not Linux: the socket's end still stops it
    if os.getsid(0) != os.getpid():
        return
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:  # no autogroups here (a cpu cgroup's weight rules instead)
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m embedtext.server.engine.worker")
    parser.add_argument("--fd", type=int, required=True, help="this process's end of the server's socketpair")
    parser.add_argument("--name", required=True)
    parser.add_argument("--engine", choices=("vllm-stepped", "vllm-packed", "null"), default="vllm-packed")
    parser.add_argument("--spec", required=True, help="the ModelSpec as JSON")
    parser.add_argument("--settings", required=True, help="the EngineSettings as JSON")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--process-name", default=WORKER_NAME, help="what ps and top show (15 characters)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_thread(args.process_name)  # the main thread: what ps and top show for the process
    settings = EngineSettings(**json.loads(args.settings))
    if settings.nice:
        _lower_priority(settings.nice)
        _lower_session_priority(settings.nice)
    logging.basicConfig(
        level=args.log_level.upper(), format=f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s"
    )
    for name, value in third_party_env(args.log_level).items():  # before vLLM and torch are imported
        os.environ.setdefault(name, value)
    quiet_python_warnings(args.log_level)
    return asyncio.run(_main(args, settings))


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown: with the engine already stopped, only
    torch's and vLLM's modules are left to unload, which takes seconds per replica and nothing
    of ours needs (a server's stop and a replica's restart wait for it)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
