"""The model's matrix products alone: about the most rows/s any path can reach on this CPU at one dtype.

>>> EncoderShape(layers=6, hidden=384, intermediate=1536).linear_flops(50)  # all-MiniLM-L6-v2, one 50-token row
1061683200
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

# Tokens per product: what one vLLM step holds by default on a CPU (``max_num_batched_tokens``).
STEP_TOKENS = 2048


@dataclass(frozen=True)
class EncoderShape:
    """The sizes of a BERT encoder's linear layers."""

    layers: int
    hidden: int
    intermediate: int

    @classmethod
    def of(cls, model_dir: str | os.PathLike) -> EncoderShape:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        return cls(config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"])

    def linear_flops(self, tokens: int) -> int:
        """FLOPs of the linear layers over ``tokens`` tokens: per layer, the query, key, value and
        output projections (hidden x hidden each) and the feed-forward pair (hidden x intermediate)."""
        return 2 * tokens * self.layers * (4 * self.hidden**2 + 2 * self.hidden * self.intermediate)


class MatmulFloor:
    """Runs the linear layers' products of rows of ``tokens`` tokens, ``STEP_TOKENS`` at a time
    (one row alone where a row is longer), with random weights in ``dtype``."""

    def __init__(self, shape: EncoderShape, *, dtype: str, threads: int, seed: int = 0) -> None:
        import torch

        torch.set_num_threads(threads)
        self.shape = shape
        self.dtype = dtype
        generator = torch.Generator().manual_seed(seed)
        h, i = shape.hidden, shape.intermediate

        def weight(rows: int, cols: int):
            # Scaled so that activations keep their size through the layers (no overflow, no denormals).
            return (torch.randn(rows, cols, generator=generator) / rows**0.5).to(getattr(torch, dtype))

        self.layers = [(weight(h, 3 * h), weight(h, h), weight(h, i), weight(i, h)) for _ in range(shape.layers)]
        self.inputs = torch.randn(STEP_TOKENS, h, generator=generator).to(getattr(torch, dtype))

    def run(self, rows: int, tokens: int) -> float:
        """Seconds to compute ``rows`` rows' products."""
        import torch

        h = self.shape.hidden
        rows_per_step = max(1, STEP_TOKENS // tokens)
        inputs = self.inputs if tokens <= STEP_TOKENS else self.inputs.repeat(-(-tokens // STEP_TOKENS), 1)
        start = time.perf_counter()
        with torch.inference_mode():
            for first in range(0, rows, rows_per_step):
                x = inputs[: min(rows_per_step, rows - first) * tokens]
                for qkv, out, up, down in self.layers:
                    x = ((x @ qkv)[:, :h] @ out) @ up @ down
        return time.perf_counter() - start
