"""Which backend a replica runs: a stepped vLLM engine (in its worker process), or the null engine."""

from __future__ import annotations

from collections.abc import Callable

from embedtext.server.engine.base import INTERACTIVE_WORKER_NAME, WORKER_NAME, Backend, EngineSettings
from embedtext.server.models.source import ModelSpec


def make_backend(
    spec: ModelSpec,
    settings: EngineSettings,
    *,
    engine: str,
    own_process: bool,
    name: str,
    process_name: str = WORKER_NAME,
) -> Backend:
    """A new, not yet started backend (``engine``: "vllm-stepped", "vllm-packed" or "null"); in a worker
    process named ``process_name`` where ``own_process``."""
    if own_process:
        from embedtext.server.engine.process_backend import EngineProcessBackend

        return EngineProcessBackend(spec, settings, name=name, engine=engine, process_name=process_name)
    if engine == "null":
        from embedtext.server.engine.null_backend import NullBackend

        return NullBackend(spec, name=name)
    if engine == "vllm-packed":
        from embedtext.server.engine.packed_backend import PackedVllmBackend

        return PackedVllmBackend(spec, settings, name=name)
    if engine == "vllm-stepped":
        from embedtext.server.engine.vllm_stepped import SteppedVllmBackend

        return SteppedVllmBackend(spec, settings, name=name)
    raise ValueError(f"no engine {engine!r}: vllm-stepped, vllm-packed or null")


def backend_factory(
    spec: ModelSpec,
    settings: EngineSettings,
    *,
    engine: str,
    own_process: bool,
    interactive_settings: EngineSettings | None = None,
    interactive_from: int = 0,
) -> Callable[[int], Backend]:
    """Replica index -> a new backend named ``model/index``; from index ``interactive_from`` on,
    with ``interactive_settings`` where given (the interactive replica), in a worker process of
    its own name."""

    def make(index: int) -> Backend:
        interactive = interactive_settings is not None and index >= interactive_from
        return make_backend(
            spec,
            interactive_settings if interactive else settings,
            engine=engine,
            own_process=own_process,
            name=f"{spec.name}/{index}",
            process_name=INTERACTIVE_WORKER_NAME if interactive else WORKER_NAME,
        )

    return make
