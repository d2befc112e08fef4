"""Mixed workloads: single-row interactive calls while bulk work loads the same server, with the
defaults (latency classes, the queries on an engine of their own: ``interactive_replica``), with
queries and bulk work on shared engines whose steps are paced to ``--interactive-slo-ms`` (250 ms
on a CPU, 20 ms on a GPU: ``classes``), and the baseline: shared engines stepping bulk work flat
out, with no target (``unpaced``, ``--interactive-slo-ms 0``).

Three servers run side by side on the same model, one per mode (GPU_MODES on a GPU); the
rounds alternate which goes first, so drift on a shared machine hits them alike.
``--mixed-modes`` may add ``no_gather`` (the defaults with ``--interactive-gather-ms 0``),
``one_thread`` (the defaults with the interactive replica's engine on one thread, not every core:
``--interactive-threads 1``), ``one_bulk_engine`` (the defaults with one bulk engine on every core:
``--replicas 1``), ``split_same_priority`` (a small CPU's
bulk engine per core at the server's priority: ``--bulk-nice 0``) and
servers that change one thing of ``classes``:
``short_switch`` (a 0.5 ms GIL switch interval, Python's being 5 ms), ``full_batches`` (bulk
batches at ``--max-batch-tokens``: no turns among bulk callers) and ``short_turns`` (bulk turns of
250 ms of engine time, the default). A paced mode with ``_slo<ms>``
after its name holds that target instead of the run's: ``classes_slo500,classes,unpaced`` puts the
shared engines at 500 ms beside them at 250 ms and the baseline. Each server
first gets one untimed bulk call (``warm_up``). Cases, per mode:

  mixed_{mode}_idle          interactive single rows, one started every 50 ms whether or not the last
                             was answered (open loop), nothing else running
  mixed_{mode}_scan          the same probe during one DuckDB scan
                             (CREATE TABLE v AS SELECT id, embed_text(body) FROM docs); rows/s is the scan's
  mixed_{mode}_scan_alone    the same scan without the probe: what the queries cost it, apart from
                             what the server's settings cost it
  mixed_{mode}_two_scans     two such scans started together on two connections; rows/s of each
                             (``scan_rows_per_s``) and the faster over the slower (``scan_ratio``), in
                             the round where they ended furthest apart; each round's (``scan_ratio_by_round``)
  mixed_{mode}_bulk{N}       the probe while N clients each send 2048-row bulk calls in a loop
                             (the probe runs until their last call ends); rows/s is the bulk clients'
  mixed_{mode}_bulk{N}_alone the N bulk clients without the probe (bulk rows/s on its own)
  mixed_{mode}_flood{M}      M clients each calling embed(2048 short rows) in a loop for the phase
                             (one round): calls served, calls failed at the caller, rows lost
                             (``errors`` by type, ``first_errors`` each type's first message)

``--mixed-phases`` runs some of them only (``scan_alone,flood``: PHASES names them without the
client counts).

A probed case also splits the probes' time by each reply's timings (p50 and p99 of each part):
``queue_*_ms`` (its rows waiting for an engine), ``engine_*_ms`` (the time its batch took on a
replica: with the stepped engine, the step running when it came too) and ``rest_*_ms`` (the
client, gRPC both ways, tokenizing, the server's hand-overs), which splits into ``tokenize_*_ms``,
``handling_*_ms`` (the server's own work around the queue and the engine), ``outside_*_ms``
(outside the server's handler: the client, gRPC both ways) and ``late_*_ms`` (the prober's own
delay in sending a probe after its scheduled start); ``outside`` splits by the server's wall clock
at its handler's start (the reply's ``handler_start_unix_ns``; the prober runs on the server's
host) into ``to_server_*_ms`` (the call to the handler: the client, gRPC and the server's event
loop on the way in) and ``from_server_*_ms`` (the way back). ``loop_late_p99_ms`` and
``loop_late_max_ms`` are how late the server's event loop ran its timer over the last 10 s of
each phase (Info; the worst round's). A server that steps its engines
also keeps a step timeline (``--step-timeline``, server/engine/step_timeline.py), which splits
the engine part inside the replica's worker: ``step_waited_*_ms`` (the rest of the step running
when a query came), ``own_step_*_ms`` (the step that computed it), ``to_loop_*_ms`` (the hand-back
to the worker's event loop) and ``in_worker_*_ms`` (all of it).

The probes come from a process of their own (``Prober``), as a user's query comes from another
process than a bulk job; the bulk clients and scans run in the bench's process.

Ratios (the defaults / unpaced): ``mixed_interactive_p99_{phase}`` (lower is better; p99 over every
round's probes), ``mixed_bulk_rows_per_s`` and ``mixed_bulk_rows_per_s_alone`` (target: at least
0.95); and for the defaults alone ``mixed_interactive_p99_ms_{phase}`` (its p99) and
``mixed_interactive_p99_vs_slo_{phase}`` (that over the interactive target the server
holds, ``slo_ms``: the server's default, 250 ms on a CPU, 20 ms on a GPU; target: at most 1),
``mixed_two_scans_ratio`` (target: at most 1.25) and ``mixed_flood_errors`` (target: 0);
``mixed_scan_rows_per_s`` and ``mixed_scan_rows_per_s_alone`` (one scan with and without the
probe; no target: one scan a round is too short to hold one on a small CPU). Not in the default
suites:

    uv run --extra cpu embedtext bench --only mixed
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import multiprocessing
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from embedtext.bench.measure import HOST_IDLE, CpuSplit, make_case, percentiles_ms
from embedtext.bench.rounds import SETTLE_S
from embedtext.bench.servers import embedtext_server
from embedtext.bench.step_timeline import read_timeline, timeline_parts
from embedtext.connectors.client import AsyncClient, Client
from embedtext.connectors.requests import RequestOptions, plan_text_requests
from embedtext.protocol.errors import EmbedTextError
from embedtext.server.config.resolve import CPU_INTERACTIVE_SLO_MS, resolve

SUITE = "mixed"
# The defaults (an interactive replica), the shared engines paced for queries, and the baseline.
MODES = ("interactive_replica", "classes", "unpaced")
# On a GPU one more server: the shared stepped engine with no target.
GPU_MODES = ("interactive_replica", "classes", "unpaced")
# Every ratio's denominator: shared engines, bulk steps flat out, no target to pace them for.
BASELINE = "unpaced"
SHARED = ("--set", "interactive_replica=off")  # queries and bulk work on the same engines
# What each mode adds to the servers' arguments: the defaults, the shared engines, and the order and
# engine loop before them.
MODE_ARGS = {
    # Latency classes on shared engines, their steps paced.
    "classes": SHARED,
    "unpaced": (*SHARED, "--interactive-slo-ms", "0"),
    # classes with a GIL switch interval of 0.5 ms (Python's: 5 ms).
    "short_switch": (*SHARED, "--set", "switch_interval_ms=0.5"),
    # One more engine that runs the queries alone, the bulk engines unpaced: the defaults.
    "interactive_replica": ("--set", "interactive_replica=on"),
    # The same, each query sent at once: no gathering of queries into shared steps on a CPU.
    "no_gather": ("--set", "interactive_replica=on", "--set", "interactive_gather_ms=0"),
    # The same, queries gathering for 150 ms (the CPU's default: 30% of the 250 ms target, 75 ms).
    "long_gather": ("--set", "interactive_replica=on", "--set", "interactive_gather_ms=150"),
    # The same, the bulk engine at nice 10 (by default at the server's priority).
    "bulk_nice": ("--set", "interactive_replica=on", "--set", "bulk_nice=10"),
    # The same, the queries' engine on one thread (by default: torch's own count, every core).
    "one_thread": ("--set", "interactive_replica=on", "--set", "interactive_threads=1"),
    # The same with one bulk engine on every core (--replicas 1).
    "one_bulk_engine": ("--set", "interactive_replica=on", "--replicas", "1"),
    # A small CPU's defaults with the bulk engines at the server's priority (by default nice 10 there).
    "split_same_priority": ("--set", "interactive_replica=on", "--set", "bulk_nice=0"),
    # classes with bulk batches at --max-batch-tokens: no turns among bulk callers.
    "full_batches": (*SHARED, "--set", "bulk_batch_ms=0"),
    # classes with bulk turns of 250 ms of engine time (the default).
    "short_turns": (*SHARED, "--set", "bulk_batch_ms=250"),
    # classes with bulk turns of 1,000 ms.
    "long_turns": (*SHARED, "--set", "bulk_batch_ms=1000"),
    # The defaults with bulk turns of 250 ms, named.
    "replica_short_turns": ("--set", "interactive_replica=on", "--set", "bulk_batch_ms=250"),
    # The defaults with bulk turns of 1,000 ms.
    "replica_long_turns": ("--set", "interactive_replica=on", "--set", "bulk_batch_ms=1000"),
}
# The modes given ``slo_ms`` where it is given.
PACED_MODES = (
    "classes",
    "short_switch",
    "interactive_replica",
    "no_gather",
    "long_gather",
    "bulk_nice",
    "one_thread",
    "one_bulk_engine",
    "split_same_priority",
    "full_batches",
    "short_turns",
    "long_turns",
    "replica_short_turns",
    "replica_long_turns",
)
BULK_ROWS = 2048  # rows per bulk call: a DuckDB chunk, an indexing batch
PROBE_GAP_S = 0.05  # between interactive probes' starts: a few people's queries, not a load of their own
MIN_PROBES = 5  # per phase, even when the phase is shorter
# 200 s of probes: a 2-core CPU's bulk phase runs 110-225 s (a longer one has queries for its first
# 200 s only). All may be in flight at once (a server may answer none before its bulk calls), still under
# the server's max_concurrent_rpcs (4,096) with the bulk clients' calls.
MAX_PROBES_A_PHASE = 4000
SCAN_SQL = "CREATE TABLE v AS SELECT id, embed_text(body) AS v FROM docs"
# The phases a run may pick (``--mixed-phases``), in the order they run; bulk and flood get their
# client counts appended in the cases' names.
PHASES = ("idle", "scan", "scan_alone", "two_scans", "bulk", "bulk_alone", "flood")


SLO_SUFFIX = re.compile(r"^(?P<base>\w+?)_slo(?P<ms>\d+(?:\.\d+)?)$")


def split_mode(mode: str) -> tuple[str, float | None]:
    """A mode's base mode, and the target its own ``_slo<ms>`` suffix names (None: no suffix).

    >>> split_mode("classes_slo500"), split_mode("short_turns_slo1000"), split_mode("classes")
    (('classes', 500.0), ('short_turns', 1000.0), ('classes', None))
    """
    found = SLO_SUFFIX.match(mode)
    return (found["base"], float(found["ms"])) if found else (mode, None)


def mode_slo_ms(mode: str, slo_ms: float | None) -> float | None:
    """The target a mode's server holds: its own suffix's, else the run's ``slo_ms`` (None: the
    server's default)."""
    return split_mode(mode)[1] or slo_ms


