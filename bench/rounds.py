"""Paths timed in rotating rounds with every engine resident: ratios a drifting host cannot skew.

On this project's hosts, timing paths one after the other was not like for like: the same engine,
model and rows ran 22% slower per row ten minutes later (bench/RESULTS.md, stop 14). So every
engine stays up for the whole comparison, each round times each path once in an order that
rotates and reverses from round to round (``round_order``), and the ratios are the medians of the
per-round ratios: drift hits every path alike. Idle engines do not compete: before each timed run
the others have been idle for ``SETTLE_S`` (vLLM-CPU busy-polls for 1 s after an engine's last
step). Used by the cpu suite (bench/cpu_suite.py).

Each case's ``rows_per_s`` is the median of its rounds; each peer's case carries
``ratio_by_round`` (ours / that path, round by round) and ``ratio_key``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

HEADLINE_TOKENS = 50  # ratio keys without a suffix are at this length; others end in _{tokens}
SETTLE_S = 1.5  # longer than vLLM-CPU's 1 s busy-poll after an engine's last step


@dataclass(frozen=True)
class RoundsPath:
    """One path of the comparison: ``measure(tokens, rows, warmup)`` times one scan and returns a case."""

    label: str
    case_prefix: str
    description: str
    measure: Callable[[int, int, bool], dict]
    ratio_key: str | None = None  # ours / this path; None: this path is ours
    engine: str | None = None  # paths that share an engine name it alike (default: the label)


def round_order(labels: Sequence[str], round_: int) -> list[str]:
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
    work: Sequence[tuple[int, int]],
    *,
    suite: str,
    rounds: int,
    load: Callable[[int, int], None],
    progress=print,
) -> list[dict]:
    """Time every path once per round for each (tokens, rows) of ``work``; ``load`` puts those rows
    where the paths read them. The first round's runs warm up first."""
    from embedtext.bench.measure import make_case

    by_label = {p.label: p for p in paths}
    ours = next(p for p in paths if p.ratio_key is None)
    cases = []
    for tokens, rows in work:
        load(tokens, rows)
        runs: dict[str, list[dict]] = {p.label: [] for p in paths}
        last_engine = None
        for round_ in range(rounds):
            for label in round_order([p.label for p in paths], round_):
                engine = by_label[label].engine or label
                if engine != last_engine:  # the last run's engine polls on; its own next run need not wait
                    time.sleep(SETTLE_S)
                last_engine = engine
                runs[label].append(by_label[label].measure(tokens, rows, round_ == 0))
            progress(
                f"{suite}: {tokens} tokens, round {round_ + 1}/{rounds}: "
                + ", ".join(f"{p.label} {runs[p.label][-1]['rows_per_s']:,.0f}" for p in paths)
                + " rows/s"
            )
        for path in paths:
            done = runs[path.label]
            extra = {}
            if path.ratio_key:
                per_round = [a["rows_per_s"] / b["rows_per_s"] for a, b in zip(runs[ours.label], done)]
                extra = {"ratio_key": path.ratio_key, "ratio_by_round": [round(x, 3) for x in per_round]}
            median_run = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
            cases.append(
                make_case(
                    f"{path.case_prefix}_{tokens}tok",
                    suite,
                    rows=rows,
                    seconds=statistics.median(r["seconds"] for r in done),
                    tokens_per_row=tokens,
                    path=path.description,
                    rounds=rounds,
                    peak_rss_mb=_peak(done, "peak_rss_mb"),
                    server_peak_rss_mb=_peak(done, "server_peak_rss_mb"),
                    rows_per_s_by_round=[r["rows_per_s"] for r in done],
                    cpu_s_per_run=median_run.get("cpu_s_per_run"),
                    **extra,
                )
            )
    return cases


def _peak(runs: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key)]
    return max(values) if values else None


def rounds_ratios(cases: Sequence[dict], suite: str) -> dict[str, float]:
    """The median of the per-round ratios (ours / each peer) at each token length.

    >>> case = {"suite": "cpu", "name": "inprocess_llm_embed_512tok", "tokens_per_row": 512,
    ...         "ratio_key": "udf_vs_inprocess", "ratio_by_round": [0.9, 1.2, 0.95]}
    >>> other_suite, headline = {**case, "suite": "other"}, {**case, "tokens_per_row": 50, "ratio_by_round": [1.3]}
    >>> rounds_ratios([case, other_suite, headline], "cpu")
    {'udf_vs_inprocess_512': 0.95, 'udf_vs_inprocess': 1.3}
    """
    ratios = {}
    for case in cases:
        if case["suite"] == suite and case.get("ratio_key"):
            tokens = int(case["tokens_per_row"])
            suffix = "" if tokens == HEADLINE_TOKENS else f"_{tokens}"
            ratios[case["ratio_key"] + suffix] = round(statistics.median(case["ratio_by_round"]), 3)
    return ratios
