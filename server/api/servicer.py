"""The gRPC face of the server: proto <-> domain, and errors -> status codes. Nothing else."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import grpc

from embedtext.protocol import PROTOCOL_VERSION, RETRY_PUSHBACK_KEY, codec, reply_wire
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol import embedding_pb2_grpc as pb_grpc
from embedtext.protocol.errors import EmbedTextError, ModelNotFoundError, to_status
from embedtext.protocol.reply_wire import OutgoingReply
from embedtext.server.api.decoding import (
    MalformedRequest,
    decode_inputs,
    decode_options,
    decode_split_options,
    tolerant,
)
from embedtext.server.api.loop_lag import LoopLag
from embedtext.server.config.settings import ServerConfig
from embedtext.server.metrics import ServerMetrics
from embedtext.server.scheduler.jobs import EmbedResult
from embedtext.server.scheduler.runtime import ModelRuntime

log = logging.getLogger(__name__)


def _server_version() -> str:
    try:
        from importlib.metadata import version

        return version("embedtext")
    except Exception:
        return "unknown"


class EmbeddingServicer(pb_grpc.EmbeddingServicer):
    def __init__(
        self,
        runtimes: list[ModelRuntime],
        config: ServerConfig,
        metrics: ServerMetrics,
        loop_lag: LoopLag | None = None,
    ) -> None:
        self.runtimes = runtimes
        self.config = config
        self.metrics = metrics
        self.loop_lag = loop_lag or LoopLag()  # Info's event-loop figures (the server runs its ticks)
        self.default_model = runtimes[0].spec.name
        self._by_name: dict[str, ModelRuntime] = {}
        for rt in runtimes:
            for name in (rt.spec.name, *rt.spec.aliases):
                self._by_name[name] = rt

    def runtime_for(self, model: str) -> ModelRuntime:
        if not model:
            return self._by_name[self.default_model]
        try:
            return self._by_name[model]
        except KeyError:
            served = ", ".join(rt.spec.name for rt in self.runtimes)
            shown = model if len(model) <= 100 else f"{model[:100]}... ({len(model)} characters)"
            raise ModelNotFoundError(f"model {shown!r} is not served here; served models: {served}") from None

    # --- Embed ---------------------------------------------------------------------------

    async def _embed(
        self, request: pb.EmbedRequest | MalformedRequest, time_remaining: float | None, peer: str
    ) -> OutgoingReply | pb.EmbedResponse:
        started, started_unix_ns = time.monotonic(), time.time_ns()
        if isinstance(request, MalformedRequest):
            raise request.error()
        runtime = self.runtime_for(request.model)
        options = decode_options(request)
        if not options.caller:
            options = dataclasses.replace(options, caller=peer)
        inputs = decode_inputs(request)
        deadline = time.monotonic() + time_remaining if time_remaining is not None else None
        if inputs.texts is not None:
            result = await runtime.embed_texts(inputs.texts, options, deadline)
        else:
            result = await runtime.embed_token_ids(inputs.token_ids, options, deadline)
        return self._response(request, result, started, started_unix_ns)

    @staticmethod
    def _response(
        request: pb.EmbedRequest, result: EmbedResult, started: float, started_unix_ns: int
    ) -> OutgoingReply | pb.EmbedResponse:
        count, dim = result.embeddings.shape
        response = pb.EmbedResponse(
            request_id=request.request_id,
            model=result.model,
            count=count,
            dim=dim,
            token_counts_i32le=codec.int32s_to_bytes(result.token_counts),
            queue_time_ns=int(result.queue_s * 1e9),
            inference_time_ns=int(result.inference_s * 1e9),
            tokenize_time_ns=int(result.tokenize_s * 1e9),
            handler_start_unix_ns=started_unix_ns,
        )
        reply: OutgoingReply | pb.EmbedResponse
        if request.output_dtype == pb.OUTPUT_DTYPE_FLOAT32_REPEATED:
            response.dtype = pb.OUTPUT_DTYPE_FLOAT32_REPEATED
            response.embeddings_f32.extend(result.embeddings.reshape(-1).tolist())
            reply = response
        else:
            # The embeddings bytes are appended at serialization (reply_wire), not copied into protobuf.
            wire_dtype = codec.F16LE if request.output_dtype == pb.OUTPUT_DTYPE_FLOAT16 else codec.F32LE
            response.dtype = pb.OUTPUT_DTYPE_FLOAT16 if wire_dtype == codec.F16LE else pb.OUTPUT_DTYPE_FLOAT32
            reply = OutgoingReply(response, codec.embeddings_as(result.embeddings, wire_dtype))
        # Last, so the handler's time holds building the reply (OutgoingReply serializes its message later).
        response.server_time_ns = int((time.monotonic() - started) * 1e9)
        return reply

    def _count(self, request: pb.EmbedRequest, code: grpc.StatusCode, cause: str | None = None) -> None:
        model = getattr(request, "model", "") or self.default_model  # a MalformedRequest has none
        model = model if model in self._by_name else "unknown"
        self.metrics.requests.labels(model, code.name).inc()
        if cause:
            self.metrics.failures.labels(model, cause).inc()

    async def Embed(
        self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext
    ) -> OutgoingReply | pb.EmbedResponse:
        return await self._answer(
            "Embed", request, context, self._embed(request, context.time_remaining(), context.peer())
        )

    async def _answer(self, rpc: str, request, context: grpc.aio.ServicerContext, work):
        """``work``'s reply, or its error as a status code: counted, with the retry pushback where one applies."""
        started = time.monotonic()
        try:
            response = await work
        except EmbedTextError as exc:
            code, message = to_status(exc)
            self._count(request, code, type(exc).__name__)
            retry_after_s = getattr(exc, "retry_after_s", None)
            if retry_after_s is not None:
                context.set_trailing_metadata(((RETRY_PUSHBACK_KEY, str(max(1, round(retry_after_s * 1000)))),))
            await context.abort(code, message)
        except asyncio.CancelledError:
            self._count(request, grpc.StatusCode.CANCELLED, "cancelled")
            raise
        except Exception as exc:
            log.exception("%s failed", rpc)
            self._count(request, grpc.StatusCode.INTERNAL, type(exc).__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        self._count(request, grpc.StatusCode.OK)
        self.metrics.request_time.labels(response.model).observe(time.monotonic() - started)
        return response

    # --- Split ---------------------------------------------------------------------------

    async def Split(self, request: pb.SplitRequest, context: grpc.aio.ServicerContext) -> pb.SplitResponse:
        return await self._answer("Split", request, context, self._split(request))

    async def _split(self, request: pb.SplitRequest | MalformedRequest) -> pb.SplitResponse:
        if isinstance(request, MalformedRequest):
            raise request.error()
        runtime = self.runtime_for(request.model)
        options = decode_split_options(request)
        chunks, size = await runtime.split_texts(decode_inputs(request).texts, options)
        return pb.SplitResponse(
            request_id=request.request_id,
            model=runtime.spec.name,
            count=len(chunks.counts),
            chunk_counts_i32le=codec.int32s_to_bytes(chunks.counts),
            spans_i32le=codec.int32s_to_bytes(chunks.spans.reshape(-1)),
            token_counts_i32le=codec.int32s_to_bytes(chunks.tokens),
            max_tokens=size,
        )

    # --- Info ----------------------------------------------------------------------------

    async def Info(self, request: pb.InfoRequest, context: grpc.aio.ServicerContext) -> pb.InfoResponse:
        models = [
            pb.ModelInfo(
                name=rt.spec.name,
                aliases=list(rt.spec.aliases),
                dim=rt.spec.dim,
                max_tokens=rt.spec.max_tokens,
                matryoshka_dimensions=list(rt.spec.matryoshka_dimensions),
                normalize_default=rt.spec.normalize,
                pooling=rt.spec.pooling,
                prompts=rt.spec.prompts,
                default_prompt_name=rt.spec.default_prompt_name,
                replicas=rt.supervisor.healthy_count,
                interactive_replicas=sum(1 for r in rt.supervisor.replicas if r.healthy and r.interactive_only),
                starting_replicas=rt.supervisor.starting_count,
                queued_interactive_rows=rt.queue.queued_interactive_rows,
                queued_bulk_rows=rt.queue.queued_bulk_rows,
                waiting_bulk_callers=rt.queue.waiting_bulk_callers,
                interactive_slo_ms=(rt.interactive_slo_s or 0.0) * 1000,
                bulk_batch_tokens=rt.queue.bulk_batch_tokens,
                bulk_turn_ms=rt.bulk_turn_s * 1000,
                interactive_gather_ms=rt.queue.interactive_gather_s * 1000,
                interactive_threads=rt.settings.interactive_threads,
                engine_tokens_per_second=rt.engine_tokens_per_s,
                engine_model_cpu_seconds=rt.model_seconds,
                dtype=rt.settings.dtype.dtype,
                engine_loop=rt.engine_loop,
                engine_step_tokens=[pace.budget_tokens for pace in rt.engine_paces()],
                interactive_slo_missed=rt.interactive_slo_missed,
                enforce_eager=rt.settings.enforce_eager,
                held_bulk_rows=rt.tokenizing_gate.waiting_rows if rt.tokenizing_gate else 0,
                held_bulk_requests=rt.tokenizing_gate.waiting_requests if rt.tokenizing_gate else 0,
                **_interactive_latency_fields(rt),
            )
            for rt in self.runtimes
        ]
        lag_p99_ms, lag_max_ms, ticks = self.loop_lag.figures()
        return pb.InfoResponse(
            event_loop_lag_p99_ms=lag_p99_ms,
            event_loop_lag_max_ms=lag_max_ms,
            event_loop_ticks=ticks,
            protocol_version=PROTOCOL_VERSION,
            server_version=_server_version(),
            default_model=self.default_model,
            models=models,
            max_batch_rows=self.config.max_request_rows,
            max_message_bytes=self.config.max_message_bytes,
        )


SERVICE = pb.DESCRIPTOR.services_by_name["Embedding"].full_name


def add_service(servicer, server) -> None:
    """Register the Embedding service (as the generated code does, but with tolerant decoding)."""
    handlers = {
        "Embed": grpc.unary_unary_rpc_method_handler(
            servicer.Embed,
            request_deserializer=tolerant(pb.EmbedRequest),
            response_serializer=reply_wire.serialize_reply,
        ),
        "Split": grpc.unary_unary_rpc_method_handler(
            servicer.Split,
            request_deserializer=tolerant(pb.SplitRequest),
            response_serializer=pb.SplitResponse.SerializeToString,
        ),
        "Info": grpc.unary_unary_rpc_method_handler(
            servicer.Info,
            request_deserializer=tolerant(pb.InfoRequest),
            response_serializer=pb.InfoResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


def _interactive_latency_fields(runtime) -> dict:
    """Info's p50, p99 and count of the model's last interactive requests."""
    p50, p99, count = runtime.interactive_latency.figures()
    return {"interactive_p50_ms": p50, "interactive_p99_ms": p99, "interactive_requests": count}