def server_args(mode: str, slo_ms: float | None = None) -> tuple[str, ...]:
    """A mode's server arguments; the paced servers hold ``slo_ms`` when given one (else the
    server's default: 250 ms on a CPU, 20 ms on a GPU), or the target of their ``_slo<ms>`` suffix.

    >>> server_args("classes_slo500", 250.0)
    ('--set', 'interactive_replica=off', '--interactive-slo-ms', '500')
    """
    base = split_mode(mode)[0]
    slo_ms = mode_slo_ms(mode, slo_ms)
    target = ("--interactive-slo-ms", f"{slo_ms:g}") if slo_ms and base in PACED_MODES else ()
    return (*MODE_ARGS[base], *target)


@dataclass(frozen=True)
class ProbeTime:
    """One probe's latency from its scheduled start, and the server's parts of it from its reply."""

    total_s: float
    queue_s: float | None = None  # its rows waiting for an engine (the reply's queue_time_ns)
    engine_s: float | None = None  # the engine time of the batch that carried it (inference_time_ns)
    tokenize_s: float | None = None  # tokenizing it (tokenize_time_ns)
    server_s: float | None = None  # all of it in the server's handler (server_time_ns)
    late_s: float | None = None  # the prober's own lateness: from its scheduled start to the call
    # From the call to the server's handler (its wall clock, handler_start_unix_ns, against the
    # prober's: one host): the client, gRPC and the server's event loop on the way in.
    to_server_s: float | None = None

    @property
    def rest_s(self) -> float | None:
        """The client, gRPC both ways, tokenizing and the hand-overs around the engine."""
        if self.queue_s is None or self.engine_s is None:
            return None
        return self.total_s - self.queue_s - self.engine_s

    @property
    def handling_s(self) -> float | None:
        """The server's own work around the queue, the engine and the tokenizer: decoding, admission,
        the hand-back from the engine's batch, shaping the vectors, building the reply."""
        if self.server_s is None or self.rest_s is None:
            return None
        return self.server_s - self.queue_s - self.engine_s - self.tokenize_s

    @property
    def outside_s(self) -> float | None:
        """Outside the server's handler: the client, gRPC both ways, the reply's serialization."""
        if self.server_s is None:
            return None
        return self.total_s - self.server_s - (self.late_s or 0.0)

    @property
    def from_server_s(self) -> float | None:
        """From the server's handler to the reply in the prober: the reply's serialization, gRPC, the
        server's event loop on the way out, the client."""
        if self.outside_s is None or self.to_server_s is None:
            return None
        return self.outside_s - self.to_server_s

    @staticmethod
    def of(total_s: float, reply, late_s: float | None = None, sent_unix_ns: int | None = None) -> ProbeTime:
        """``sent_unix_ns``: the prober's wall clock as it made the call."""
        if reply is None:
            return ProbeTime(total_s, late_s=late_s)
        # An older server sends no server time (0): its rest is not split; one without a handler
        # start: its outside is not split.
        server = (reply.tokenize_time_ns / 1e9, reply.server_time_ns / 1e9) if reply.server_time_ns else (None, None)
        started = reply.handler_start_unix_ns
        to_server = (started - sent_unix_ns) / 1e9 if started and sent_unix_ns and server[1] is not None else None
        return ProbeTime(total_s, reply.queue_time_ns / 1e9, reply.inference_time_ns / 1e9, *server, late_s, to_server)


