from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Truncation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATION_UNSPECIFIED: _ClassVar[Truncation]
    TRUNCATION_END: _ClassVar[Truncation]
    TRUNCATION_NONE: _ClassVar[Truncation]

class OutputDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_DTYPE_UNSPECIFIED: _ClassVar[OutputDtype]
    OUTPUT_DTYPE_FLOAT32: _ClassVar[OutputDtype]
    OUTPUT_DTYPE_FLOAT16: _ClassVar[OutputDtype]
    OUTPUT_DTYPE_FLOAT32_REPEATED: _ClassVar[OutputDtype]

class LatencyClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LATENCY_CLASS_UNSPECIFIED: _ClassVar[LatencyClass]
    LATENCY_CLASS_INTERACTIVE: _ClassVar[LatencyClass]
    LATENCY_CLASS_BULK: _ClassVar[LatencyClass]
TRUNCATION_UNSPECIFIED: Truncation
TRUNCATION_END: Truncation
TRUNCATION_NONE: Truncation
OUTPUT_DTYPE_UNSPECIFIED: OutputDtype
OUTPUT_DTYPE_FLOAT32: OutputDtype
OUTPUT_DTYPE_FLOAT16: OutputDtype
OUTPUT_DTYPE_FLOAT32_REPEATED: OutputDtype
LATENCY_CLASS_UNSPECIFIED: LatencyClass
LATENCY_CLASS_INTERACTIVE: LatencyClass
LATENCY_CLASS_BULK: LatencyClass

class PackedTexts(_message.Message):
    __slots__ = ("data_utf8", "offsets_i32le")
    DATA_UTF8_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_I32LE_FIELD_NUMBER: _ClassVar[int]
    data_utf8: bytes
    offsets_i32le: bytes
    def __init__(self, data_utf8: _Optional[bytes] = ..., offsets_i32le: _Optional[bytes] = ...) -> None: ...

class TextList(_message.Message):
    __slots__ = ("texts",)
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, texts: _Optional[_Iterable[str]] = ...) -> None: ...

