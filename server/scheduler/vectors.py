"""A request's options applied to its raw pooled vectors: the Matryoshka cut, then L2 normalization.

The engines return raw pooled vectors because one batch may mix requests with different options.
"""

from __future__ import annotations

import numpy as np


def shape_vectors(pooled: np.ndarray, dimensions: int, normalize: bool) -> np.ndarray:
    """The first ``dimensions`` columns (0: all), unit length if ``normalize``; float32.

    >>> shape_vectors(np.array([[3.0, 4.0, 12.0]], dtype=np.float32), 2, True)
    array([[0.6, 0.8]], dtype=float32)
    """
    vectors = pooled[:, : dimensions or pooled.shape[1]]
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)
    return vectors.astype(np.float32, copy=False)
