"""Mixed workloads: single-row queries while bulk work loads the same server, on the three servers of
``MODES`` side by side (bench/variants.py), each phase a workload of the rounds runner. Phases, cases
and ratios: docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace

from embedtext.bench.bulk_loads import BULK_ROWS, flood_calls, probed_load, scan_seconds, warm_up
from embedtext.bench.measure import percentiles_ms
from embedtext.bench.probes import Prober, probe_during
from embedtext.bench.rounds import Workload
from embedtext.bench.variants import Variant, VariantComparison, run_variants
from embedtext.server.config.resolve import CPU_INTERACTIVE_SLO_MS

SUITE = "mixed"
SHARED = ("--set", "interactive_replica=off")  # queries and bulk work on the same engines
# The servers compared: the defaults, the shared engines paced for queries, and the baseline.
MODES = (
    Variant("interactive_replica", ("--set", "interactive_replica=on")),
    Variant("classes", SHARED),
    Variant("unpaced", (*SHARED, "--interactive-slo-ms", "0")),
)
MODE_NAMES = tuple(mode.name for mode in MODES)
BASELINE = "unpaced"  # every ratio's denominator
PACED = ("interactive_replica", "classes")  # the modes that hold the run's target
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
    modes: Sequence[str] = MODE_NAMES,
    phases: Sequence[str] = PHASES,
    settle_s: float | None = None,
    progress=print,
    on_phase: Callable[[list[dict]], None] | None = None,
) -> list[dict]:
    """``bulk_texts``: BULK_ROWS texts or more; ``probe_texts``: short texts (the flood's rows too);
    ``slo_ms``: the paced servers' target (None: the server's default); ``on_phase``: called with
    the cases so far after each phase."""
    check_modes(modes)
    check_phases(phases)
    scan_texts = list(itertools.islice(itertools.cycle(bulk_texts), scan_rows))
    flood_texts = list(itertools.islice(itertools.cycle(probe_texts), BULK_ROWS))
    half = scan_texts[: scan_rows // 2]
    labels = {"bulk": f"bulk{clients}", "bulk_alone": f"bulk{clients}_alone", "flood": f"flood{flood_clients}"}
    workloads = [
        Workload(50, 0, kind=phase, name=labels.get(phase, phase), rounds=1 if phase == "flood" else None)
        for phase in PHASES
        if phase in phases and (phase != "flood" or flood_clients)
    ]
    variants = mode_variants(modes, slo_ms)

    async def phase(kind: str, target: str, prober: Prober) -> dict:
        if kind == "idle":
            times, _ = await probe_during(prober, target, probe_texts, asyncio.sleep(seconds / 4))
            return {"latencies": times, "rows": 0, "seconds": seconds / 4}
        if kind in ("scan", "scan_alone"):
            scanning = asyncio.to_thread(scan_seconds, target, scan_texts)
            if kind == "scan_alone":
                return {"rows": scan_rows, "seconds": await scanning}
            times, took = await probe_during(prober, target, probe_texts, scanning)
            return {"latencies": times, "rows": scan_rows, "seconds": took}
        if kind == "two_scans":
            took = await asyncio.gather(*(asyncio.to_thread(scan_seconds, target, half) for _ in range(2)))
            return {"rows": 2 * len(half), "seconds": max(took), "scan_seconds": list(took)}
        if kind in ("bulk", "bulk_alone"):
            probes = probe_texts if kind == "bulk" else ()
            times, rows, elapsed = await probed_load(target, bulk_texts, probes, clients, seconds, prober)
            return {"latencies": times, "rows": rows, "seconds": elapsed}
        return await flood_calls(target, flood_texts, flood_clients, flood_seconds)

    with Prober() as prober:

        def measure(variant: Variant, server) -> Callable[[Workload, bool], dict]:
            warmed = []
            mode_slo = (slo_ms if variant.name in PACED else None) or CPU_INTERACTIVE_SLO_MS

            def run(workload: Workload, warmup: bool) -> dict:
                if not warmed:  # first-use costs out of the timed phases
                    took = asyncio.run(warm_up(server.target, bulk_texts[:BULK_ROWS]))
                    prober.warm_up(server.target, probe_texts)
                    progress(f"mixed: {variant.name} warmed up ({took:.1f}s, untimed)")
                    warmed.append(True)
                got = asyncio.run(phase(workload.kind, server.target, prober))
                progress(f"mixed: {variant.name} {workload.label}: {_phase_line(got)}")
                return got | {"mode": variant.name, "slo_ms": mode_slo, "tokens_per_row": None}

            return run

        progress(f"mixed: {len(variants)} servers ({', '.join(modes)}) on {models[0]}")
        return run_variants(
            VariantComparison(SUITE, SUITE, variants),
            models,
            workloads,
            rounds=rounds,
            args=args,
            measure=measure,
            combine=_pooled,
            settle_s=settle_s,
            on_workload=on_phase,
            progress=progress,
        )


def mode_variants(modes: Sequence[str], slo_ms: float | None) -> tuple[Variant, ...]:
    """The servers of ``modes``; the paced ones hold ``slo_ms`` where given (else the server's default)."""
    target = ("--interactive-slo-ms", f"{slo_ms:g}") if slo_ms else ()
    return tuple(replace(m, flags=(*m.flags, *(target if m.name in PACED else ()))) for m in MODES if m.name in modes)


def _pooled(runs: list[dict]) -> dict:
    """One phase's rounds as one run: rows over seconds, percentiles over every round's probes."""
    latencies = [t for run in runs for t in run.get("latencies", [])]
    p50, p99 = percentiles_ms(latencies)
    pooled = {k: v for k, v in runs[0].items() if k in ("mode", "slo_ms", "tokens_per_row")}
    pooled |= {"rows": sum(r["rows"] for r in runs), "seconds": sum(r["seconds"] for r in runs)}
    pooled |= {"p50_ms": p50, "p99_ms": p99, "probes": len(latencies)}
    if "scan_seconds" in runs[0]:
        by_round = [_apart(r["scan_seconds"]) for r in runs]
        pooled |= {"scan_ratio": max(by_round), "scan_ratio_by_round": by_round}
    if "served_calls" in runs[0]:
        for key in ("served_calls", "failed_calls", "rows_lost"):
            pooled[key] = sum(r[key] for r in runs)
        pooled["errors"] = {k: sum(r["errors"].get(k, 0) for r in runs) for r in runs for k in r["errors"]}
        pooled["first_errors"] = runs[0]["first_errors"]
    return pooled


def _apart(seconds: Sequence[float]) -> float:
    """How far apart scans started together ended: the slower's seconds over the faster's."""
    return round(max(seconds) / min(seconds), 3)


def _phase_line(got: dict) -> str:
    """A phase's figures for the progress line: a run cut short still leaves them in its log."""
    p99 = percentiles_ms(got.get("latencies", ()))[1]
    line = f"{len(got.get('latencies', ()))} probes (p99 {p99} ms), {got['rows']} rows in {got['seconds']:.1f}s"
    if "scan_seconds" in got:
        line += f" (the scans {_apart(got['scan_seconds']):.3f}x apart)"
    return line + (f", {got['failed_calls']} calls failed {got['first_errors']}" if "failed_calls" in got else "")


def check_modes(modes: Sequence[str]) -> None:
    """Known modes, the baseline among them (every ratio is over the baseline's same phase).

    >>> check_modes(["classes"])
    Traceback (most recent call last):
    ValueError: mixed modes need unpaced, the ratios' denominator: got classes
    """
    _check_known(modes, MODE_NAMES, "modes")
    if BASELINE not in modes:
        raise ValueError(f"mixed modes need {BASELINE}, the ratios' denominator: got {','.join(modes)}")


def check_phases(phases: Sequence[str]) -> None:
    _check_known(phases, PHASES, "phases")


def _check_known(names: Sequence[str], known: Sequence[str], what: str) -> None:
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown mixed {what} {unknown}: choose from {', '.join(known)}")


def mixed_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Each mode against the baseline: ``mixed_...`` for the defaults (``interactive_replica``, or
    ``classes`` where it did not run), ``mixed_{mode}_...`` for the others."""
    mine = {(c["mode"], c["workload"]): c for c in cases if c["suite"] == SUITE}
    defaults = "interactive_replica" if any(m == "interactive_replica" for m, _ in mine) else "classes"
    ratios: dict[str, float] = {}
    for (mode, kind), new in sorted(mine.items()):
        if mode == BASELINE:
            continue
        key = "mixed_" if mode == defaults else f"mixed_{mode}_"
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