# Where a probe's time went (ProbeTime's parts): rest is tokenize + handling + outside + late, and
# outside is to_server + from_server.
PROBE_PARTS = ("queue", "engine", "rest", "tokenize", "handling", "outside", "late", "to_server", "from_server")


def probe_figures(times: Sequence[ProbeTime]) -> dict:
    """A phase's probe figures: the latencies, and each part where every reply carried it."""
    got: dict = {"latencies": [t.total_s for t in times]}
    for part in PROBE_PARTS:
        values = [getattr(t, f"{part}_s") for t in times]
        if values and all(v is not None for v in values):
            got[f"probe_{part}"] = values
    return got


def probe_parts_ms(got: dict) -> dict[str, float]:
    """p50 and p99 of each part of the probes' time (``queue_p50_ms`` ...), where they were timed."""
    out = {}
    for part in PROBE_PARTS:
        p50, p99 = percentiles_ms(got.get(f"probe_{part}", ()))
        if p50 is not None:
            out[f"{part}_p50_ms"], out[f"{part}_p99_ms"] = p50, p99
    return out


# The case fields of the step timeline's parts (``{name}_p50_ms``, ``{name}_p99_ms``).
TIMELINE_FIELDS = {
    "waited_ms": "step_waited",
    "step_ms": "own_step",
    "to_loop_ms": "to_loop",
    "worker_ms": "in_worker",
    "gc_ms": "gc",
}


