"""What packed steps know of each kind of attention a model's layers run, and of the head vLLM applies
after pooling: read from the built engine before any kernel is called, so that a kind this module
does not know sends the engine to vLLM's own request path, not into a kernel given the wrong metadata.

* ``encoder``: encoder-only attention (BERT, XLM-R, ModernBERT; Gemma3 and Qwen3 configured
  bidirectional, as EmbeddingGemma is). Each row attends within itself, and nothing stays in a KV
  cache: vLLM-CPU stages the keys and values in a scratch buffer.
* ``decoder``: causal full attention (Qwen3-Embedding, gte-Qwen2, e5-mistral). The layers write
  each row's keys and values into the engine's own KV cache and read them back in the same
  forward. A packed step owns the cache while it runs (no vLLM request is in flight then), and no
  later step reads what it left there, so its rows take blocks from block 1 on (block 0 is vLLM's
  null block), each row from a block boundary.

Anything else (a sliding-window or chunked decoder, MLA, cross attention, state-space layers) is
refused with a ``PackedModelError`` that names it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

ENCODER = "encoder"
DECODER = "decoder"
# vLLM's block pool keeps block 0 as its null block: packed steps stage a decoder's rows after it.
FIRST_BLOCK = 1


class PackedModelError(Exception):
    """This vLLM or model cannot run packed; the message says why (the engine's own path serves)."""


@dataclasses.dataclass(frozen=True)
class AttentionGroup:
    """Layers whose attention metadata one builder of vLLM's builds, and their kind."""

    builder: Any
    layers: list[str]
    kind: str  # ENCODER or DECODER
    block_size: int


def _kind(spec) -> str:
    from vllm.v1.kv_cache_interface import EncoderOnlyAttentionSpec, FullAttentionSpec

    if isinstance(spec, EncoderOnlyAttentionSpec):
        return ENCODER
    windowed = getattr(spec, "sliding_window", None) or getattr(spec, "attention_chunk_size", None)
    if type(spec) is FullAttentionSpec and not windowed:
        return DECODER
    kind = type(spec).__name__ + (" with a window" if windowed else "")
    raise PackedModelError(f"layers of {kind}: packed steps run encoder-only and causal full attention")


def attention_groups(runner) -> list[AttentionGroup]:
    """The runner's attention groups, each with its kind; raises PackedModelError for a kind not known here."""
    groups = []
    for group_id, kv_group in enumerate(runner.kv_cache_config.kv_cache_groups):
        spec = kv_group.kv_cache_spec
        kind = _kind(spec)
        for attention_group in runner.attn_groups[group_id]:
            builder = attention_group.get_metadata_builder(0)
            groups.append(AttentionGroup(builder, list(attention_group.layer_names), kind, int(spec.block_size)))
    if not groups:
        raise PackedModelError("the model has no attention layers vLLM built metadata for")
    return groups


def cache_blocks(runner) -> int:
    """Blocks of the engine's KV cache a packed step may stage a decoder's rows in."""
    return int(runner.kv_cache_config.num_blocks) - FIRST_BLOCK


def embedding_head(model) -> tuple[Any, Any]:
    """The sentence-transformers Dense layers vLLM applies to a pooled vector (None: the model has
    none), and the dtype it applies them in: vLLM's embed pooler's head, within its dispatcher."""
    pooler = getattr(model, "pooler", None)
    pooler = getattr(pooler, "poolers_by_task", {}).get("embed", pooler)
    head = getattr(pooler, "head", None)
    return getattr(head, "projector", None), getattr(head, "head_dtype", None)


def row_blocks(lengths: np.ndarray, block_size: int) -> np.ndarray:
    """Blocks each row takes, from a block boundary."""
    return (lengths + block_size - 1) // block_size


def block_layout(
    lengths: np.ndarray, row_of_token: np.ndarray, positions: np.ndarray, block_size: int, first_block: int = 0
) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows laid out in consecutive blocks from ``first_block``: the block table (int32, rows x the
    most blocks a row takes), each token's slot (int64), and the blocks used.

    >>> table, slots, used = block_layout(np.array([3, 1]), np.array([0, 0, 0, 1]), np.array([0, 1, 2, 0]), 2, 1)
    >>> table.tolist(), slots.tolist(), used
    ([[1, 2], [3, 4]], [2, 3, 4, 6], 3)
    """
    blocks = row_blocks(lengths, block_size)
    first = np.full(len(lengths), first_block, dtype=np.int64)
    np.cumsum(blocks[:-1], out=first[1:])
    first[1:] += first_block
    table = (first[:, None] + np.arange(int(blocks.max()), dtype=np.int64)[None, :]).astype(np.int32)
    return table, first[row_of_token] * block_size + positions, int(blocks.sum())


def rows_per_forward(lengths: np.ndarray, block_size: int, capacity: int) -> list[tuple[int, int]]:
    """A step's rows as runs (start, end) whose blocks each fit in ``capacity`` blocks (one run where all do).

    >>> rows_per_forward(np.array([3, 3, 3, 1]), 2, 4)
    [(0, 2), (2, 4)]
    """
    blocks = row_blocks(lengths, block_size)
    runs, start, used = [], 0, 0
    for row, need in enumerate(blocks.tolist()):
        if used + need > capacity and row > start:
            runs.append((start, row))
            start, used = row, 0
        used += need
    runs.append((start, len(lengths)))
    return runs
