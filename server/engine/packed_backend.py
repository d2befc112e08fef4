"""A replica whose engine thread runs each step's rows as one packed batch (``--engine-loop packed``).

The loop is the stepped one's (server/engine/step_loop.py: the same rows a step, the same pacing),
but a step is one call of vLLM's model on the step's rows end to end (server/engine/vllm_packed.py)
instead of a request per row through vLLM's scheduler. The rows stay one flat int32 array from the
server's frame to the model (server/engine/frames.py, ``TokenRows``), and a step gathers and
scatters runs of consecutive rows, not rows.

As it starts, the backend compares the packed vectors of a few rows with the engine's own; where
this vLLM or model cannot run packed, it says why in the log and steps vLLM's requests instead
(``VllmRequestSteps``, the stepped engine's steps, which it holds as its fallback).

On a GPU, an engine that no query paces launches each step before it collects the last one's
vectors, so the device computes while the host gathers, scatters and delivers rows. A paced engine
keeps one step at a time: a query would otherwise wait for one step more.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from embedtext.server.engine.base import EngineRequestError
from embedtext.server.engine.step_loop import StepLoopBackend
from embedtext.server.engine.step_plan import Step, StepBatch, carries_bulk
from embedtext.server.engine.vllm_stepped import VllmBackend, VllmRequestSteps
from embedtext.server.rows import TokenRows

log = logging.getLogger(__name__)

# The rows the start-up check compares: several lengths, the longest the model takes among them.
CHECK_LENGTHS = (1, 2, 7, 50, 129)


def check_rows(vocab_size: int, max_tokens: int, seed: int = 0) -> list[list[int]]:
    """Rows of random ids of ``CHECK_LENGTHS`` tokens (at most ``max_tokens``), and one of ``max_tokens``.

    >>> [len(r) for r in check_rows(100, 64)]
    [1, 2, 7, 50, 64, 64]
    """
    rng = np.random.default_rng(seed)
    lengths = [min(n, max_tokens) for n in CHECK_LENGTHS] + [max_tokens]
    return [rng.integers(0, vocab_size, size=n).tolist() for n in lengths]


@dataclasses.dataclass(frozen=True)
class _InFlight:
    """A launched step: its runs of rows (batch, start, end), and what its speed counts."""

    runs: Step
    launched: Any  # vllm_packed.LaunchedStep
    measured: bool
    tokens: int


class PackedSteps:
    """Each step one packed call of vLLM's model (server/engine/vllm_packed.py) on the step's rows."""

    loop = "packed"

    def __init__(self, backend: StepLoopBackend, packed, overlaps_steps: bool) -> None:
        self.backend = backend
        self.packed = packed  # vllm_packed.PackedModel, which passed its check
        # Whether the next step is launched before this one's vectors are collected: where the
        # device computes after a launch returns (a GPU), so that it need not wait for the host's
        # work between steps; and only on unpaced engines, where no query waits for that step.
        self.overlaps_steps = overlaps_steps
        self._out: dict[int, np.ndarray] = {}  # id(batch) -> its vectors so far

    def wrap_rows(self, rows) -> TokenRows:
        flat = TokenRows.from_lists(rows)
        lengths = flat.lengths
        if lengths.min() < 1:
            raise EngineRequestError("a row without tokens: each row needs one token at least")
        if lengths.max() > self.packed.max_tokens:
            raise EngineRequestError(
                f"a row of {int(lengths.max())} tokens: the model takes at most {self.packed.max_tokens}"
            )
        if flat.ids.size and not (0 <= int(flat.ids.min()) and int(flat.ids.max()) < self.packed.vocab_size):
            raise EngineRequestError(f"a token id outside the model's vocabulary (0 .. {self.packed.vocab_size - 1})")
        return flat

    def run(self) -> None:
        """The engine thread's loop, until ``wait_for_work`` says stop."""
        backend = self.backend
        in_flight: _InFlight | None = None  # launched, not yet collected: only where steps overlap
        while True:
            cancelled = backend.wait_for_work(lambda: in_flight is not None)  # no wait while a step computes
            if cancelled is None:
                break
            for batch in cancelled:
                self._out.pop(id(batch), None)
                backend.fail(batch)
            step = backend.next_step()
            launched = self._launch(step) if step else None
            if in_flight is not None:
                self._collect(in_flight)
            in_flight = launched
            if in_flight is not None and not self.overlaps_steps:
                self._collect(in_flight)
                in_flight = None

    def _launch(self, runs: Step) -> _InFlight:
        ids = np.concatenate([batch.rows.take(start, end) for batch, start, end in runs])
        lengths = np.concatenate([batch.rows.lengths[start:end] for batch, start, end in runs])
        measured = carries_bulk(runs)
        self.backend.step_started(measured)
        return _InFlight(runs, self.packed.launch(ids, lengths), measured, int(ids.shape[0]))

    def _collect(self, step: _InFlight) -> None:
        vectors = self.packed.collect(step.launched)
        at = 0
        for batch, start, end in step.runs:
            if not batch.cancelled:  # cancelled while its rows computed: its caller has gone
                self._scatter(batch, start, end, vectors[at : at + end - start])
                if batch.done:
                    self.backend.deliver(batch, self._out.pop(id(batch)))
            at += end - start
        self.backend.step_ended(step.measured, step.tokens)

    def _scatter(self, batch: StepBatch, start: int, end: int, vectors: np.ndarray) -> None:
        out = self._out.get(id(batch))
        if out is None:
            out = self._out[id(batch)] = np.empty((len(batch.rows), vectors.shape[1]), dtype=np.float32)
        out[start:end] = vectors
        batch.unfinished -= end - start


class PackedVllmBackend(VllmBackend):
    """vLLM's engine built in this process; each step one packed call of its model, or, where the
    model cannot run packed, vLLM's request per row (the fallback it holds)."""

    how = "stepped in this process, one packed batch a step"

    def _steps_for(self, engine) -> PackedSteps | VllmRequestSteps:
        from embedtext.server.engine.vllm_packed import PackedModel, PackedModelError

        try:
            packed = PackedModel(engine, self.model_clock, graphs=bool(self.settings.step_graph_tokens))
            checked = packed.check(engine, check_rows(packed.vocab_size, packed.max_tokens))
        except Exception as exc:  # a vLLM whose internals read otherwise too: its own path still serves
            why = (
                exc
                if isinstance(exc, PackedModelError)
                else f"this vLLM's internals differ ({type(exc).__name__}: {exc})"
            )
            log.warning("%s: packed steps off, vLLM's request per row instead: %s", self.name, why)
            return VllmRequestSteps(self, engine)
        steps = PackedSteps(self, packed, overlaps_steps=packed.asynchronous and self.pacer is None)
        log.info(
            "%s: packed steps, %s pooling (least cosine to vLLM's own vectors %.7f, held to %.7f)%s%s",
            self.name,
            packed.pooling,
            checked.least_cosine,
            checked.bound.min_cosine,
            ", each launched while the last one computes" if steps.overlaps_steps else "",
            f", replaying CUDA graphs of up to {packed.graphs.largest} tokens" if packed.use_graphs else "",
        )
        return steps

    @property
    def packed(self):
        """The packed model (vllm_packed.PackedModel), or None where the engine fell back."""
        return self.steps.packed if isinstance(self.steps, PackedSteps) else None

    @property
    def overlaps_steps(self) -> bool:
        return isinstance(self.steps, PackedSteps) and self.steps.overlaps_steps

    @overlaps_steps.setter
    def overlaps_steps(self, value: bool) -> None:  # tests and the GPU overlap suite set it
        self.steps.overlaps_steps = value