def _timeline_ms(got: dict) -> dict[str, float]:
    """p50 and p99 of each part of the engine time inside the worker, where a step timeline was kept.

    >>> lines = [{"waited_ms": 4.0, "step_ms": 6.0, "step_rows": 3, "step_bulk_rows": 2, "to_loop_ms": 1.0,
    ...           "worker_ms": 11.5}]
    >>> _timeline_ms({"timeline": lines})["own_step_p50_ms"], _timeline_ms({})
    (6.0, {})
    """
    _, parts = timeline_parts(got.get("timeline", ()))
    out = {}
    for part, name in TIMELINE_FIELDS.items():
        if part in parts:
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = parts[part]
    return out


def steps_its_engines(args: Sequence[str]) -> bool:
    """A server started with ``args`` steps its vLLM engines itself, so it can keep a step timeline:
    the flags parsed as ``embedtext serve`` parses them and resolved as it resolves them."""
    from embedtext.server.cli import config_from_args

    return resolve(config_from_args(list(args)), "cpu").stepped  # stepped or not, whatever the device


def cores_used(got: dict) -> dict[str, float]:
    """A phase's CPU seconds per process (all its rounds) as cores: seconds over its wall time.

    >>> cores_used({"cpu_seconds": {"server/replica-worker": 150.0, "host idle": 12.0}, "cpu_wall_s": 100.0})
    {'server/replica-worker': 1.5, 'host idle': 0.12}
    """
    wall = got["cpu_wall_s"]
    return {name: round(seconds / wall, 3) for name, seconds in got["cpu_seconds"].items()}


def cores_text(cores: dict[str, float]) -> str:
    """The progress line's part for ``cores_used``: the processes over 0.01 cores, the busiest first.

    >>> cores_text({"server": 0.05, "server/replica-worker": 1.55, "server/query-worker": 0.17,
    ...             "server:main-thread": 0.04, "prober": 0.004, "host idle": 0.15})
    'cores: replica-worker 1.55, query-worker 0.17, server 0.05 (its main thread 0.04), host idle 0.15'
    """
    main = cores.get("server:main-thread", 0.0)
    used = sorted(
        (
            (name.removeprefix("server/"), value)
            for name, value in cores.items()
            if name not in (HOST_IDLE, "server:main-thread")
        ),
        key=lambda item: -item[1],
    )
    parts = [
        f"{name} {value:.2f}" + (f" (its main thread {main:.2f})" if name == "server" else "")
        for name, value in used
        if value >= 0.01
    ]
    return f"cores: {', '.join(parts)}, {HOST_IDLE} {cores.get(HOST_IDLE, 0.0):.2f}"


def scans_apart(seconds: Sequence[float]) -> float:
    """How far apart scans started together ended: the slower's seconds over the faster's."""
    return round(max(seconds) / min(seconds), 3)


def _phase_line(got: dict) -> str:
    """A phase's figures for the progress line: a run cut short still leaves them in its log."""
    line = f"{len(got.get('latencies', ()))} probes, {got['rows']} rows in {got['elapsed']:.1f}s"
    p50, p99 = percentiles_ms(got.get("latencies", ()))
    if p99 is not None:
        line += f", p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        parts = probe_parts_ms(got)
        if parts:
            line += " (p50 queue {queue_p50_ms:.1f}, engine {engine_p50_ms:.1f}, rest {rest_p50_ms:.1f} ms".format(
                **parts
            )
            if "outside_p99_ms" in parts:
                line += (
                    "; p99: rest {rest_p99_ms:.1f}, outside the server {outside_p99_ms:.1f}, its handling "
                    "{handling_p99_ms:.1f}, tokenizing {tokenize_p99_ms:.1f}"
                ).format(**parts)
                line += f", the prober's lateness {parts['late_p99_ms']:.1f}" if "late_p99_ms" in parts else ""
                if "to_server_p99_ms" in parts:
                    line += "; outside: in {to_server_p99_ms:.1f}, back {from_server_p99_ms:.1f}".format(**parts)
                line += " ms"
            line += ")"
        steps = _timeline_ms(got)
        if steps:
            line += (
                " (in the worker, p50: the running step {step_waited_p50_ms:.1f}, own step {own_step_p50_ms:.1f}, "
                "back to its loop {to_loop_p50_ms:.1f} ms"
            ).format(**steps)
            line += f"; garbage collection p99 {steps['gc_p99_ms']:.1f} ms)" if "gc_p99_ms" in steps else ")"
    if "scan_seconds" in got:
        first, second = got["scan_seconds"]
        line += f" (the scans {first:.1f} and {second:.1f}s, {scans_apart(got['scan_seconds']):.3f}x apart)"
    if got.get("loop_late_p99_ms"):
        line += ", " + loop_late_text(max(got["loop_late_p99_ms"]), max(got["loop_late_max_ms"]))
    if got.get("cpu_wall_s"):
        line += f", {cores_text(cores_used(got))}"
    if got["rows"] and got["elapsed"]:
        line += f", {got['rows'] / got['elapsed']:,.0f} rows/s"
    if "failed_calls" not in got:
        return line
    firsts = "; ".join(f"{kind}: {message[:200]}" for kind, message in got.get("first_errors", {}).items())
    return line + f", {got['failed_calls']} calls failed" + (f" (the first of each: {firsts})" if firsts else "")


