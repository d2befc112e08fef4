"""A null engine: vectors without a model. For measuring overhead only, never for serving.

``NullBackend`` answers every batch at once with fixed vectors of the model's dimension
(row i of a batch gets a vector derived from its token count, so replies are not all
identical). It exists so benchmarks can measure what the server, the wire format and the
client cost by themselves (bench/transport.py); ``embedtext serve --engine null`` says so
loudly at start-up.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from embedtext.server.models.source import ModelSpec
from embedtext.server.rows import TokenRows

log = logging.getLogger(__name__)


class NullBackend:
    """Implements ``engine.Backend`` with no model behind it."""

    def __init__(self, spec: ModelSpec, *, name: str = "null") -> None:
        self.spec = spec
        self.name = name
        self._running = False
        # One fixed unit-length base vector; each row scales it by its token count.
        rng = np.random.default_rng(0)
        base = rng.standard_normal(spec.dim).astype(np.float32)
        self._base = base / np.linalg.norm(base)

    async def spawn(self) -> None:
        return None  # nothing to start ahead of the engine

    async def start(self) -> None:
        log.warning(
            "%s: NULL ENGINE for model %s - vectors are not embeddings (benchmarks only)", self.name, self.spec.name
        )
        self._running = True

    async def embed(self, rows: TokenRows, interactive_rows: int = 0) -> np.ndarray:
        scale = TokenRows.from_lists(rows).lengths.astype(np.float32)
        return scale[:, None] * self._base[None, :]

    async def stop(self) -> None:
        self._running = False

    def take_model_seconds(self) -> float:
        return 0.0  # no model

    @property
    def alive(self) -> bool:
        return self._running

    @property
    def pids(self) -> list[int]:
        return [os.getpid()] if self._running else []

    @property
    def pace(self) -> None:
        return None  # nothing to pace

    @property
    def loop(self) -> str:
        return ""
