"""vLLM's ``LLMEngine`` in this process, stepped by a thread of ours (``--engine-loop stepped``).

vLLM's ``AsyncLLM`` runs its engine core in a process of its own, and vLLM-CPU that core's
model in a third: each imports vLLM again at start-up, and between the server's batches the
engine waits for the next one to cross two processes. Here one process (a replica's worker,
server/engine/worker.py) holds the whole engine, and a thread of ours calls ``step()``:

* start-up imports vLLM once (``embedtext bench --only startup`` shows what it saves);
* each step's rows are chosen here (server/engine/step_plan.py): interactive rows first, bulk
  rows up to a token budget sized from the measured speed so that an interactive row waits at
  most about ``--interactive-slo-ms`` (server/pacing.py), and the next step's rows are handed
  over the moment a step ends, so the engine never idles while rows are queued;
* a step that carries interactive rows takes bulk rows only while it and the step before it
  (the one running when they came) stay within 1.25 budgets: after a full step, a quarter of
  one. While queries are rare, the query's own step is short, so the steps without queries may
  be longer than two equal steps would allow, and vLLM's fixed work per step weighs less on
  bulk work. As queries come in most steps, the steps tend to two equal halves of that pair
  (``StepPlan.bulk_step_tokens``): a short step computes fewer tokens a second on a busy host.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from embedtext.server.engine.base import ENGINE_THREAD_NAME, EngineRequestError, EngineSettings, ReplicaDeadError
from embedtext.server.engine.step_plan import (
    QUERY_STEPS_BUDGETS,
    StepBatch,
    StepPlan,
    carries_bulk,
    row_tokens,
    step_figures,
)
from embedtext.server.engine.step_timeline import BatchTimes, StepTimeline
from embedtext.server.engine.vllm_args import compilation_note, engine_arguments, max_step_tokens
from embedtext.server.host.naming import name_this_thread
from embedtext.server.models import ModelSpec
from embedtext.server.pacing import BulkPacer, EngineSpeed, PaceReport

log = logging.getLogger(__name__)

# vLLM builds its engine core in this process (no engine-core and worker processes) when this is 0.
INPROCESS_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"
# An interactive row waits for the step running when it comes and then its own, which may take
# this share of the target; the rest is for the server's work and noise.
STEPS_SHARE_OF_SLO = 0.7


def use_inprocess_engine() -> None:
    """Before vLLM is imported: build engine cores in this process."""
    os.environ[INPROCESS_VAR] = "0"


def step_pacer(spec: ModelSpec, settings: EngineSettings) -> BulkPacer | None:
    """The stepped loop's pacer (None without a target): an interactive row waits for the step
    running when it comes, then its own."""
    if not settings.interactive_slo_s:
        return None
    return BulkPacer(
        slo_s=settings.interactive_slo_s,
        max_batch_tokens=max_step_tokens(spec, settings),
        budgets_waited=QUERY_STEPS_BUDGETS,
        min_batch_tokens=spec.max_tokens,
        share=STEPS_SHARE_OF_SLO,
    )


class SteppedVllmBackend:
    """One vLLM ``LLMEngine`` in this process; an engine thread steps it."""

    def __init__(self, spec: ModelSpec, settings: EngineSettings, *, name: str = "replica") -> None:
        self.spec = spec
        self.settings = settings
        self.name = name
        self._engine = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition()
        self._inbox: list[tuple[StepBatch, asyncio.Future, BatchTimes | None]] = []
        self._cancelled: list[StepBatch] = []
        self._stopping = False
        self._dead: str | None = None
        self._ids = itertools.count()
        self._step_tokens = max_step_tokens(spec, settings)
        self.plan = StepPlan()  # the engine thread's; others only read its counts
        self.speed = EngineSpeed()
        self.pacer = step_pacer(spec, settings)
        self.timeline = StepTimeline(settings.step_timeline, name) if settings.step_timeline else None

    def _build(self):
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        use_inprocess_engine()
        # fcfs: each step holds only the rows chosen for it, interactive ones first.
        args = EngineArgs(**engine_arguments(self.spec, self.settings, priority=False))
        return LLMEngine.from_engine_args(args)

    async def spawn(self) -> None:
        return None  # nothing to start ahead of the engine

    async def start(self) -> None:
        log.info(
            "starting %s for model %s on %s, stepped in this process", self.name, self.spec.name, self.settings.device
        )
        self._engine = await asyncio.to_thread(self._build)
        log.info("%s: %s", self.name, compilation_note(getattr(self._engine, "vllm_config", None)))
        self._thread = threading.Thread(target=self._run, name=f"steps-{self.name}", daemon=True)
        self._thread.start()
        if self.pacer is not None:
            log.info("%s: steps sized for interactive rows within %.0f ms", self.name, self.pacer.slo_s * 1000)
        log.info("%s ready", self.name)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._dead is None

    @property
    def pids(self) -> list[int]:
        return []  # no processes of its own: the engine runs in this one

    @property
    def pace(self) -> PaceReport | None:
        return self.pacer.report(self.speed.tokens_per_s) if self.pacer is not None else None

    async def embed(self, rows: list[list[int]], interactive_rows: int = 0) -> np.ndarray:
        if not self.alive:
            raise ReplicaDeadError(f"{self.name} is not running ({self._dead or 'not started'})")
        if not rows:
            return np.empty((0, self.spec.dim), dtype=np.float32)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        batch = StepBatch(rows, interactive_rows)
        keeps_times = self.timeline is not None and batch.interactive_rows
        times = self.timeline.batch_times(time.monotonic()) if keeps_times else None
        with self._wake:
            self._inbox.append((batch, waiter, times))
            self._wake.notify()
        try:
            return await waiter
        except asyncio.CancelledError:
            # The callers went away: queued rows are dropped, rows in the engine aborted.
            with self._wake:
                self._cancelled.append(batch)
                self._wake.notify()
            raise

    # --- the engine thread -------------------------------------------------------------

    def _run(self) -> None:
        from vllm import PoolingParams
        from vllm.inputs import tokens_input

        try:
            from vllm.exceptions import VLLMValidationError
        except ImportError:  # older vLLM
            VLLMValidationError = ValueError  # noqa: N806

        name_this_thread(ENGINE_THREAD_NAME)
        engine = self._engine
        import torch

        # In this process vLLM-CPU binds no threads and reserves no core: torch's pool is the engine's,
        # of OMP_NUM_THREADS threads where the worker was started with it (--interactive-threads).
        # Read in this thread, which runs every step: OpenMP keeps the count per thread.
        log.info("%s: the engine computes on %d threads", self.name, torch.get_num_threads())
        params = PoolingParams(task="embed", use_activation=False)
        plan = self.plan
        waiters: dict[int, tuple[StepBatch, asyncio.Future]] = {}  # id(batch) ->
        in_engine: dict[str, tuple[StepBatch, int]] = {}  # request id -> (batch, row)
        timed: dict[int, BatchTimes] = {}  # id(batch) -> its moments, with --step-timeline
        step_number = 0
        try:
            while True:
                with self._wake:
                    while not (self._stopping or self._inbox or self._cancelled or in_engine or plan.queued_rows):
                        self._wake.wait()
                    if self._stopping:
                        break
                    inbox, self._inbox = self._inbox, []
                    cancelled, self._cancelled = self._cancelled, []
                taken = time.monotonic()
                for batch, waiter, times in inbox:
                    plan.add(batch)
                    waiters[id(batch)] = (batch, waiter)
                    if times is not None:
                        times.taken = taken
                        timed[id(batch)] = times
                for batch in cancelled:
                    self._drop(engine, plan, batch, in_engine, waiters)
                    timed.pop(id(batch), None)
                if not in_engine:
                    if self.pacer is not None:
                        # The pacer's budget is the longest step; two steps a query waits for hold 1.25 of it.
                        pair = int(self.pacer.batch_tokens * QUERY_STEPS_BUDGETS)
                        step = plan.next_step(plan.bulk_step_tokens(pair), pair)
                    else:
                        step = plan.next_step(self._step_tokens)
                    for batch, index in step:
                        if batch.cancelled:  # refused by the engine a row ago
                            continue
                        request_id = f"{self.name}-{next(self._ids)}"
                        try:
                            engine.add_request(request_id, tokens_input(batch.rows[index]), params)
                        except (VLLMValidationError, ValueError) as exc:
                            self._drop(engine, plan, batch, in_engine, waiters, EngineRequestError(str(exc)))
                            timed.pop(id(batch), None)
                            continue
                        in_engine[request_id] = (batch, index)
                if not in_engine:
                    continue
                measured = carries_bulk(in_engine.values())
                if measured:
                    self.speed.started(0)
                step_number += 1
                started = time.monotonic()
                outputs = engine.step()
                ended = time.monotonic()
                if timed:
                    figures = step_figures(in_engine.values())
                finished_tokens = 0  # a step may leave rows for the next (more rows than max_num_seqs)
                for out in outputs:
                    if not out.finished or out.request_id not in in_engine:
                        continue
                    batch, index = in_engine.pop(out.request_id)
                    finished_tokens += row_tokens(batch, index)
                    times = timed.get(id(batch))
                    if times is not None:
                        times.computed_in(step_number, started, ended, *figures)
                    if plan.finished(batch, index, out.outputs.data) and not batch.cancelled:
                        _, waiter = waiters.pop(id(batch))
                        self._deliver(waiter, batch, timed.pop(id(batch), None))
                if measured:
                    self.speed.finished(0, finished_tokens)
                    if self.pacer is not None:
                        self._pace()
        except Exception as exc:  # the engine broke: every batch fails, the server restarts this replica
            log.exception("%s: the engine failed", self.name)
            self._dead = f"its engine failed: {type(exc).__name__}: {exc}"
        finally:
            self._dead = self._dead or "stopped"
            error = ReplicaDeadError(f"{self.name} died: {self._dead}")
            for _, waiter in waiters.values():
                self._resolve(waiter, error)
            with self._wake:
                for _, waiter, _ in self._inbox:
                    self._resolve(waiter, error)
                self._inbox.clear()

    def _pace(self) -> None:
        self.pacer.update(self.speed.tokens_per_s)
        if self.pacer.just_lost_target:
            log.warning(
                "%s: the interactive target of %.0f ms cannot be held: at %.0f tokens/s, a step of the smallest "
                "size (%d tokens, the longest row) takes %.0f ms; steps stay at that size (raise "
                "--interactive-slo-ms)",
                self.name,
                self.pacer.slo_s * 1000,
                self.speed.tokens_per_s,
                self.pacer.batch_tokens,
                1000 * self.pacer.batch_tokens / self.speed.tokens_per_s,
            )

    def _drop(
        self, engine, plan: StepPlan, batch: StepBatch, in_engine: dict, waiters: dict, error: Exception | None = None
    ) -> None:
        """Stop a batch: its queued rows dropped, its rows in the engine aborted, its caller told."""
        plan.cancel(batch)
        aborted = [rid for rid, (b, _) in in_engine.items() if b is batch]
        for rid in aborted:
            del in_engine[rid]
        if aborted:
            engine.abort_request(aborted)
        entry = waiters.pop(id(batch), None)
        if entry is not None and error is not None:
            self._resolve(entry[1], error)

    def _deliver(self, waiter: asyncio.Future, batch: StepBatch, times: BatchTimes | None = None) -> None:
        import torch

        vectors = torch.stack(batch.vectors).to(torch.float32).numpy()
        if times is None:
            self._resolve(waiter, vectors)
            return
        times.delivered = time.monotonic()

        def record() -> None:  # on the event loop, as it takes the vectors
            self.timeline.write(len(batch.rows), batch.interactive_rows, times, time.monotonic())

        self._resolve(waiter, vectors, record)

    @staticmethod
    def _resolve(waiter: asyncio.Future, outcome, settled: Callable[[], None] | None = None) -> None:
        def settle() -> None:
            if settled is not None:
                settled()
            if waiter.done():
                return
            if isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)

        waiter.get_loop().call_soon_threadsafe(settle)

    async def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self.timeline is not None:
            self.timeline.close()
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                await asyncio.to_thread(engine.engine_core.shutdown)
            except Exception:
                log.exception("shutting down %s failed", self.name)
