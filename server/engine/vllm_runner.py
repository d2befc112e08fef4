"""The model runner inside an in-process vLLM engine: where the packed path (server/engine/vllm_packed.py)
and the model clock (server/engine/model_clock.py) reach into vLLM."""

from __future__ import annotations

import logging
from typing import Any

from embedtext.server.engine.attention_kinds import embedding_head
from embedtext.server.engine.model_clock import ModelClock

log = logging.getLogger(__name__)


class RunnerNotFoundError(Exception):
    """This vLLM's engine has no in-process model runner where expected; the message says why."""


def model_runner(engine) -> Any:
    """The model runner of an in-process ``LLMEngine`` (vLLM's GPU runner, or its CPU subclass)."""
    try:
        core = engine.engine_core.engine_core  # InprocClient -> EngineCore
        return core.model_executor.driver_worker.worker.model_runner
    except AttributeError as exc:
        raise RunnerNotFoundError(f"this vLLM's engine has no in-process model runner where expected ({exc})") from None


def clock_model_forward(engine, clock: ModelClock, name: str) -> None:
    """Time every forward vLLM's runner makes (its ``_model_forward``, CUDA graphs or not) on
    ``clock``, and the model's sentence-transformers Dense layers where it has them (EmbeddingGemma's:
    the model's weights, whichever path applies them); a log line where this vLLM's runner has none
    (the clock then stays at 0)."""
    try:
        runner = model_runner(engine)
        forward = runner._model_forward
    except (RunnerNotFoundError, AttributeError) as exc:
        log.info("%s: the model's share of the engine's CPU is not measured: %s", name, exc)
        return
    runner._model_forward = clock.timed(forward)
    projector, _ = embedding_head(getattr(runner, "model", None))
    if projector is not None:  # vLLM's pooler and the packed path both call the module: timed there once
        projector.forward = clock.timed(projector.forward)
