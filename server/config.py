"""Server settings: one frozen dataclass. Each field is declared once, with its default, its
bounds and its help; ``embedtext serve`` builds its options from them (server/cli.py), and every
option can also come from an ``EMBEDTEXT_*`` variable. What ``auto`` means is decided in one place,
server/resolved.py."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from embedtext.protocol import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_PORT
from embedtext.protocol.addresses import is_loopback_host

# The engine loops whose engines a thread of the server's steps (each step's rows chosen and paced by it).
STEPPED_LOOPS = ("stepped", "packed")


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line, and what values it takes."""

    help: str = ""
    choices: tuple[str, ...] = ()
    case_sensitive: bool = True
    min: float | None = None  # inclusive bounds
    max: float | None = None
    existing_file: bool = False
    name: str | None = None  # the option, when not the field's name with dashes
    flag_value: str | None = None  # the value of the option given alone (``--enforce-eager``: on)
    show_default: bool | str = True  # a string: what an "auto" (None) default means

    def option(self, field_name: str) -> str:
        """The option's name without its dashes: ``max_batch_tokens`` -> ``max-batch-tokens``."""
        return self.name or field_name.replace("_", "-")


def setting(default: Any, help: str = "", *, repr: bool = True, **flag: Any) -> Any:
    return field(default=default, repr=repr, metadata={"flag": Flag(help, **flag)})


def _either(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1]


AUTO_ON_OFF = ("auto", "on", "off")


