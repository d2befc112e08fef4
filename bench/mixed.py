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
  mixed_{mode}_flood{M}     M clients each calling embed(2048 short rows) in a loop for the phase
                             (one round): calls served, calls failed at the caller, rows lost
                             (``errors`` by type, ``first_errors`` each type's first message)

``--mixed-phases`` runs some of them only (``scan_alone,flood``: PHASES names them without the
client counts).

A probed case also splits the probes' time by each reply's timings (bench/probes.py), the engine
part by the step timeline where a server keeps one, and says how late the server's event loop ran
and each process's cores (bench/phase_report.py).

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
import functools
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from embedtext.bench.bulk_loads import BULK_ROWS, flood_calls, probed_load, scan_seconds, warm_up
from embedtext.bench.measure import CpuSplit, make_case
from embedtext.bench.mixed_modes import (
    BASELINE,
    MODES,
    check_modes,
    mode_slo_ms,
    server_args,
    steps_its_engines,
)
from embedtext.bench.phase_report import cores_used, loop_late, phase_line, scans_apart, timeline_ms
from embedtext.bench.probes import Prober, probe_during, probe_figures, probe_parts_ms
from embedtext.bench.rounds import SETTLE_S
from embedtext.bench.servers import embedtext_server
from embedtext.bench.step_timeline import read_timeline
from embedtext.server.config.resolve import CPU_INTERACTIVE_SLO_MS

SUITE = "mixed"


# The phases a run may pick (``--mixed-phases``), in the order they run; bulk and flood get their
# client counts appended in the cases' names.
PHASES = ("idle", "scan", "scan_alone", "two_scans", "bulk", "bulk_alone", "flood")


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
        times, _ = await probe_during(prober, target, probe_texts, asyncio.sleep(seconds / 4))
        return {**probe_figures(times), "rows": 0, "elapsed": seconds / 4}

    async def scan(target: str) -> dict:
        scanning = asyncio.to_thread(scan_seconds, target, scan_texts)
        times, took = await probe_during(prober, target, probe_texts, scanning)
        return {**probe_figures(times), "rows": scan_rows, "elapsed": took}

    async def scan_alone(target: str) -> dict:
        took = await asyncio.to_thread(scan_seconds, target, scan_texts)
        return {"latencies": [], "rows": scan_rows, "elapsed": took}

    async def two_scans(target: str) -> dict:
        half = scan_texts[: scan_rows // 2]
        took = await asyncio.gather(*(asyncio.to_thread(scan_seconds, target, half) for _ in range(2)))
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
        return await flood_calls(target, flood_texts, flood_clients, flood_seconds)

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
                    progress(f"mixed: round {number + 1} {mode} {kind}: {phase_line(got)}")
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
        extra = kept | probe_parts_ms(got) | timeline_ms(got)
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
