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
        # One pass for the squared lengths, one for the scaling into the new array: half the time
        # of np.linalg.norm's temporaries and a divide, on the event loop.
        lengths = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
        return np.multiply(vectors, (1.0 / np.maximum(lengths, 1e-12))[:, None], dtype=np.float32)
    return vectors.astype(np.float32, copy=False)
