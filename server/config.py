"""Server settings: one frozen dataclass; every field is a CLI flag and an EMBEDTEXT_* variable."""

from __future__ import annotations

from dataclasses import dataclass, field

from embedtext.protocol import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_PORT
from embedtext.protocol.addresses import is_loopback_host



@dataclass(frozen=True)
class ServerConfig:
    # What to serve: sources as "default", a directory, or a hub name, optionally "NAME=SOURCE".
    models: tuple[str, ...] = ("default",)
    replicas: int = 1
    # Where to listen. Loopback by default; a Unix socket with uds.
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    uds: str | None = None
    # TLS: certificate chain and key (PEM files); with tls_client_ca, clients must present a
    # certificate signed by it (mutual TLS).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # Every call but health checks must carry "authorization: Bearer <token>".
    token: str | None = field(default=None, repr=False)
    # Batching: a batch closes at max_batch_tokens / max_batch_rows or after max_batch_delay_ms;
    # with idle_dispatch, at once while some replica has nothing in flight and no request is being
    # tokenized (no delay at low load).
    max_batch_tokens: int = 16384
    max_batch_rows: int = 1024
    max_batch_delay_ms: float = 2.0
    idle_dispatch: bool = True
    max_batches_per_replica: int = 2
    # "classes": interactive rows first (queue, a spare engine slot, the engine's own scheduler),
    # bulk rows shared fairly among callers; "fifo": one queue in arrival order.
    scheduling: str = "classes"
    # With classes: bulk batches sized from the engines' measured speed so an interactive request
    # waits about this long at most (server/pacing.py). None: auto (250 on a CPU; off on a GPU,
    # whose full batches take milliseconds); 0: off (batches at max_batch_tokens).
    interactive_slo_ms: float | None = None
    # Bounds: rows waiting per model, rows per request, bytes per message (both ways).
    max_queued_rows: int = 65536
    max_request_rows: int = 16384
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_stream_inflight: int = 64
    max_concurrent_rpcs: int = 4096
    # Engine: share of device memory for all replicas together ("auto": 0.9 on a GPU, 0.2 on a CPU).
    memory_fraction: float | None = None
    device: str = "auto"
    # "vllm", or "null": vectors without a model, to measure overhead (benchmarks only).
    engine: str = "vllm"
    dtype: str = "auto"
    max_num_seqs: int = 1024
    enforce_eager: bool = False
    tokenizer_threads: int = 2
    # Pure-ASCII texts for BERT-family tokenizers normalized ahead of the tokenizer (same ids, less
    # CPU; server/tokenization/ascii_normalizer.py). Off: the tokenizer normalizes every text itself.
    ascii_normalizer: bool = True
    # Those texts split into words in Python, each word's ids from a cache (server/tokenization/word_cache.py):
    # "on", "off", or "auto" (on unless the engines run on a GPU: it holds the GIL).
    word_cache: str = "auto"
    # Each replica's engine client in a worker process of its own (server/engine/process_backend.py):
    # "on", "off", or "auto" (on for several replicas on a GPU).
    replica_processes: str = "auto"
    # Who steps the vLLM engine: "async" (vLLM's AsyncLLM, its engine core in a process of its own),
    # "stepped" (a replica's worker process holds the whole engine and a thread of ours steps it,
    # each step sized to interactive_slo_ms; server/engine/vllm_stepped.py), or "auto" (stepped on a CPU).
    engine_loop: str = "auto"
    metrics_port: int | None = None
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.engine not in ("vllm", "null"):
            raise ValueError(f"--engine must be vllm or null, not {self.engine!r}")
        if self.replica_processes not in ("auto", "on", "off"):
            raise ValueError(f"--replica-processes must be auto, on or off, not {self.replica_processes!r}")
        if self.engine_loop not in ("auto", "async", "stepped"):
            raise ValueError(f"--engine-loop must be auto, async or stepped, not {self.engine_loop!r}")
        if self.scheduling not in ("classes", "fifo"):
            raise ValueError(f"--scheduling must be classes or fifo, not {self.scheduling!r}")
        if self.word_cache not in ("auto", "on", "off"):
            raise ValueError(f"--word-cache must be auto, on or off, not {self.word_cache!r}")
        if self.interactive_slo_ms is not None and self.interactive_slo_ms < 0:
            raise ValueError("--interactive-slo-ms must be positive (or 0: off)")
        if self.replicas < 1:
            raise ValueError("--replicas must be at least 1")
        if not self.models:
            raise ValueError("serve at least one --model")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
        if self.token is not None and (not self.token.strip() or any(c in self.token for c in "\r\n")):
            raise ValueError("the token is empty or holds a line break")
        if self.uds is None and not is_loopback_host(self.host) and not (self.tls_cert and self.token):
            raise ValueError(
                f"refusing to listen on {self.host}: beyond loopback (127.0.0.1, ::1) or a Unix socket (--uds) "
                "the server needs TLS (--tls-cert, --tls-key) and a token (--token or --token-file)"
            )
        for name in ("max_batch_tokens", "max_batch_rows", "max_queued_rows", "max_request_rows", "max_message_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive")

    @property
    def address(self) -> str:
        if self.uds:
            return f"unix:{self.uds}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