async def _probes(
    send: Callable[[str], Awaitable], probe_texts: Sequence[str], done: Callable[[], bool]
) -> list[ProbeTime]:
    """Single interactive rows (``send``) on a fixed schedule, one every ``PROBE_GAP_S`` whether or
    not the earlier ones were answered, until ``done()`` (and ``MIN_PROBES`` sent); their
    latencies from each one's scheduled start, with the server's parts where ``send`` returns its
    reply. Open loop: a slow server does not slow the probes down, so both modes get the same
    queries and every wait is counted (a prober that waits for each answer sends fewer queries to
    the slower server and misses the waits it skipped)."""
    times: list[ProbeTime] = []

    async def probe(text: str, scheduled: float) -> None:
        late = time.perf_counter() - scheduled  # the timer's and this loop's delay, not the server's
        sent_ns = time.time_ns()  # the server's handler start is on the same host's wall clock
        reply = await send(text)
        times.append(ProbeTime.of(time.perf_counter() - scheduled, reply, late, sent_ns))

    sent: list[asyncio.Task] = []
    start = time.perf_counter()
    for number, text in enumerate(itertools.cycle(probe_texts)):
        if (done() and number >= MIN_PROBES) or number >= MAX_PROBES_A_PHASE:
            break
        scheduled = start + number * PROBE_GAP_S
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        sent.append(asyncio.create_task(probe(text, scheduled)))
    await asyncio.gather(*sent)
    return times


def _probe_request(text: str):
    """One probe's request as ``client.embed([text])`` sends it (classed interactive by its size)."""
    _, (batch,) = plan_text_requests([text], RequestOptions(), max_rows=1)
    return batch.request


async def _probing(target: str, probe_texts: Sequence[str], done: Callable[[], bool]) -> list[ProbeTime]:
    """``_probes`` through one client that may hold them all in flight; each reply says how long
    its rows waited for an engine and how long the engine took."""
    async with AsyncClient(target, timeout=600, max_in_flight=MAX_PROBES_A_PHASE) as client:
        await client.embed([probe_texts[0]])  # connect; not timed
        return await _probes(lambda text: client.embed_request(_probe_request(text)), probe_texts, done)


def _prober_main(conn, stop) -> None:
    """The prober process: for each (target, texts) it receives, ``_probing`` until ``stop`` is
    set, then sends back the probes' times (JSON); None ends it."""
    while (message := conn.recv_bytes()) != b"null":
        target, texts = json.loads(message)
        try:
            times = asyncio.run(_probing(target, texts, stop.is_set))
            conn.send_bytes(json.dumps([dataclasses.astuple(t) for t in times]).encode())
        except Exception as exc:  # the parent raises it
            conn.send_bytes(json.dumps(f"{type(exc).__name__}: {exc}").encode())


