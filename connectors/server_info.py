"""What a server says it serves (the ``Info`` RPC), as plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field

from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import InvalidInputError, ModelNotFoundError


@dataclass(frozen=True)
class ModelInfo:
    name: str
    aliases: tuple[str, ...]
    dim: int
    max_tokens: int
    matryoshka_dimensions: tuple[int, ...]
    normalize_default: bool
    pooling: str
    replicas: int
    # The queue when Info answered: rows waiting per latency class, bulk callers waiting.
    queued_interactive_rows: int = 0
    queued_bulk_rows: int = 0
    waiting_bulk_callers: int = 0
    # Pacing: the interactive target (0: off), a bulk batch's token budget, one engine's speed.
    interactive_slo_ms: float = 0.0
    bulk_batch_tokens: int = 0
    engine_tokens_per_second: float = 0.0
    dtype: str = ""
    engine_loop: str = ""
    # A stepped engine's step budget per replica (empty: not stepped); whether the target is out of reach.
    engine_step_tokens: tuple[int, ...] = ()
    interactive_slo_missed: bool = False
    enforce_eager: bool = False
    # Bulk rows (and requests) held before the tokenizer until the queue drains.
    held_bulk_rows: int = 0
    held_bulk_requests: int = 0
    # The server-side latency of the last interactive requests (at most 1,000): p50, p99, how many.
    interactive_p50_ms: float = 0.0
    interactive_p99_ms: float = 0.0
    interactive_requests: int = 0
    # Of the healthy replicas, those that run interactive requests only (--interactive-replica).
    interactive_replicas: int = 0
    # Replicas not up yet: on a CPU the engines after each model's first start behind a ready server.
    starting_replicas: int = 0
    # Bulk callers' turns on the engines, in engine time (0: off).
    bulk_turn_ms: float = 0.0
    # While bulk work runs, how long a query may wait for others to share its step (0: none).
    interactive_gather_ms: float = 0.0
    # On a CPU, the threads the interactive replica's engine computes on (0: not set).
    interactive_threads: int = 0
    # CPU seconds the engines' threads spent in the model's forward since the server started (0: not measured).
    engine_model_cpu_seconds: float = 0.0
    # The model's prompts by name ("query", "document", ...), and the one a call that names none gets ("": none).
    prompts: dict[str, str] = field(default_factory=dict, hash=False)
    default_prompt_name: str = ""

    def output_dim(self, dimensions: int | None) -> int:
        """The size of the vectors asked for: ``dimensions`` (Matryoshka) or the full dim."""
        if dimensions is not None and not 0 < dimensions <= self.dim:
            raise InvalidInputError(f"dimensions={dimensions} is not available: model {self.name} has {self.dim}")
        return dimensions or self.dim


@dataclass(frozen=True)
class ServerInfo:
    protocol_version: str
    server_version: str
    default_model: str
    models: tuple[ModelInfo, ...]
    max_batch_rows: int
    max_message_bytes: int
    # How late the server's event loop ran its 20 ms timer over the last 10 s: p99, the most (ms),
    # and how many ticks (0: a server from before it kept them, or one just started).
    event_loop_lag_p99_ms: float = 0.0
    event_loop_lag_max_ms: float = 0.0
    event_loop_ticks: int = 0

    def model(self, name: str | None = None) -> ModelInfo:
        """The served model called ``name`` (or an alias of it); the default model for None."""
        wanted = name or self.default_model
        for m in self.models:
            if wanted == m.name or wanted in m.aliases:
                return m
        served = ", ".join(m.name for m in self.models)
        raise ModelNotFoundError(f"model {wanted!r} is not served; served models: {served}")

    @classmethod
    def from_proto(cls, r: pb.InfoResponse) -> ServerInfo:
        return cls(
            protocol_version=r.protocol_version,
            server_version=r.server_version,
            default_model=r.default_model,
            models=tuple(
                ModelInfo(
                    name=m.name,
                    aliases=tuple(m.aliases),
                    dim=m.dim,
                    max_tokens=m.max_tokens,
                    matryoshka_dimensions=tuple(m.matryoshka_dimensions),
                    normalize_default=m.normalize_default,
                    pooling=m.pooling,
                    replicas=m.replicas,
                    queued_interactive_rows=m.queued_interactive_rows,
                    queued_bulk_rows=m.queued_bulk_rows,
                    waiting_bulk_callers=m.waiting_bulk_callers,
                    interactive_slo_ms=m.interactive_slo_ms,
                    bulk_batch_tokens=m.bulk_batch_tokens,
                    engine_tokens_per_second=m.engine_tokens_per_second,
                    dtype=m.dtype,
                    engine_loop=m.engine_loop,
                    engine_step_tokens=tuple(m.engine_step_tokens),
                    interactive_slo_missed=m.interactive_slo_missed,
                    enforce_eager=m.enforce_eager,
                    held_bulk_rows=m.held_bulk_rows,
                    held_bulk_requests=m.held_bulk_requests,
                    interactive_p50_ms=m.interactive_p50_ms,
                    interactive_p99_ms=m.interactive_p99_ms,
                    interactive_requests=m.interactive_requests,
                    interactive_replicas=m.interactive_replicas,
                    starting_replicas=m.starting_replicas,
                    bulk_turn_ms=m.bulk_turn_ms,
                    interactive_gather_ms=m.interactive_gather_ms,
                    interactive_threads=m.interactive_threads,
                    engine_model_cpu_seconds=m.engine_model_cpu_seconds,
                    prompts=dict(m.prompts),
                    default_prompt_name=m.default_prompt_name,
                )
                for m in r.models
            ),
            max_batch_rows=r.max_batch_rows,
            max_message_bytes=r.max_message_bytes,
            event_loop_lag_p99_ms=r.event_loop_lag_p99_ms,
            event_loop_lag_max_ms=r.event_loop_lag_max_ms,
            event_loop_ticks=r.event_loop_ticks,
        )