class PackedTokenIds(_message.Message):
    __slots__ = ("ids_i32le", "offsets_i32le")
    IDS_I32LE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_I32LE_FIELD_NUMBER: _ClassVar[int]
    ids_i32le: bytes
    offsets_i32le: bytes
    def __init__(self, ids_i32le: _Optional[bytes] = ..., offsets_i32le: _Optional[bytes] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("model", "packed_texts", "texts", "token_ids", "dimensions", "normalize", "truncation", "output_dtype", "request_id", "latency_class", "caller", "prompt_name", "prompt")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PACKED_TEXTS_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DTYPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LATENCY_CLASS_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    model: str
    packed_texts: PackedTexts
    texts: TextList
    token_ids: PackedTokenIds
    dimensions: int
    normalize: bool
    truncation: Truncation
    output_dtype: OutputDtype
    request_id: int
    latency_class: LatencyClass
    caller: str
    prompt_name: str
    prompt: str
    def __init__(self, model: _Optional[str] = ..., packed_texts: _Optional[_Union[PackedTexts, _Mapping]] = ..., texts: _Optional[_Union[TextList, _Mapping]] = ..., token_ids: _Optional[_Union[PackedTokenIds, _Mapping]] = ..., dimensions: _Optional[int] = ..., normalize: _Optional[bool] = ..., truncation: _Optional[_Union[Truncation, str]] = ..., output_dtype: _Optional[_Union[OutputDtype, str]] = ..., request_id: _Optional[int] = ..., latency_class: _Optional[_Union[LatencyClass, str]] = ..., caller: _Optional[str] = ..., prompt_name: _Optional[str] = ..., prompt: _Optional[str] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("request_id", "model", "count", "dim", "dtype", "embeddings_f32le", "embeddings_f16le", "token_counts_i32le", "queue_time_ns", "inference_time_ns", "embeddings_f32", "tokenize_time_ns", "server_time_ns", "handler_start_unix_ns")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_F32LE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_F16LE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_I32LE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_F32_FIELD_NUMBER: _ClassVar[int]
    TOKENIZE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_START_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    model: str
    count: int
    dim: int
    dtype: OutputDtype
    embeddings_f32le: bytes
    embeddings_f16le: bytes
    token_counts_i32le: bytes
    queue_time_ns: int
    inference_time_ns: int
    embeddings_f32: _containers.RepeatedScalarFieldContainer[float]
    tokenize_time_ns: int
    server_time_ns: int
    handler_start_unix_ns: int
    def __init__(self, request_id: _Optional[int] = ..., model: _Optional[str] = ..., count: _Optional[int] = ..., dim: _Optional[int] = ..., dtype: _Optional[_Union[OutputDtype, str]] = ..., embeddings_f32le: _Optional[bytes] = ..., embeddings_f16le: _Optional[bytes] = ..., token_counts_i32le: _Optional[bytes] = ..., queue_time_ns: _Optional[int] = ..., inference_time_ns: _Optional[int] = ..., embeddings_f32: _Optional[_Iterable[float]] = ..., tokenize_time_ns: _Optional[int] = ..., server_time_ns: _Optional[int] = ..., handler_start_unix_ns: _Optional[int] = ...) -> None: ...

class SplitRequest(_message.Message):
    __slots__ = ("model", "packed_texts", "texts", "max_tokens", "overlap_tokens", "prompt_name", "prompt", "request_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PACKED_TEXTS_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    packed_texts: PackedTexts
    texts: TextList
    max_tokens: int
    overlap_tokens: int
    prompt_name: str
    prompt: str
    request_id: int
    def __init__(self, model: _Optional[str] = ..., packed_texts: _Optional[_Union[PackedTexts, _Mapping]] = ..., texts: _Optional[_Union[TextList, _Mapping]] = ..., max_tokens: _Optional[int] = ..., overlap_tokens: _Optional[int] = ..., prompt_name: _Optional[str] = ..., prompt: _Optional[str] = ..., request_id: _Optional[int] = ...) -> None: ...

class SplitResponse(_message.Message):
    __slots__ = ("request_id", "model", "count", "chunk_counts_i32le", "spans_i32le", "token_counts_i32le", "max_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNTS_I32LE_FIELD_NUMBER: _ClassVar[int]
    SPANS_I32LE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_I32LE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    model: str
    count: int
    chunk_counts_i32le: bytes
    spans_i32le: bytes
    token_counts_i32le: bytes
    max_tokens: int
    def __init__(self, request_id: _Optional[int] = ..., model: _Optional[str] = ..., count: _Optional[int] = ..., chunk_counts_i32le: _Optional[bytes] = ..., spans_i32le: _Optional[bytes] = ..., token_counts_i32le: _Optional[bytes] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "aliases", "dim", "max_tokens", "matryoshka_dimensions", "normalize_default", "pooling", "replicas", "queued_interactive_rows", "queued_bulk_rows", "waiting_bulk_callers", "interactive_slo_ms", "bulk_batch_tokens", "engine_tokens_per_second", "dtype", "engine_loop", "engine_step_tokens", "interactive_slo_missed", "enforce_eager", "held_bulk_rows", "held_bulk_requests", "interactive_p50_ms", "interactive_p99_ms", "interactive_requests", "interactive_replicas", "bulk_turn_ms", "interactive_gather_ms", "interactive_threads", "starting_replicas", "engine_model_cpu_seconds", "prompts", "default_prompt_name")
    class PromptsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MATRYOSHKA_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    POOLING_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_INTERACTIVE_ROWS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BULK_ROWS_FIELD_NUMBER: _ClassVar[int]
    WAITING_BULK_CALLERS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_SLO_MS_FIELD_NUMBER: _ClassVar[int]
    BULK_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_LOOP_FIELD_NUMBER: _ClassVar[int]
    ENGINE_STEP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_SLO_MISSED_FIELD_NUMBER: _ClassVar[int]
    ENFORCE_EAGER_FIELD_NUMBER: _ClassVar[int]
    HELD_BULK_ROWS_FIELD_NUMBER: _ClassVar[int]
    HELD_BULK_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_P50_MS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_P99_MS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    BULK_TURN_MS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_GATHER_MS_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_THREADS_FIELD_NUMBER: _ClassVar[int]
    STARTING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_MODEL_CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    dim: int
    max_tokens: int
    matryoshka_dimensions: _containers.RepeatedScalarFieldContainer[int]
    normalize_default: bool
    pooling: str
    replicas: int
    queued_interactive_rows: int
    queued_bulk_rows: int
    waiting_bulk_callers: int
    interactive_slo_ms: float
    bulk_batch_tokens: int
    engine_tokens_per_second: float
    dtype: str
    engine_loop: str
    engine_step_tokens: _containers.RepeatedScalarFieldContainer[int]
    interactive_slo_missed: bool
    enforce_eager: bool
    held_bulk_rows: int
    held_bulk_requests: int
    interactive_p50_ms: float
    interactive_p99_ms: float
    interactive_requests: int
    interactive_replicas: int
    bulk_turn_ms: float
    interactive_gather_ms: float
    interactive_threads: int
    starting_replicas: int
    engine_model_cpu_seconds: float
    prompts: _containers.ScalarMap[str, str]
    default_prompt_name: str
    def __init__(self, name: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., dim: _Optional[int] = ..., max_tokens: _Optional[int] = ..., matryoshka_dimensions: _Optional[_Iterable[int]] = ..., normalize_default: _Optional[bool] = ..., pooling: _Optional[str] = ..., replicas: _Optional[int] = ..., queued_interactive_rows: _Optional[int] = ..., queued_bulk_rows: _Optional[int] = ..., waiting_bulk_callers: _Optional[int] = ..., interactive_slo_ms: _Optional[float] = ..., bulk_batch_tokens: _Optional[int] = ..., engine_tokens_per_second: _Optional[float] = ..., dtype: _Optional[str] = ..., engine_loop: _Optional[str] = ..., engine_step_tokens: _Optional[_Iterable[int]] = ..., interactive_slo_missed: _Optional[bool] = ..., enforce_eager: _Optional[bool] = ..., held_bulk_rows: _Optional[int] = ..., held_bulk_requests: _Optional[int] = ..., interactive_p50_ms: _Optional[float] = ..., interactive_p99_ms: _Optional[float] = ..., interactive_requests: _Optional[int] = ..., interactive_replicas: _Optional[int] = ..., bulk_turn_ms: _Optional[float] = ..., interactive_gather_ms: _Optional[float] = ..., interactive_threads: _Optional[int] = ..., starting_replicas: _Optional[int] = ..., engine_model_cpu_seconds: _Optional[float] = ..., prompts: _Optional[_Mapping[str, str]] = ..., default_prompt_name: _Optional[str] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("protocol_version", "server_version", "default_model", "models", "max_batch_rows", "max_message_bytes", "event_loop_lag_p99_ms", "event_loop_lag_max_ms", "event_loop_ticks")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    EVENT_LOOP_LAG_P99_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_LOOP_LAG_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_LOOP_TICKS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    server_version: str
    default_model: str
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    max_batch_rows: int
    max_message_bytes: int
    event_loop_lag_p99_ms: float
    event_loop_lag_max_ms: float
    event_loop_ticks: int
    def __init__(self, protocol_version: _Optional[str] = ..., server_version: _Optional[str] = ..., default_model: _Optional[str] = ..., models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., max_batch_rows: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., event_loop_lag_p99_ms: _Optional[float] = ..., event_loop_lag_max_ms: _Optional[float] = ..., event_loop_ticks: _Optional[int] = ...) -> None: ...