class Prober:
    """Sends the probes from a process of its own, as a user's query comes from another process
    than a bulk job's: the bench's bulk clients and DuckDB scans do not delay the probes' calls
    and replies in a shared event loop and GIL (which made about a third of the probes' p99 rest
    on the 2-core CPU). Started once for a run; ``probe`` as ``_probing``."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._stop = context.Event()
        self._process = context.Process(target=_prober_main, args=(child, self._stop), name="embedtext-prober")
        self._process.start()
        child.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    async def probe(self, target: str, probe_texts: Sequence[str], done: Callable[[], bool]) -> list[ProbeTime]:
        self._stop.clear()
        try:
            self._conn.send_bytes(json.dumps([target, list(probe_texts)]).encode())
            while not done():
                await asyncio.sleep(PROBE_GAP_S / 5)
            self._stop.set()
            got = json.loads(await asyncio.to_thread(self._conn.recv_bytes))
        except (BrokenPipeError, EOFError):
            self._process.join(timeout=5)
            code = self._process.exitcode
            raise RuntimeError(f"the prober's process ended (exit code {code}); its error is above") from None
        if isinstance(got, str):
            raise RuntimeError(f"the prober failed: {got}")
        return [ProbeTime(*row) for row in got]

    def warm_up(self, target: str, probe_texts: Sequence[str]) -> None:
        """One untimed round (MIN_PROBES probes) to ``target``: the process's first calls cost
        seconds (the first phase of a run got 5 probes in 2 s where the next server's got 41)."""
        asyncio.run(self.probe(target, probe_texts, lambda: True))

    def close(self) -> None:
        try:
            self._conn.send_bytes(b"null")
        except OSError:
            pass  # it is gone already
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def probed_load(
    target: str,
    bulk_texts: Sequence[str],
    probe_texts: Sequence[str],
    clients: int,
    seconds: float,
    prober: Prober,
) -> tuple[list[ProbeTime], int, float]:
    """``clients`` bulk loops (none if 0) that start calls for ``seconds`` and, if
    ``probe_texts``, the probes (from ``prober``'s process) until the last bulk call ends (or for
    ``seconds`` without bulk loops); returns the probes' times, bulk rows served and the bulk
    loops' elapsed seconds. The calls in flight at ``seconds`` still run to their end: on a
    2-core CPU one round of 2048-row calls takes far longer than the phase's ``seconds``, and
    probes that stopped there left most of the bulk work "with queries" without them."""
    stop_at = time.monotonic() + seconds
    bulk_rows = 0

    async def bulk(i: int) -> None:
        nonlocal bulk_rows
        chunk = list(bulk_texts[i % len(bulk_texts) :]) + list(bulk_texts[: i % len(bulk_texts)])
        async with AsyncClient(target, timeout=600, max_batch_rows=BULK_ROWS) as client:
            while time.monotonic() < stop_at:
                served = len(await client.embed(chunk[:BULK_ROWS], latency_class="bulk"))
                bulk_rows += served  # after the await: += around it would lose other clients' rows

    async def loads() -> float:
        began = time.monotonic()
        await asyncio.gather(*(bulk(i) for i in range(clients)))
        return time.monotonic() - began

    loading = asyncio.ensure_future(loads())

    def done() -> bool:
        return loading.done() if clients else time.monotonic() >= stop_at

    probing = asyncio.create_task(prober.probe(target, probe_texts, done)) if probe_texts else None
    elapsed = await loading
    times = await probing if probing else []
    return times, bulk_rows, elapsed


def _scan_seconds(target: str, texts: Sequence[str]) -> float:
    """One DuckDB scan of ``texts`` through ``embed_text``, as a user writes it; its seconds."""
    import duckdb
    import pyarrow as pa

    import embedtext

    con = duckdb.connect()
    try:
        docs = pa.table({"id": pa.array(range(len(texts)), pa.int64()), "body": pa.array(list(texts))})
        con.register("docs_arrow", docs)
        con.execute("CREATE TABLE docs AS SELECT * FROM docs_arrow")
        embedtext.register(con, target)
        started = time.perf_counter()
        con.execute(SCAN_SQL).fetchall()
        seconds = time.perf_counter() - started
        assert con.execute("SELECT count(*) FROM v WHERE v IS NOT NULL").fetchone()[0] == len(texts)
        return seconds
    finally:
        con.close()


async def _probe_during(
    prober: Prober, target: str, probe_texts: Sequence[str], work
) -> tuple[list[ProbeTime], object]:
    """Probe (``_probes``, from the prober's process) until ``work`` (an awaitable) is done; its result too."""
    task = asyncio.ensure_future(work)
    times = await prober.probe(target, probe_texts, task.done)
    return times, await task


async def warm_up(target: str, bulk_texts: Sequence[str]) -> float:
    """One untimed bulk call, so that first-use costs stay out of the timed phases: a paced engine
    sizes its steps from a cautious start until it has measured its speed on bulk work (the H100's
    first scan on a stepped server ran at half the rate of its second, cause not known)."""
    began = time.monotonic()
    async with AsyncClient(target, timeout=600, max_batch_rows=BULK_ROWS) as client:
        await client.embed(list(bulk_texts), latency_class="bulk")
    return time.monotonic() - began


async def _flood(target: str, texts: Sequence[str], clients: int, seconds: float) -> dict:
    """``clients`` loops of embed(2048 rows) for ``seconds`` (each call ends, however long it
    takes); the callers' view: calls served, calls failed, rows lost, by error type."""
    stop_at = time.monotonic() + seconds
    served = failed = lost = 0
    errors: dict[str, int] = {}
    first_errors: dict[str, str] = {}  # each type's first message: where the calls failed

    async def caller() -> None:
        nonlocal served, failed, lost
        async with AsyncClient(target, max_batch_rows=BULK_ROWS) as client:  # the default deadline
            while time.monotonic() < stop_at:
                try:
                    await client.embed(texts[:BULK_ROWS])
                    served += 1
                except EmbedTextError as exc:
                    failed += 1
                    lost += BULK_ROWS
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    first_errors.setdefault(type(exc).__name__, exc.message)  # without the socket path

    began = time.monotonic()
    await asyncio.gather(*(caller() for _ in range(clients)))
    return {
        "served_calls": served,
        "failed_calls": failed,
        "rows_lost": lost,
        "errors": errors,
        "first_errors": first_errors,
        "rows": served * BULK_ROWS,
        "elapsed": time.monotonic() - began,
    }


def run_mixed(
    models: Sequence[str],
    bulk_texts: Sequence[str],
    probe_texts: Sequence[str],
    *,
    clients: int = 16,
    seconds: float = 20.0,
    rounds: int = 3,
    scan_rows: int = 6000,
    flood_clients: int = 64,
    flood_seconds: float = 60.0,
    args: Sequence[str] = (),
    slo_ms: float | None = None,
    modes: Sequence[str] = MODES,
    defaults: str = "interactive_replica",
    phases: Sequence[str] = PHASES,
    settle_s: float = SETTLE_S,
    progress=print,
    on_phase: Callable[[list[dict]], None] | None = None,
) -> list[dict]:
    """``models``: the servers' --model arguments; ``bulk_texts``: BULK_ROWS texts or more (a
    scan cycles through them); ``probe_texts``: short texts (also the flood's rows).
    ``flood_clients`` 0: no flood phase. ``slo_ms``: the paced server's ``--interactive-slo-ms``
    and the target the probes' p99 is read against (None: the CPU default, 250 ms); ``modes``:
    MODES, GPU_MODES, or any of MODE_ARGS with unpaced (the ratios' denominator); ``defaults``: the
    mode that is the servers' defaults on this device, whose ratios are read against the targets;
    ``phases``: which of PHASES run (the flood in the last round only); ``on_phase``: called after
    each phase with the cases measured so far (the bench writes them, so a run cut short keeps
    them)."""
    check_modes(modes)
    check_phases(phases)
    scan_texts = list(itertools.islice(itertools.cycle(bulk_texts), scan_rows))
    flood_texts = list(itertools.islice(itertools.cycle(probe_texts), BULK_ROWS))

    async def idle(target: str) -> dict:
        times, _ = await _probe_during(prober, target, probe_texts, asyncio.sleep(seconds / 4))
        return {**probe_figures(times), "rows": 0, "elapsed": seconds / 4}

    async def scan(target: str) -> dict:
        scanning = asyncio.to_thread(_scan_seconds, target, scan_texts)
        times, took = await _probe_during(prober, target, probe_texts, scanning)
        return {**probe_figures(times), "rows": scan_rows, "elapsed": took}

    async def scan_alone(target: str) -> dict:
        took = await asyncio.to_thread(_scan_seconds, target, scan_texts)
        return {"latencies": [], "rows": scan_rows, "elapsed": took}

    async def two_scans(target: str) -> dict:
        half = scan_texts[: scan_rows // 2]
        took = await asyncio.gather(*(asyncio.to_thread(_scan_seconds, target, half) for _ in range(2)))
        return {
            "latencies": [],
            "rows": 2 * len(half),
            "elapsed": max(took),
            "scan_seconds": list(took),
            "scan_ratio_by_round": [scans_apart(took)],
        }

    def bulk(probing: bool):
        async def run(target: str) -> dict:
            load = probed_load(target, bulk_texts, probe_texts if probing else (), clients, seconds, prober)
            times, rows, elapsed = await load
            return {**probe_figures(times), "rows": rows, "elapsed": elapsed}

        return run

    async def flood(target: str) -> dict:
        return await _flood(target, flood_texts, flood_clients, flood_seconds)

    runs = {
        "idle": ("idle", idle),
        "scan": ("scan", scan),
        "scan_alone": ("scan_alone", scan_alone),
        "two_scans": ("two_scans", two_scans),
        "bulk": (f"bulk{clients}", bulk(True)),
        "bulk_alone": (f"bulk{clients}_alone", bulk(False)),
    }
    each_round = [runs[p] for p in PHASES if p in phases and p in runs]
    flood_phase = [(f"flood{flood_clients}", flood)] if "flood" in phases and flood_clients else []
    seen: dict[tuple[str, str], dict] = {}
    cases_of = functools.partial(
        _cases, clients=clients, rounds=rounds, scan_rows=scan_rows, slo_ms=slo_ms, defaults=defaults
    )
    with ExitStack() as stack:
        progress(f"mixed: {len(modes)} servers ({', '.join(modes)}) on {models[0]}")
        timelines = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="embedtext-mixed-")))
        prober = stack.enter_context(Prober())
        servers = {}
        for mode in modes:
            mode_args = [*args, *server_args(mode, slo_ms)]
            if steps_its_engines(mode_args):
                mode_args += ["--set", f"step_timeline={timelines / (mode + '.jsonl')}"]
            servers[mode] = stack.enter_context(embedtext_server(list(models), args=mode_args))
        for mode, server in servers.items():
            took = asyncio.run(warm_up(server.target, bulk_texts[:BULK_ROWS]))
            prober.warm_up(server.target, probe_texts)
            progress(f"mixed: {mode} warmed up ({took:.1f}s, untimed)")
        for number in range(rounds):
            order = tuple(modes) if number % 2 == 0 else tuple(modes)[::-1]
            last = number == rounds - 1
            for mode in order:
                for kind, phase in each_round + (flood_phase if last else []):
                    time.sleep(settle_s)  # the other engine stops spinning first
                    since = time.time()
                    # Where the host's cores went: the server's processes (which engine), the bench's
                    # bulk clients and scans, the prober, and idle.
                    split = CpuSplit(
                        {"bench": os.getpid(), "prober": prober.pid}, {"server": servers[mode].pid}, host_idle=True
                    )
                    with split:
                        began = time.monotonic()
                        got = asyncio.run(phase(servers[mode].target))
                        got["cpu_wall_s"] = time.monotonic() - began
                    got["cpu_seconds"] = split.seconds
                    got["timeline"] = read_timeline(timelines / f"{mode}.jsonl", since, time.time())
                    got |= loop_late(servers[mode].target)
                    _merge(seen.setdefault((mode, kind), {}), got)
                    progress(f"mixed: round {number + 1} {mode} {kind}: {_phase_line(got)}")
                    if on_phase is not None:
                        on_phase(cases_of(seen))
    return cases_of(seen)


