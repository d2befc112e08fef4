"""A null engine: vectors without a model. For measuring overhead only, never for serving.

``NullBackend`` answers every batch at once with vectors of the model's dimension derived from
each row's token ids: the same text always gets the same vector, and two texts different ones, so
a test of row order can see rows swapped or given another row's vector. It exists so benchmarks
can measure what the server, the wire format and the client cost by themselves
(bench/transport.py); ``embedtext serve --engine null`` says so loudly at start-up.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from embedtext.server.models.source import ModelSpec
from embedtext.server.rows import TokenRows

log = logging.getLogger(__name__)

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))


def row_keys(rows: TokenRows) -> np.ndarray:
    """A 64-bit hash a row of its ids and their positions (rows of other ids, or of the same ids
    in another order, get other keys), from two sums over the flat ids: no Python step a row.

    >>> keys = row_keys(TokenRows.from_lists([[1, 2], [2, 1], [1, 2], [7]]))
    >>> keys[0] == keys[2], keys[0] == keys[1], len(set(keys.tolist()))
    (np.True_, np.False_, 3)
    """
    ids = rows.ids.astype(np.uint64)
    starts = np.minimum(rows.offsets[:-1], ids.size - 1)  # an empty row (never served) reads its neighbour
    total = np.add.reduceat(ids, starts)
    # sum(id * position in its row) = sum(id * flat index) - row start * sum(id)
    weighted = np.add.reduceat(ids * np.arange(ids.size, dtype=np.uint64), starts) - starts.astype(np.uint64) * total
    key = total * _MIX[0] + (weighted + np.uint64(1)) * _MIX[1]
    return key ^ (key >> np.uint64(31))


class NullBackend:
    """Implements ``engine.Backend`` with no model behind it."""

    def __init__(self, spec: ModelSpec, *, name: str = "null") -> None:
        self.spec = spec
        self.name = name
        self._running = False
        # One fixed unit-length base vector; each row scales it by its token count and marks two of
        # its elements by a hash of its ids.
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
        rows = TokenRows.from_lists(rows)
        scale = rows.lengths.astype(np.float32)
        vectors = scale[:, None] * self._base[None, :]
        if rows.ids.size:
            key = row_keys(rows)
            at = np.arange(len(rows))
            vectors[at, key % self.spec.dim] += scale
            vectors[at, (key >> np.uint64(32)) % self.spec.dim] -= 0.5 * scale
        return vectors

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
