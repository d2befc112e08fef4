"""Assemble and run the server: models -> runtimes -> gRPC server with health and reflection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from embedtext.protocol import EVERY_ENGINE_UP_LINE, KEEPALIVE_MS, READY_LINE
from embedtext.protocol import embedding_pb2 as pb
from embedtext.server.api.loop_lag import LoopLag
from embedtext.server.api.security import TokenAuthInterceptor, server_credentials
from embedtext.server.api.servicer import EmbeddingServicer, add_service
from embedtext.server.config.resolve import DECLINED, ResolvedSettings, resolve
from embedtext.server.config.settings import ServerConfig
from embedtext.server.engine.factory import backend_factory
from embedtext.server.host.tuning import host_tuning
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models.source import load_model_spec, parse_model_arg
from embedtext.server.scheduler.replicas import stop_side_by_side
from embedtext.server.scheduler.runtime import ModelRuntime

# At a stop, the calls still in flight are answered this long before gRPC cancels them.
ANSWER_BEFORE_GRACE_ENDS_S = 1.0
log = logging.getLogger("embedtext.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Embedding"].full_name


def build_runtimes(resolved: ResolvedSettings, metrics: ServerMetrics) -> list[ModelRuntime]:
    config = resolved.config
    interactive = 1 if resolved.interactive_replica else 0
    share = resolved.memory_fraction / (len(config.models) * (config.replicas + interactive))
    if resolved.stepped:
        log.info(
            "%d replica(s) per model, each a worker process holding its engine, stepped by the server's "
            "own loop (engine_loop=%s)",
            config.replicas,
            resolved.engine_loop,
        )
    else:
        log.info("%d replica(s) per model of the null engine: vectors from the token ids, no model", config.replicas)
    if interactive:
        log.info(
            "one more replica per model runs interactive requests only (%s): the other %d step their engines unpaced",
            resolved.interactive_replica_reason,
            config.replicas,
        )
    else:
        declined = resolved.interactive_replica_reason.startswith(DECLINED)
        log.log(
            logging.WARNING if declined else logging.INFO,
            "no interactive replica (%s)",
            resolved.interactive_replica_reason,
        )
    if resolved.split_reason:
        log.info(
            "bulk work on %d engines of %d thread each (%s): no engine's threads wait for each other while a "
            "query's step holds a core",
            resolved.replicas,
            resolved.bulk_threads,
            resolved.split_reason,
        )
    elif resolved.bulk_threads:
        log.info("the bulk engines' threads: %d each (bulk_threads)", resolved.bulk_threads)
    if resolved.split_declined:
        log.warning("bulk work on %d engine (%s)", resolved.replicas, resolved.split_declined)
    if resolved.memory_short:
        several = resolved.replicas + resolved.interactive_replica > 1
        log.warning(
            "too little memory: %s; the kernel may stop an engine for it (its error then says 'killed by SIGKILL'). %s",
            resolved.memory_short,
            "Fewer engines: --replicas 1, --set interactive_replica=off"
            if several
            else "A smaller model, or more memory",
        )
    if resolved.bulk_nice:
        log.info(
            "the bulk engines' worker processes run at nice %d, each in a session of its own: queries' steps, the "
            "server and the host's other processes take a core first (bulk_nice)",
            resolved.bulk_nice,
        )
    if resolved.interactive_threads:
        log.info("the interactive replica's engine threads: %d (interactive_threads)", resolved.interactive_threads)
    if resolved.interactive_gather_s:
        log.info(
            "while bulk work runs, a query waits up to %.0f ms for others to share its engine step "
            "(interactive_gather_ms)",
            resolved.interactive_gather_s * 1000,
        )
    log.info("%s", resolved.dtype.note)
    log.info("model %s: %s", "eager" if resolved.enforce_eager else "compiled", resolved.eager_reason)
    runtimes = []
    for arg in config.models:
        name, source = parse_model_arg(arg)
        spec = load_model_spec(source, name)
        settings = resolved.engine_settings(config, share)
        runtimes.append(
            ModelRuntime(
                spec,
                resolved,
                metrics,
                backend_factory(
                    spec,
                    settings,
                    engine=resolved.backend,
                    own_process=resolved.engine_processes,
                    interactive_settings=resolved.engine_settings(config, share, interactive=True)
                    if interactive
                    else None,
                    interactive_from=config.replicas,
                ),
            )
        )
    return runtimes


class EmbeddingServer:
    """The running server: gRPC listening first, engines started behind it."""

    def __init__(self, config: ServerConfig, resolved: ResolvedSettings | None = None) -> None:
        self.config = config
        self.resolved = resolved or resolve(config)
        self.metrics = ServerMetrics()
        self.runtimes = build_runtimes(self.resolved, self.metrics)
        self.loop_lag = LoopLag(self.metrics.event_loop_lag)
        self.servicer = EmbeddingServicer(self.runtimes, config, self.metrics, self.loop_lag)
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        options = [
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.so_reuseport", 0),
            # gRPC's default (one ping in 5 minutes without data) closes the connection of a client
            # whose call waits in the queue longer than two of its keepalive pings.
            ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
        ]
        interceptors = [TokenAuthInterceptor(config.token, self.metrics)] if config.token else []
        self.server = grpc.aio.server(
            options=options, maximum_concurrent_rpcs=config.max_concurrent_rpcs, interceptors=interceptors
        )
        self.credentials = server_credentials(config)
        add_service(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )
        self.bound_port: int | None = None
        self._watch_task: asyncio.Task | None = None
        self._loop_lag_task: asyncio.Task | None = None
        self._every_engine_task: asyncio.Task | None = None

    async def _set_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            result = self.health.set(name, status)
            if asyncio.iscoroutine(result):
                await result

    def _add_port(self, address: str) -> int:
        if self.credentials is not None:
            return self.server.add_secure_port(address, self.credentials)
        return self.server.add_insecure_port(address)

    async def start(self) -> None:
        if self.config.uds:
            _remove_socket(self.config.uds)  # a dead server's socket file would block the bind
            self._add_port(f"unix:{self.config.uds}")
        else:
            self.bound_port = self._add_port(self.config.address)
            if self.bound_port == 0:
                raise OSError(f"could not listen on {self.config.address} (port in use?)")
        await self._set_health(False)
        await self.server.start()
        self._loop_lag_task = asyncio.create_task(self.loop_lag.run(), name="event-loop-lag")
        where = self.config.address if self.config.uds else f"{self.config.host}:{self.bound_port}"
        guards = [
            name
            for name, on in (
                ("TLS", self.credentials),
                ("client certificates", self.config.tls_client_ca),
                ("token", self.config.token),
            )
            if on
        ]
        log.info("listening on %s (%s); starting engines", where, ", ".join(guards) or "plain, local only")
        print(f"embedtext: listening on {where}", flush=True)
        if self.config.metrics_port is not None:
            self.metrics.serve_http(self.config.metrics_port)
            log.info("metrics on http://127.0.0.1:%d/metrics", self.config.metrics_port)
        # Every model's first workers load their code at once; their engines start one after another.
        await asyncio.gather(*(runtime.supervisor.spawn_workers() for runtime in self.runtimes))
        for runtime in self.runtimes:
            await runtime.start()
        await self._set_health(True)
        self._watch_task = asyncio.create_task(self._watch_health())
        print(READY_LINE, flush=True)
        self._every_engine_task = asyncio.create_task(self._say_every_engine_up())

    async def _say_every_engine_up(self) -> None:
        """On a CPU the engines after each model's first start behind the ready server: say when
        all are up, for whoever measures or waits for full speed (LocalServer.wait_ready)."""
        started = time.monotonic()
        await asyncio.gather(*(rt.supervisor.every_engine_up.wait() for rt in self.runtimes))
        engines = sum(len(rt.supervisor.replicas) for rt in self.runtimes)
        log.info("every engine is up (%d), %.1f s after ready", engines, time.monotonic() - started)
        print(EVERY_ENGINE_UP_LINE, flush=True)

    async def _watch_health(self) -> None:
        serving = True
        while True:
            now = all(rt.ready for rt in self.runtimes)
            if now != serving:
                await self._set_health(now)
                serving = now
            await asyncio.sleep(0.5)

    async def stop(self, grace: float = 5.0) -> None:
        for task in (self._watch_task, self._loop_lag_task, self._every_engine_task):
            if task is not None:
                task.cancel()
        await self._set_health(False)
        # New calls are refused at once and those in flight get ``grace`` to finish. What is left is
        # answered UNAVAILABLE ("shutting down": a client retries elsewhere) before gRPC would cancel it.
        stopping = asyncio.ensure_future(self.server.stop(grace))
        await asyncio.wait({stopping}, timeout=max(0.0, grace - ANSWER_BEFORE_GRACE_ENDS_S))
        await stop_side_by_side(runtime.stop() for runtime in self.runtimes)  # each model's replicas too
        await stopping
        if self.config.uds:
            _remove_socket(self.config.uds)


def _remove_socket(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class _StopOnEof(asyncio.Protocol):
    """Standard input, a pipe from the process that started the server: it closes when that
    process ends, however it ends (signals cannot tell a server whose parent was killed)."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop

    def connection_lost(self, exc: Exception | None) -> None:
        log.warning("standard input closed: the process that started this server is gone; stopping")
        self.stop.set()


async def serve(config: ServerConfig, *, stop_on_stdin_eof: bool = False) -> None:
    """Run until SIGINT or SIGTERM, or with ``stop_on_stdin_eof`` until standard input closes."""
    resolved = resolve(config)
    tuning = host_tuning(resolved.device, config.engine)
    tuning.log_to(log)
    os.environ.update(tuning.env)  # inherited by every engine process (vLLM-CPU spawns them)
    server = EmbeddingServer(config, resolved)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if stop_on_stdin_eof:
        await loop.connect_read_pipe(lambda: _StopOnEof(stop), sys.stdin)
    starting = asyncio.create_task(server.start())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
    try:
        if starting in done:
            starting.result()
            await stopper
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
    finally:
        log.info("shutting down")
        await server.stop()


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