def _cases(
    seen: dict[tuple[str, str], dict],
    *,
    clients: int,
    rounds: int,
    scan_rows: int,
    slo_ms: float | None,
    defaults: str,
) -> list[dict]:
    """The report's cases from each (mode, phase)'s merged rounds."""
    cases = []
    for (mode, kind), got in sorted(seen.items()):
        timed = ("latencies", "rows", "elapsed", "cpu_seconds", "cpu_wall_s")
        kept = {k: v for k, v in got.items() if k not in timed and k != "timeline" and not k.startswith("probe_")}
        extra = kept | probe_parts_ms(got) | _timeline_ms(got)
        if got.get("cpu_wall_s"):
            extra["cores"] = cores_used(got)
        for key in ("loop_late_p99_ms", "loop_late_max_ms"):  # the worst round's
            if extra.get(key):
                extra[key] = max(extra[key])
        if "scan_seconds" in extra:
            half = scan_rows // 2
            extra["scan_rows_per_s"] = [round(half / s, 1) for s in extra["scan_seconds"]]
            extra["scan_ratio"] = scans_apart(extra["scan_seconds"])
        cases.append(
            make_case(
                f"mixed_{mode}_{kind}",
                SUITE,
                rows=got["rows"],
                seconds=got["elapsed"],
                tokens_per_row=None,
                latencies=got.get("latencies", []),
                mode=mode,
                kind=kind,
                defaults=mode == defaults,
                probes=len(got.get("latencies", [])),
                bulk_clients=clients if kind.startswith("bulk") else 0,
                rounds=rounds,
                slo_ms=mode_slo_ms(mode, slo_ms) or CPU_INTERACTIVE_SLO_MS,
                **extra,
            )
        )
    return cases


