"""What one engine batch costs: work fixed per batch plus work per token, for each engine loop.

Pacing (server/pacing.py) bounds the bulk tokens an interactive row may wait behind: bulk batches
(``--engine-loop async``) or engine steps (``stepped``) take a set share of
``--interactive-slo-ms``. A batch of B tokens takes about ``a + b B``: ``a`` for the work fixed per
batch (the hand-over to the engine, vLLM's scheduling and step, the vectors' way back), ``b`` per
token. A paced batch then computes ``b B / (a + b B)`` of what a full one does a second, so ``a``
against the time a paced batch may take decides what a target costs bulk work.

This suite times batches of 1 to 256 rows of 50 tokens through the server's own backends, each built
as the server builds a replica of its engine loop; loops and sizes take turns in rotating rounds.
Each size is timed two ways: ``alone`` (one batch in flight: what a batch costs an engine that
waits for it) and ``queued`` (``--max-batches-per-replica`` in flight, as the server feeds a replica
while bulk work waits: part of the fixed work then overlaps). Per loop and way it fits ``a`` and
``b`` (least squares on relative error, so that small batches count as much as large ones). From
the queued fit and the server's own pacers it finds the budget a paced batch settles at under the
target (the server's 250 ms on a CPU, 20 ms on a GPU), and the share of the full rate that leaves
bulk work (a model: queries rare, so no short query steps).

Cases: ``batch_cost_{loop}_{rows}rows`` (the median batch alone, its p50/p99),
``..._{rows}rows_queued`` (seconds a batch, queued), ``batch_cost_{loop}`` (the fits). Ratios:
``batch_cost_fixed_ms_{loop}``, ``batch_cost_fixed_ms_queued_{loop}``,
``batch_cost_us_per_token_{loop}``, ``batch_cost_paced_share_{loop}``. Not in the default suites:

    uv run --extra cpu embedtext bench --only batch-cost
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from unittest import mock

import numpy as np

from embedtext.bench.measure import make_case
from embedtext.bench.rounds import SETTLE_S, round_order

SUITE = "batch-cost"
LOOPS = ("stepped", "async")
ROW_COUNTS = (1, 4, 16, 64, 256)  # 256 x 50 tokens: one step at the default --max-batch-tokens
TOKENS_PER_ROW = 50
HOW = ("alone", "queued")  # one batch in flight; as many as the server keeps in flight


def fit_batch_cost(tokens: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """``(a, b)`` of ``seconds ~ a + b * tokens``, each point weighted by its own size (relative error).

    >>> a, b = fit_batch_cost([50, 500, 5000], [0.003 + 50e-6, 0.003 + 500e-6, 0.003 + 5000e-6])
    >>> round(a * 1000, 6), round(b * 1e6, 6)
    (3.0, 1.0)
    """
    x = np.asarray(tokens, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    design = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(a), float(b)


def settled_pace(pacer, fixed_s: float, per_token_s: float, updates: int = 200) -> tuple[int, float]:
    """The budget ``pacer`` settles at when a batch of B tokens takes ``fixed_s + per_token_s * B``,
    and the share of the engine's full per-token rate a batch of that budget computes at.

    >>> from embedtext.server.pacing import BulkPacer
    >>> pacer = BulkPacer(slo_s=0.02, max_batch_tokens=16384, budgets_waited=2, min_batch_tokens=256)
    >>> settled_pace(pacer, 0.004, 1e-6)  # a batch may take 5 ms, 4 of them fixed
    (1000, 0.2)
    """
    for _ in range(updates):
        tokens = pacer.batch_tokens
        pacer.update(tokens / (fixed_s + per_token_s * tokens))
    tokens = pacer.batch_tokens
    return tokens, round(per_token_s * tokens / (fixed_s + per_token_s * tokens), 3)


class LoopUnderTest:
    """One engine loop as the server builds it: its backend, and the pacer it would run with."""

    def __init__(
        self, loop: str, model: str, *, eager: bool, memory_fraction: float | None, slo_ms: float, engine: str = "vllm"
    ) -> None:
        from embedtext.server.config import ServerConfig
        from embedtext.server.engine.factory import make_backend
        from embedtext.server.engine.step_loop import step_pacer
        from embedtext.server.models import load_model_spec
        from embedtext.server.resolved import resolve
        from embedtext.server.runtime import bulk_batch_pacer

        self.loop = loop
        self.spec = load_model_spec(model)
        self.config = ServerConfig(
            models=(model,),
            engine=engine,
            engine_loop=loop,
            enforce_eager="on" if eager else "off",
            interactive_slo_ms=0,  # whole batches in one step: the cost of a batch, not of a pace
        )
        self.resolved = resolve(self.config)
        share = memory_fraction if memory_fraction is not None else self.resolved.memory_fraction
        settings = self.resolved.engine_settings(self.config, share)
        self.backend = make_backend(
            self.spec,
            settings,
            engine=self.resolved.backend,
            own_process=self.resolved.replica_processes,
            name=f"batch-cost-{loop}",
        )
        # The same engine holding the target, as a server with it starts the stepped loop's.
        paced = dataclasses.replace(settings, interactive_slo_s=slo_ms / 1000.0)
        if loop == "stepped":
            self.new_pacer = lambda: step_pacer(self.spec, paced)
        else:
            self.new_pacer = lambda: bulk_batch_pacer(self.spec, self.config, slo_ms / 1000.0)

    @property
    def in_flight(self) -> int:
        return self.config.max_batches_per_replica

    async def _embed(self, rows: list[list[int]]) -> None:
        vectors = await self.backend.embed(rows)
        if vectors.shape != (len(rows), self.spec.dim):
            raise AssertionError(f"{self.loop}: {vectors.shape} vectors for {len(rows)} rows")

    async def time_batch(self, rows: list[list[int]]) -> float:
        """Seconds for one batch, nothing else in flight."""
        t0 = time.perf_counter()
        await self._embed(rows)
        return time.perf_counter() - t0

    async def time_queued(self, rows: list[list[int]], batches: int) -> float:
        """Seconds a batch, over ``batches`` batches kept ``in_flight`` at a time."""
        room = asyncio.Semaphore(self.in_flight)

        async def one() -> None:
            async with room:
                await self._embed(rows)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(batches)))
        return (time.perf_counter() - t0) / batches


def run_batch_cost(
    model: str,
    ids: Sequence[list[int]],
    *,
    loops: Sequence[str] = LOOPS,
    row_counts: Sequence[int] = ROW_COUNTS,
    rounds: int = 3,
    repeats: int = 5,
    eager: bool = False,
    slo_ms: float,
    settle_s: float = SETTLE_S,
    engine: str = "vllm",
    progress: Callable[[str], None] = print,
) -> list[dict]:
    """``ids``: token ids of at least ``max(row_counts)`` rows, all of one length. ``loops``:
    engine loops (``--engine-loop``), measured side by side, each in its own engine. ``engine``
    "null": the bookkeeping alone, on the null engine (no model: figures that mean nothing)."""
    return asyncio.run(
        _run(
            model,
            ids,
            loops=loops,
            row_counts=row_counts,
            rounds=rounds,
            repeats=repeats,
            eager=eager,
            slo_ms=slo_ms,
            settle_s=settle_s,
            engine=engine,
            progress=progress,
        )
    )


async def _run(
    model, ids, *, loops, row_counts, rounds, repeats, eager, slo_ms, settle_s, engine, progress
) -> list[dict]:
    from embedtext.server.engine.base import detect_device
    from embedtext.server.host.tuning import host_tuning
    from embedtext.server.resolved import GPU_MEMORY_FRACTION

    if len(ids) < max(row_counts) or len({len(r) for r in ids}) != 1:
        raise ValueError(f"need {max(row_counts)} rows of one length")
    device = detect_device()
    # Engines side by side on one GPU each take their part of what a server takes alone.
    share = GPU_MEMORY_FRACTION / len(loops) if device == "cuda" else None
    under = [
        LoopUnderTest(loop, model, eager=eager, memory_fraction=share, slo_ms=slo_ms, engine=engine) for loop in loops
    ]
    # (loop, rows, how) -> seconds: "alone" one batch each, "queued" per batch of a run that keeps
    # --max-batches-per-replica batches in flight, as a replica is fed while bulk work waits.
    seconds: dict[tuple[str, int, str], list[float]] = {
        (u.loop, n, how): [] for u in under for n in row_counts for how in HOW
    }
    started: list[LoopUnderTest] = []
    try:
        # The engines' processes inherit the server's tuning (threads, allocator) as they start.
        with mock.patch.dict(os.environ, host_tuning(device).env):
            for u in under:  # one after another: an engine sizes its memory from what is free
                progress(f"batch-cost: starting the {u.loop} loop's engine")
                await u.backend.start()
                started.append(u)
        for u in under:  # the first batch of each size is untimed
            for n in row_counts:
                await u.time_batch(list(ids[:n]))
        for number in range(rounds):
            for u in round_order(under, number):
                await asyncio.sleep(settle_s)  # the other engine stops spinning first
                for n in round_order(list(row_counts), number):
                    rows = list(ids[:n])
                    seconds[(u.loop, n, "alone")] += [await u.time_batch(rows) for _ in range(repeats)]
                    seconds[(u.loop, n, "queued")].append(await u.time_queued(rows, repeats))
            progress(
                f"batch-cost: round {number + 1}/{rounds}, ms a batch alone / queued: "
                + "; ".join(
                    f"{u.loop} "
                    + ", ".join(
                        f"{n} rows {1000 * np.median(seconds[(u.loop, n, 'alone')]):.1f}"
                        f"/{1000 * np.median(seconds[(u.loop, n, 'queued')]):.1f}"
                        for n in row_counts
                    )
                    for u in under
                )
            )
    finally:
        for u in started:
            await u.backend.stop()
    tokens = len(ids[0])
    cases = []
    for u in under:
        fits = {}
        for how in HOW:
            medians = {n: float(np.median(seconds[(u.loop, n, how)])) for n in row_counts}
            for n, median in medians.items():
                cases.append(
                    make_case(
                        f"batch_cost_{u.loop}_{n}rows" + ("" if how == "alone" else f"_{how}"),
                        SUITE,
                        rows=n,
                        seconds=median,
                        tokens_per_row=tokens,
                        latencies=seconds[(u.loop, n, how)] if how == "alone" else (),
                        batch_ms=round(1000 * median, 2),
                        loop=u.loop,
                        how=how,
                        in_flight=1 if how == "alone" else u.in_flight,
                        batches=len(seconds[(u.loop, n, how)]) * (1 if how == "alone" else repeats),
                    )
                )
            fits[how] = fit_batch_cost([n * tokens for n in medians], list(medians.values()))
        # Bulk work runs queued: its fit is what pacing costs (no time per token: the null engine).
        fixed_s, per_token_s = fits["queued"]
        budget, paced_share = (0, 0.0)
        if per_token_s > 0:
            budget, paced_share = settled_pace(u.new_pacer(), max(fixed_s, 0.0), per_token_s)
        cases.append(
            make_case(
                f"batch_cost_{u.loop}",
                SUITE,
                rows=0,
                seconds=0.0,
                tokens_per_row=None,
                loop=u.loop,
                fixed_ms=round(1000 * fits["alone"][0], 3),
                us_per_token=round(1e6 * fits["alone"][1], 4),
                fixed_ms_queued=round(1000 * fixed_s, 3),
                us_per_token_queued=round(1e6 * per_token_s, 4),
                full_tokens_per_s=round(1 / per_token_s, 1) if per_token_s > 0 else None,
                slo_ms=slo_ms,
                paced_batch_tokens=budget,
                paced_share=paced_share,
                eager=u.resolved.enforce_eager,
                dtype=u.resolved.dtype.dtype,
            )
        )
    return cases


def batch_cost_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Each loop's fits: ``batch_cost_fixed_ms_{loop}`` (alone), ``batch_cost_fixed_ms_queued_{loop}``,
    ``batch_cost_us_per_token_{loop}`` (alone) and ``batch_cost_paced_share_{loop}`` (from the queued fit)."""
    ratios: dict[str, float] = {}
    for case in cases:
        if case["suite"] == SUITE and "fixed_ms" in case:
            loop = case["loop"]
            ratios[f"batch_cost_fixed_ms_{loop}"] = case["fixed_ms"]
            ratios[f"batch_cost_fixed_ms_queued_{loop}"] = case["fixed_ms_queued"]
            ratios[f"batch_cost_us_per_token_{loop}"] = case["us_per_token"]
            ratios[f"batch_cost_paced_share_{loop}"] = case["paced_share"]
    return ratios
