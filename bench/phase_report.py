"""What a phase's figures say, as the progress line and the cases show them.

``loop_late_p99_ms`` and ``loop_late_max_ms`` are how late the server's event loop ran its timer
over the last 10 s of each phase (Info; the worst round's). A server that steps its engines also
keeps a step timeline (``--step-timeline``, server/engine/step_timeline.py), which splits the engine
part inside the replica's worker: ``step_waited_*_ms`` (the rest of the step running when a query
came), ``own_step_*_ms`` (the step that computed it), ``to_loop_*_ms`` (the hand-back to the
worker's event loop) and ``in_worker_*_ms`` (all of it).
"""

from __future__ import annotations

from collections.abc import Sequence

from embedtext.bench.measure import HOST_IDLE, percentiles_ms
from embedtext.bench.probes import probe_parts_ms
from embedtext.bench.step_timeline import timeline_parts
from embedtext.connectors.client import Client

# The case fields of the step timeline's parts (``{name}_p50_ms``, ``{name}_p99_ms``).
TIMELINE_FIELDS = {
    "waited_ms": "step_waited",
    "step_ms": "own_step",
    "to_loop_ms": "to_loop",
    "worker_ms": "in_worker",
    "gc_ms": "gc",
}


def timeline_ms(got: dict) -> dict[str, float]:
    """p50 and p99 of each part of the engine time inside the worker, where a step timeline was kept.

    >>> lines = [{"waited_ms": 4.0, "step_ms": 6.0, "step_rows": 3, "step_bulk_rows": 2, "to_loop_ms": 1.0,
    ...           "worker_ms": 11.5}]
    >>> timeline_ms({"timeline": lines})["own_step_p50_ms"], timeline_ms({})
    (6.0, {})
    """
    _, parts = timeline_parts(got.get("timeline", ()))
    out = {}
    for part, name in TIMELINE_FIELDS.items():
        if part in parts:
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = parts[part]
    return out


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


def phase_line(got: dict) -> str:
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
        steps = timeline_ms(got)
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
