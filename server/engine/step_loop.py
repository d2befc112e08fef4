"""The engine thread both stepped engines share: batches in, one step's rows chosen, vectors out.

A replica's worker holds its whole engine, and a thread of ours steps it (named
ENGINE_THREAD_NAME). This core owns what does not depend on how a step runs:

* the inbox the event loop hands batches to, and the batches its callers gave up on;
* each step's rows (server/engine/step_plan.py): interactive rows first, bulk rows up to a token
  budget sized from the measured speed so that an interactive row waits at most about
  ``--interactive-slo-ms`` (server/pacing.py), the next step's rows chosen the moment a step ends;
* the engine's speed and its pacing;
* delivering each batch's vectors, or its error, to the caller's event loop.

A subclass builds the engine and says how a step runs: ``vllm_stepped.VllmRequestSteps`` hands
vLLM's ``LLMEngine`` a request per row and calls ``step()``; ``packed_backend.PackedSteps`` runs
vLLM's model on the step's rows as one packed batch, and the packed backend falls back to the
first where its model cannot run packed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import numpy as np

from embedtext.server.engine.base import ENGINE_THREAD_NAME, EngineSettings, ReplicaDeadError
from embedtext.server.engine.model_clock import ModelClock
from embedtext.server.engine.step_plan import QUERY_STEPS_BUDGETS, Step, StepBatch, StepPlan
from embedtext.server.engine.vllm_args import max_step_tokens
from embedtext.server.host.naming import name_this_thread
from embedtext.server.models.source import ModelSpec
from embedtext.server.pacing import BulkPacer, EngineSpeed, PaceReport
from embedtext.server.rows import TokenRows

log = logging.getLogger(__name__)

# An interactive row waits for the step running when it comes and then its own, which may take
# this share of the target; the rest is for the server's work and noise.
STEPS_SHARE_OF_SLO = 0.7


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


class StepLoopBackend:
    """An engine stepped by a thread of ours. Subclasses build the engine (``_build``, in a thread)
    and run the loop (``_run``, on the engine thread), from the helpers here."""

    # How the start-up log says this engine runs ("stepped in this process", ...).
    how = "stepped in this process"
    # What Info's engine_loop says of it (engine.Backend.loop).
    loop = "stepped"

    def __init__(self, spec: ModelSpec, settings: EngineSettings, *, name: str = "replica") -> None:
        self.spec = spec
        self.settings = settings
        self.name = name
        self._engine = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition()
        self._inbox: list[tuple[StepBatch, asyncio.Future]] = []
        self._cancelled: list[StepBatch] = []
        self._stopping = False
        self._dead: str | None = None
        self._step_tokens = max_step_tokens(spec, settings)
        self.plan = StepPlan()  # the engine thread's; others only read its counts
        self.speed = EngineSpeed()
        self.pacer = step_pacer(spec, settings)
        self.model_clock = ModelClock()  # the subclass's _build sets it on the model's forward
        # The engine thread's: id(batch) -> (batch, its caller's future).
        self.waiters: dict[int, tuple[StepBatch, asyncio.Future]] = {}

    # --- to implement ----------------------------------------------------------------------

    def _build(self):
        """The engine, built in a thread of the event loop's (vLLM's start takes seconds)."""
        raise NotImplementedError

    def _built_note(self) -> str:
        """A log line on how the built engine runs its model."""
        raise NotImplementedError

    def _loop(self) -> None:
        """The engine thread's loop, until ``wait_for_work`` says stop."""
        raise NotImplementedError

    def _shutdown(self, engine) -> None:
        """Release the engine (in a thread)."""

    def _wrap_rows(self, rows):
        """The rows as this engine keeps them (on the event loop, as a batch comes): vLLM's
        requests take a list of ids per row."""
        return rows.to_lists() if isinstance(rows, TokenRows) else rows

    # --- the event loop's side -----------------------------------------------------------

    async def spawn(self) -> None:
        return None  # nothing to start ahead of the engine

    async def start(self) -> None:
        log.info("starting %s for model %s on %s, %s", self.name, self.spec.name, self.settings.device, self.how)
        self._engine = await asyncio.to_thread(self._build)
        log.info("%s: %s", self.name, self._built_note())
        self._thread = threading.Thread(target=self._run, name=f"steps-{self.name}", daemon=True)
        self._thread.start()
        if self.pacer is not None:
            log.info("%s: steps sized for interactive rows within %.0f ms", self.name, self.pacer.slo_s * 1000)
        log.info("%s ready", self.name)

    def take_model_seconds(self) -> float:
        return self.model_clock.take()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._dead is None

    @property
    def pids(self) -> list[int]:
        return []  # no processes of its own: the engine runs in this one

    @property
    def pace(self) -> PaceReport:
        """Its step budget and measured speed. An unpaced engine (beside an interactive replica, or
        without a target) reports its full step: the server's deadline refusals need its speed."""
        if self.pacer is None:
            return PaceReport(self._step_tokens, float(self.speed.tokens_per_s or 0.0), True)
        return self.pacer.report(self.speed.tokens_per_s)

    async def embed(self, rows, interactive_rows: int = 0) -> np.ndarray:
        if not self.alive:
            raise ReplicaDeadError(f"{self.name} is not running ({self._dead or 'not started'})")
        if not len(rows):
            return np.empty((0, self.spec.dim), dtype=np.float32)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        batch = StepBatch(self._wrap_rows(rows), interactive_rows)
        with self._wake:
            self._inbox.append((batch, waiter))
            self._wake.notify()
        try:
            return await waiter
        except asyncio.CancelledError:
            # The callers went away: queued rows are dropped, rows in the engine aborted.
            with self._wake:
                self._cancelled.append(batch)
                self._wake.notify()
            raise

    async def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                await asyncio.to_thread(self._shutdown, engine)
            except Exception:
                log.exception("shutting down %s failed", self.name)

    # --- the engine thread ---------------------------------------------------------------

    def _run(self) -> None:
        name_this_thread(ENGINE_THREAD_NAME)
        import torch

        # In this process vLLM-CPU binds no threads and reserves no core: torch's pool is the engine's,
        # of OMP_NUM_THREADS threads where the worker was started with it (--interactive-threads).
        # Read in this thread, which runs every step: OpenMP keeps the count per thread.
        log.info("%s: the engine computes on %d threads", self.name, torch.get_num_threads())
        try:
            self._loop()
        except Exception as exc:  # the engine broke: every batch fails, the server restarts this replica
            log.exception("%s: the engine failed", self.name)
            self._dead = f"its engine failed: {type(exc).__name__}: {exc}"
        finally:
            self._dead = self._dead or "stopped"
            error = ReplicaDeadError(f"{self.name} died: {self._dead}")
            for _, waiter in self.waiters.values():
                self._resolve(waiter, error)
            with self._wake:
                for _, waiter in self._inbox:
                    self._resolve(waiter, error)
                self._inbox.clear()

    def wait_for_work(self, busy: Callable[[], bool]) -> list[StepBatch] | None:
        """Block until there is work (new or cancelled batches, queued rows, or ``busy()``); queue
        the new batches in the plan and return the cancelled ones. None: stop."""
        with self._wake:
            while not (self._stopping or self._inbox or self._cancelled or busy() or self.plan.queued_rows):
                self._wake.wait()
            if self._stopping:
                return None
            inbox, self._inbox = self._inbox, []
            cancelled, self._cancelled = self._cancelled, []
        for batch, waiter in inbox:
            self.plan.add(batch)
            self.waiters[id(batch)] = (batch, waiter)
        return cancelled

    def next_step(self) -> Step:
        """The next step's runs of rows: within the pacer's budget where it paces, else a full step."""
        if self.pacer is None:
            return self.plan.next_step(self._step_tokens)
        # The pacer's budget is the longest step; two steps a query waits for hold 1.25 of it.
        pair = int(self.pacer.batch_tokens * QUERY_STEPS_BUDGETS)
        return self.plan.next_step(self.plan.bulk_step_tokens(pair), pair)

    def step_started(self, measured: bool) -> None:
        """Before a step; ``measured``: it carries bulk rows, and its speed counts."""
        if measured:
            self.speed.started(0)

    def step_ended(self, measured: bool, finished_tokens: int) -> None:
        """After a step that carried bulk rows (``measured``): the speed, and the pace from it."""
        if not measured:
            return
        self.speed.finished(0, finished_tokens)
        if self.pacer is None:
            return
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

    def fail(self, batch: StepBatch, error: Exception | None = None) -> None:
        """Stop a batch: its queued rows dropped, its caller told ``error`` (None: it went away)."""
        self.plan.cancel(batch)
        entry = self.waiters.pop(id(batch), None)
        if entry is not None and error is not None:
            self._resolve(entry[1], error)

    def deliver(self, batch: StepBatch, vectors: np.ndarray) -> None:
        """A finished batch's float32 vectors to its caller."""
        _, waiter = self.waiters.pop(id(batch))
        self._resolve(waiter, vectors)

    @staticmethod
    def _resolve(waiter: asyncio.Future, outcome) -> None:
        def settle() -> None:
            if waiter.done():
                return
            if isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)

        waiter.get_loop().call_soon_threadsafe(settle)
