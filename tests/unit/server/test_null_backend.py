"""The null engine (no model; benchmarks and fast tests) gives each text its own vector, so that a
test of row order through it can fail."""

import asyncio
from pathlib import Path

import numpy as np

from embedtext.server.engine.null_backend import NullBackend
from embedtext.server.models.source import ModelSpec
from embedtext.server.rows import TokenRows


def _unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_each_text_has_its_own_vector_and_a_text_always_the_same():
    spec = ModelSpec(name="m", path=Path("m"), dim=384, max_tokens=64, pooling="mean", normalize=True)
    rows = [[101, 7, 102], [101, 8, 102], [101, 102, 7], [101, 7, 7, 102], [101, 7, 102], [5] * 60]
    vectors = _unit(asyncio.run(NullBackend(spec).embed(TokenRows.from_lists(rows))))
    # Rows 0 and 4 hold the same ids; every other pair differs, also after normalizing.
    np.testing.assert_array_equal(vectors[0], vectors[4])
    distinct = np.delete(vectors, 4, axis=0)
    closest = max(float(a @ b) for i, a in enumerate(distinct) for b in distinct[i + 1 :])
    assert closest < 0.99
    # The same rows in another batch, or alone, get the same vectors.
    alone = _unit(asyncio.run(NullBackend(spec).embed(TokenRows.from_lists(rows[2:3]))))
    np.testing.assert_array_equal(alone[0], vectors[2])