@dataclass(frozen=True)
class ServerConfig:
    models: tuple[str, ...] = setting(
        ("default",),
        name="model",
        help="[NAME=]SOURCE: 'default' (all-MiniLM-L6-v2 from PyPI), a model directory, or a hub name such as "
        "Snowflake/snowflake-arctic-embed-m-v1.5 (the production choice). Repeat to serve several; the first is "
        "the default model.",
    )
    replicas: int | None = setting(
        None,
        min=1,
        show_default="1; on a CPU of at most 2 cores beside an interactive replica, one per core",
        help="Engines per model on the one device that run bulk work (an interactive replica is one more). "
        "Unset on a CPU of at most 2 cores beside an interactive replica: one engine per core, each on one "
        "thread (--bulk-threads) at nice 10 (--bulk-nice), where one engine's threads waited for each other at "
        "every operation while a query's step held one of the cores (bench/RESULTS.md, mixed, stop 51).",
    )
    # Where to listen: loopback by default, or a Unix socket.
    host: str = setting("127.0.0.1", "Interface to listen on (loopback only without TLS).")
    port: int = setting(DEFAULT_PORT, "TCP port (0 = any free port).", min=0, max=65535)
    uds: str | None = setting(None, "Listen on this Unix socket instead.")
    tls_cert: str | None = setting(None, "TLS certificate chain (PEM); needs --tls-key.", existing_file=True)
    tls_key: str | None = setting(None, "TLS private key (PEM).", existing_file=True)
    tls_client_ca: str | None = setting(
        None, "Require client certificates signed by this CA (mutual TLS).", existing_file=True
    )
    token: str | None = setting(
        None,
        "Require 'authorization: Bearer TOKEN' on every call but health checks (prefer EMBEDTEXT_TOKEN or "
        "--token-file: arguments are visible to other users).",
        repr=False,
        show_default=False,
    )
    max_batch_tokens: int = setting(16384, "A batch closes at this many tokens.", min=1)
    max_batch_rows: int = setting(1024, "... or at this many rows.", min=1)
    max_batch_delay_ms: float = setting(2.0, "... or when its oldest row waited this long.", min=0)
    idle_dispatch: bool = setting(
        True,
        "Close a batch at once while a replica has nothing to do and no other request is being tokenized, "
        "instead of waiting up to --max-batch-delay-ms for more rows (lower latency at light load; busy replicas "
        "still get full batches).",
    )
    max_batches_per_replica: int = setting(2, "Batches in flight per engine.", min=1)
    bulk_batch_ms: float = setting(
        250.0,
        "With classes: a bulk batch holds about this much of an engine's measured time (at most "
        "--max-batch-tokens), so that bulk callers take turns of that size: an engine runs the batches it "
        "holds in the order given. 0: bulk batches at --max-batch-tokens.",
        min=0,
    )
    scheduling: str = setting(
        "classes",
        choices=("classes", "fifo"),
        help="classes: interactive requests (small ones, or marked) go first in the queue, in a spare engine slot "
        "and in vLLM's scheduler, and bulk callers share the rest fairly; fifo: one queue in arrival order.",
    )
    interactive_slo_ms: float | None = setting(
        None,
        min=0,
        show_default="250 on a CPU, 20 on a GPU",
        help="With classes: size engine steps (stepped) or bulk batches (async) from the engines' measured speed "
        "so an interactive request waits about this long at most; bulk work gives up the throughput of smaller "
        "engine steps. 0: off.",
    )
    interactive_gather_ms: float | None = setting(
        None,
        min=0,
        show_default="on a CPU with an interactive replica 30% of --interactive-slo-ms, else 0",
        help="While bulk work runs, an interactive request waits up to this long for others to share its engine "
        "step: every step carries the model's fixed work, which a CPU otherwise pays once per query, taking it "
        "from the bulk engines beside. Never on an idle server. 0: each query goes at once.",
    )
    hold_bulk_tokenizing: bool = setting(
        True,
        "With an interactive target: tokenize bulk requests as the engines drain the queue, not all at once on "
        "arrival, so a burst of bulk calls does not stall the queries that come meanwhile (server/tokenizing_gate.py).",
    )
    interactive_replica: str = setting(
        "auto",
        choices=AUTO_ON_OFF,
        flag_value="on",
        help="Start one more engine per model that runs interactive requests only, beside the --replicas that run "
        "bulk work: a query then never waits behind a bulk engine step, and the bulk engines' steps need no "
        "pacing. Costs one more engine's memory and start-up, and on a CPU the cores the engines share; while it "
        "restarts, queries run on the bulk engines (and bulk work on it while every bulk engine does). auto: on "
        "with --scheduling classes for models whose weights take at most 2 GiB, on a GPU or a CPU. Alone: on. "
        "on needs --scheduling classes.",
    )
    interactive_threads: int | None = setting(
        None,
        min=1,
        show_default="every core (torch's own count)",
        help="On a CPU, the threads the interactive replica's engine computes on (its worker's OMP_NUM_THREADS). "
        "Fewer leave cores to the bulk engine, but its threads wait at each step for any core the queries' "
        "engine holds, and fewer threads hold it longer: on 2 cores one thread did not help (bench/RESULTS.md). "
        "A GPU ignores it.",
    )
    bulk_threads: int | None = setting(
        None,
        min=1,
        show_default="1 where --replicas is unset and gives one engine per core, else every core (torch's own count)",
        help="On a CPU, the threads each bulk replica's stepped engine computes on (its worker's OMP_NUM_THREADS). "
        "With --replicas N and N x threads at most the cores, the bulk engines compute side by side instead of "
        "one engine's threads meeting at each of the model's operations. A GPU ignores it.",
    )
    bulk_nice: int | None = setting(
        None,
        min=0,
        max=19,
        help="Beside an interactive replica, the bulk engines' worker processes run at this nice value (the "
        "host's scheduling priority: higher yields the cores sooner), so a query's engine step, the server and "
        "the host's other processes take the cores first. Unset: 10 for bulk engines of one thread each "
        "(--replicas unset on a small CPU), else 0: one engine's threads wait for each other when one is held "
        "back, and on 2 cores 10 took 5-9% of its rows/s (bench/RESULTS.md). A worker at a lower priority leads "
        "a session of its own, lowered too: with the kernel's autogroups a nice value weighs only within its "
        "session. Needs an interactive replica (on shared engines queries and bulk work run in the same steps).",
    )
    max_queued_rows: int = setting(65536, "Queue bound per model; beyond it RESOURCE_EXHAUSTED.", min=1)
    max_request_rows: int = setting(16384, "Rows per request at most.", min=1)
    max_concurrent_rpcs: int = setting(4096, "Calls handled at once; beyond it RESOURCE_EXHAUSTED.", min=1)
    max_stream_inflight: int = setting(64, "Requests of one EmbedStream handled at once.", min=1)
    max_message_bytes: int = setting(DEFAULT_MAX_MESSAGE_BYTES, "gRPC message size limit, both ways.", min=1024)
    memory_fraction: float | None = setting(
        None,
        "Device memory share of all engines together.",
        min=0.01,
        max=1.0,
        show_default="0.9 on a GPU, 0.2 on a CPU",
    )
    device: str = setting(
        "auto", "Where the engines run; auto: a GPU if torch sees one.", choices=("auto", "cuda", "cpu")
    )
    engine: str = setting(
        "vllm",
        choices=("vllm", "null"),
        help="vllm, or null: fixed vectors without a model, to measure the server's own overhead (benchmarks only).",
    )
    dtype: str = setting(
        "auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="Engine dtype; auto: bfloat16 on a CPU with bfloat16 instructions (avx512_bf16 or AMX), float32 on "
        "other CPUs, vLLM's choice on a GPU.",
    )
    max_num_seqs: int = setting(1024, "vLLM max_num_seqs per engine.", min=1)
    enforce_eager: str = setting(
        "auto",
        choices=AUTO_ON_OFF,
        flag_value="on",
        help="Run the model eagerly: no torch.compile and no CUDA graphs; starts seconds sooner (bench: --only "
        "startup). Alone: on. auto: on for a CPU with AMX, where the compiled model ran slower, and for one with "
        "AVX2 and no AVX-512, where it ran no faster (bench: --only compile); compiled elsewhere.",
    )
    tokenizer_threads: int = setting(2, "Threads that tokenize requests ahead of the engines.", min=1)
    ascii_normalizer: bool = setting(
        True,
        "Normalize pure-ASCII texts for BERT-family tokenizers ahead of the tokenizer: the same ids for less "
        "tokenizer CPU (bench: --only ascii-normalizer). Off: the tokenizer normalizes every text itself.",
    )
    word_cache: str = setting(
        "auto",
        choices=AUTO_ON_OFF,
        help="Split those ASCII texts into words in Python and take each word's ids from a cache filled by the "
        "tokenizer: the same ids for less tokenizer CPU (bench: --only word-cache), but under the GIL. auto: on "
        "unless the engines run on a GPU, whose spare cores tokenize in parallel anyway. Needs --ascii-normalizer.",
    )
    replica_processes: str = setting(
        "auto",
        choices=AUTO_ON_OFF,
        help="Run each replica's engine client in a process of its own: vLLM's per-row request work then spreads "
        "over cores instead of the server's one event loop. auto: on for several replicas on a GPU. A stepped engine "
        "always runs in a worker process of its own.",
    )
    engine_loop: str = setting(
        "auto",
        choices=("auto", "async", "stepped", "packed"),
        help="async: vLLM's AsyncLLM, its engine core in processes of its own; stepped: each replica's worker "
        "process holds its whole engine and steps it itself, each step's rows chosen by latency class and sized to "
        "--interactive-slo-ms; packed: stepped so, each step one call of vLLM's model on the step's rows packed "
        "end to end, below vLLM's per-row requests. auto: packed on a CPU, stepped on a GPU.",
    )
    switch_interval_ms: float | None = setting(
        None,
        min=0.05,
        max=100,
        show_default="Python's, 5",
        help="How long a thread that wants the GIL waits while another runs Python, in the server and in each "
        "replica's worker (Python's sys.setswitchinterval). A query crosses threads several times (the event loop, "
        "the engine thread, the tokenizers); while bulk work keeps another thread busy in Python, each crossing "
        "waits up to this long. Shorter cost bulk work on a 2-core CPU (bench/RESULTS.md, mixed, stop 37).",
    )
    metrics_port: int | None = setting(None, "Serve Prometheus metrics on 127.0.0.1:PORT.", min=1, max=65535)
    step_timeline: str | None = setting(
        None,
        "Append one JSON line per batch with interactive rows to this file: where its time in a stepped engine "
        "went (the step it waited for, its own step, the hand-back). Diagnostics for benchmarks; the file grows "
        "with the queries.",
    )
    log_level: str = setting("INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"), case_sensitive=False)

    def __post_init__(self) -> None:
        for name, flag in config_flags().items():
            _check(flag, getattr(self, name), f"--{flag.option(name)}")
        if not self.models:
            raise ValueError("serve at least one --model")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
        if self.token is not None and (not self.token.strip() or any(c in self.token for c in "\r\n")):
            raise ValueError("the token is empty or holds a line break")
        if self.interactive_replica == "on" and self.scheduling != "classes":
            raise ValueError("--interactive-replica serves the interactive class: it needs --scheduling classes")
        if self.step_timeline and (self.engine_loop == "async" or self.engine != "vllm"):
            raise ValueError("--step-timeline records a stepped engine's steps: it needs --engine-loop stepped or auto")
        if self.interactive_threads and (self.interactive_replica == "off" or self.engine_loop == "async"):
            raise ValueError(
                "--interactive-threads sets the threads of the interactive replica's stepped engine: it needs "
                "--interactive-replica auto or on, and --engine-loop stepped or auto (async: vLLM binds its threads)"
            )
        if self.bulk_threads and self.engine_loop == "async":
            raise ValueError(
                "--bulk-threads sets the threads of the bulk replicas' stepped engines: it needs --engine-loop "
                "stepped or auto (async: vLLM binds its threads)"
            )
        if self.bulk_nice and self.interactive_replica == "off":
            raise ValueError(
                "--bulk-nice lowers the bulk engines' priority beside an interactive replica: it needs "
                "--interactive-replica auto or on (on shared engines the queries run in the same steps)"
            )
        if self.step_timeline and not Path(self.step_timeline).absolute().parent.is_dir():
            raise ValueError(f"--step-timeline {self.step_timeline}: its folder does not exist")
        if self.uds is None and not is_loopback_host(self.host) and not (self.tls_cert and self.token):
            raise ValueError(
                f"refusing to listen on {self.host}: beyond loopback (127.0.0.1, ::1) or a Unix socket (--uds) "
                "the server needs TLS (--tls-cert, --tls-key) and a token (--token or --token-file)"
            )

    @property
    def address(self) -> str:
        if self.uds:
            return f"unix:{self.uds}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def config_flags() -> dict[str, Flag]:
    """Each ServerConfig field's Flag, in declaration order."""
    return {f.name: f.metadata["flag"] for f in fields(ServerConfig)}


def _check(flag: Flag, value: Any, option: str) -> None:
    """The bounds a flag declares, for configs built in code as well as from the command line.

    >>> _check(Flag(choices=("auto", "on", "off")), "yes", "--word-cache")
    Traceback (most recent call last):
    ...
    ValueError: --word-cache must be auto, on or off, not 'yes'
    >>> _check(Flag(min=1), 0, "--replicas")
    Traceback (most recent call last):
    ...
    ValueError: --replicas must be at least 1, not 0
    """
    if value is None:
        return
    if flag.choices:
        known = flag.choices if flag.case_sensitive else tuple(c.lower() for c in flag.choices)
        if (value if flag.case_sensitive else str(value).lower()) not in known:
            raise ValueError(f"{option} must be {_either(flag.choices)}, not {value!r}")
    if flag.min is not None and value < flag.min:
        raise ValueError(f"{option} must be at least {flag.min:g}, not {value!r}")
    if flag.max is not None and value > flag.max:
        raise ValueError(f"{option} must be at most {flag.max:g}, not {value!r}")