def loop_late(target: str) -> dict[str, list[float]]:
    """How late the server's event loop ran over its last 10 s (Info), as a phase ends: a probe's
    way in and out waits as long. Nothing from a server that does not keep it."""
    with Client(target) as client:
        info = client.info(refresh=True)
    if not info.event_loop_ticks:
        return {}
    return {"loop_late_p99_ms": [info.event_loop_lag_p99_ms], "loop_late_max_ms": [info.event_loop_lag_max_ms]}


def loop_late_text(p99_ms: float, max_ms: float) -> str:
    """``loop_late``'s figures as the progress lines say them."""
    return f"the server's event loop late p99 {p99_ms:.1f} ms, at most {max_ms:.1f} ms (its last 10 s)"


def check_modes(modes: Sequence[str]) -> None:
    """Known modes, the baseline among them (every ratio is over the baseline's same phase).

    >>> check_modes(["classes"])
    Traceback (most recent call last):
    ValueError: mixed modes need unpaced, the ratios' denominator: got classes
    >>> check_modes(["unpaced_slo500", "unpaced"])
    Traceback (most recent call last):
    ValueError: a target (_slo<ms>) needs a paced mode (classes, short_switch, ...): got unpaced_slo500
    """
    parts = {mode: split_mode(mode) for mode in modes}
    unknown = [m for m, (base, _) in parts.items() if base not in MODE_ARGS]
    if unknown:
        raise ValueError(f"unknown mixed modes {unknown}: choose from {', '.join(MODE_ARGS)}")
    unpaced = [m for m, (base, target) in parts.items() if target and base not in PACED_MODES]
    if unpaced:
        raise ValueError(f"a target (_slo<ms>) needs a paced mode ({', '.join(PACED_MODES)}): got {', '.join(unpaced)}")
    if BASELINE not in modes:
        raise ValueError(f"mixed modes need {BASELINE}, the ratios' denominator: got {','.join(modes)}")


def check_phases(phases: Sequence[str]) -> None:
    """Known phases, at least one.

    >>> check_phases(["scan_alone", "flood"])
    >>> check_phases(["scans"])
    Traceback (most recent call last):
    ValueError: unknown mixed phases ['scans']: choose from idle, scan, scan_alone, two_scans, bulk, bulk_alone, flood
    """
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        raise ValueError(f"unknown mixed phases {unknown}: choose from {', '.join(PHASES)}")


def _merge(into: dict, got: dict) -> None:
    """Add one round's numbers to a phase's totals (lists are joined, the worst scan ratio kept)."""
    for key, value in got.items():
        if key == "scan_seconds":
            old = into.get(key)
            if old is None or scans_apart(value) > scans_apart(old):
                into[key] = value
        elif isinstance(value, list):
            into[key] = into.get(key, []) + value
        elif isinstance(value, dict):
            merged = into.setdefault(key, {})
            for k, v in value.items():
                if isinstance(v, str):
                    merged.setdefault(k, v)
                else:
                    merged[k] = merged.get(k, 0) + v
        else:
            into[key] = into.get(key, 0) + value


def mixed_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Each mode against the baseline: ``mixed_...`` for the defaults (the targets: the cases marked
    ``defaults``, or before that mark ``classes``), ``mixed_{mode}_...`` for the others where they
    ran (``mixed_classes_...``)."""
    mine = {(c["mode"], c["kind"]): c for c in cases if c["suite"] == SUITE}
    ratios: dict[str, float] = {}
    for (mode, kind), new in sorted(mine.items()):
        if mode == BASELINE:
            continue
        key = "mixed_" if new.get("defaults", mode == "classes") else f"mixed_{mode}_"
        if kind == "two_scans":
            ratios[f"{key}two_scans_ratio"] = new["scan_ratio"]
            continue
        if kind.startswith("flood"):
            ratios[f"{key}flood_errors"] = new["failed_calls"]
            continue
        old = mine.get((BASELINE, kind))
        if old is None or kind == "idle":
            continue
        speed = round(new["rows_per_s"] / old["rows_per_s"], 3) if new["rows_per_s"] and old["rows_per_s"] else None
        if kind.endswith("_alone"):
            if speed:
                ratios[f"{key}{'scan' if kind == 'scan_alone' else 'bulk'}_rows_per_s_alone"] = speed
            continue
        if new.get("p99_ms"):
            ratios[f"{key}interactive_p99_ms_{kind}"] = new["p99_ms"]
            ratios[f"{key}interactive_p99_vs_slo_{kind}"] = round(new["p99_ms"] / new["slo_ms"], 3)
        if new.get("p99_ms") and old.get("p99_ms"):
            ratios[f"{key}interactive_p99_{kind}"] = round(new["p99_ms"] / old["p99_ms"], 3)
        if speed and kind.startswith("bulk"):
            ratios[f"{key}bulk_rows_per_s"] = speed
        if speed and kind == "scan":
            ratios[f"{key}scan_rows_per_s"] = speed
    return ratios
