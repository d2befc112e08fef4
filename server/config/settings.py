"""Server settings: one frozen dataclass. Each field is declared once, with its default, its
bounds and its help. ``embedtext serve`` makes an option of each setting a user sets and takes the
advanced ones as ``--set NAME=VALUE`` (server/cli.py); every setting can also come from an
``EMBEDTEXT_<NAME>`` variable. What ``auto`` means is decided in one place, server/config/resolve.py."""

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
    show_default: bool | str = True  # a string: what an "auto" (None) default means
    advanced: bool = False  # not an option of its own: ``--set NAME=VALUE`` or EMBEDTEXT_NAME

    def option(self, field_name: str) -> str:
        """The option's name without its dashes: ``max_batch_tokens`` -> ``max-batch-tokens``."""
        return self.name or field_name.replace("_", "-")

    def label(self, field_name: str) -> str:
        """How a message names the setting: ``--port``, or ``max_batch_tokens`` for an advanced one."""
        return field_name if self.advanced else f"--{self.option(field_name)}"


def setting(default: Any, help: str = "", *, repr: bool = True, **flag: Any) -> Any:
    return field(default=default, repr=repr, metadata={"flag": Flag(help, **flag)})


def advanced(default: Any, help: str = "", **flag: Any) -> Any:
    return setting(default, help, advanced=True, **flag)


def _either(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1]


AUTO_ON_OFF = ("auto", "on", "off")


@dataclass(frozen=True)
class ServerConfig:
    # The settings `embedtext serve --help` lists: what a user sets.
    models: tuple[str, ...] = setting(
        ("default",),
        name="model",
        help="[NAME=]SOURCE: 'default' (all-MiniLM-L6-v2), a model folder or a hub name; repeat to serve several.",
    )
    replicas: int | None = setting(
        None,
        min=1,
        show_default="1; on a CPU of at most 2 cores, one per core",
        help="Engines per model that run bulk work (an interactive replica is one more).",
    )
    device: str = setting(
        "auto", "Where the engines run; auto: a GPU if there is one.", choices=("auto", "cuda", "cpu")
    )
    dtype: str = setting(
        "auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="Engine dtype; auto: bfloat16 on CPUs with bfloat16 instructions, float32 on other CPUs, vLLM's on a GPU.",
    )
    # Where to listen: loopback by default, or a Unix socket.
    host: str = setting("127.0.0.1", "Interface to listen on (beyond loopback: needs TLS and a token).")
    port: int = setting(DEFAULT_PORT, "TCP port (0: any free port).", min=0, max=65535)
    uds: str | None = setting(None, "Listen on this Unix socket instead.")
    tls_cert: str | None = setting(None, "TLS certificate chain (PEM); needs --tls-key.", existing_file=True)
    tls_key: str | None = setting(None, "TLS private key (PEM).", existing_file=True)
    token: str | None = setting(
        None,
        "Require 'authorization: Bearer TOKEN' (prefer EMBEDTEXT_TOKEN or --token-file: arguments are visible).",
        repr=False,
        show_default=False,
    )
    interactive_slo_ms: float | None = setting(
        None,
        min=0,
        show_default="250 on a CPU, 20 on a GPU",
        help="Latency target of interactive requests; engine steps are sized to it (0: off).",
    )
    metrics_port: int | None = setting(None, "Serve Prometheus metrics on 127.0.0.1:PORT.", min=1, max=65535)
    log_level: str = setting(
        "INFO",
        "Log level; DEBUG adds vLLM's own log.",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        case_sensitive=False,
    )

    # Advanced settings (docs/tuning.md): `--set NAME=VALUE` or EMBEDTEXT_NAME; `--set help` lists them.
    tls_client_ca: str | None = advanced(
        None, "Require client certificates signed by this CA (mutual TLS).", existing_file=True
    )
    max_batch_tokens: int = advanced(16384, "An engine step (and a query batch) holds this many tokens at most.", min=1)
    max_batch_rows: int = advanced(1024, "A batch holds this many rows at most.", min=1)
    max_batch_delay_ms: float = advanced(2.0, "A batch closes when its oldest row waited this long.", min=0)
    max_batches_per_replica: int = advanced(2, "Batches in flight per engine.", min=1)
    bulk_batch_ms: float = advanced(
        250.0, "A bulk caller's turn: about this much engine time a batch (0: max_batch_tokens a batch).", min=0
    )
    interactive_gather_ms: float | None = advanced(
        None,
        min=0,
        show_default="30% of the target on a CPU beside an interactive replica, else 0",
        help="While bulk work runs, how long a query waits for others to share its engine step.",
    )
    interactive_replica: str = advanced(
        "auto",
        choices=AUTO_ON_OFF,
        help="One more engine per model for interactive requests; auto: on for models up to 2 GiB that fit.",
    )
    interactive_threads: int | None = advanced(
        None, "Threads of the interactive replica's CPU engine.", min=1, show_default="every core"
    )
    bulk_threads: int | None = advanced(
        None,
        "Threads of each bulk replica's CPU engine.",
        min=1,
        show_default="1 with one engine per core, else every core",
    )
    bulk_nice: int | None = advanced(
        None,
        "Nice value of the bulk engines' processes beside an interactive replica.",
        min=0,
        max=19,
        show_default="10 with one engine per core, else 0",
    )
    max_queued_rows: int = advanced(65536, "Queue bound per model; beyond it RESOURCE_EXHAUSTED.", min=1)
    max_request_rows: int = advanced(16384, "Rows per request at most.", min=1)
    max_concurrent_rpcs: int = advanced(4096, "Calls handled at once; beyond it RESOURCE_EXHAUSTED.", min=1)
    max_message_bytes: int = advanced(DEFAULT_MAX_MESSAGE_BYTES, "gRPC message size limit, both ways.", min=1024)
    memory_fraction: float | None = advanced(
        None,
        "Device memory share of all engines together.",
        min=0.01,
        max=1.0,
        show_default="0.9 on a GPU, 0.2 on a CPU",
    )
    engine: str = advanced(
        "vllm",
        "vllm, or null: vectors from the token ids without a model (overhead benchmarks only).",
        choices=("vllm", "null"),
    )
    max_num_seqs: int = advanced(1024, "vLLM's max_num_seqs per engine.", min=1)
    enforce_eager: str = advanced(
        "auto", "Run the model eagerly (no torch.compile, no CUDA graphs); auto: by the CPU.", choices=AUTO_ON_OFF
    )
    tokenizer_threads: int = advanced(2, "Threads that tokenize requests ahead of the engines.", min=1)
    engine_loop: str = advanced(
        "packed",
        choices=("stepped", "packed"),
        help="packed: one call of vLLM's model a step; stepped: vLLM's request per row (bench: engine-overhead).",
    )

    def __post_init__(self) -> None:
        for name, flag in config_flags().items():
            _check(flag, getattr(self, name), flag.label(name))
        if not self.models:
            raise ValueError("serve at least one --model")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("tls_client_ca (mutual TLS) needs --tls-cert and --tls-key")
        if self.token is not None and (not self.token.strip() or any(c in self.token for c in "\r\n")):
            raise ValueError("the token is empty or holds a line break")
        if self.interactive_threads and self.interactive_replica == "off":
            raise ValueError(
                "interactive_threads sets the threads of the interactive replica's engine: it needs "
                "interactive_replica auto or on"
            )
        if self.bulk_nice and self.interactive_replica == "off":
            raise ValueError(
                "bulk_nice lowers the bulk engines' priority beside an interactive replica: it needs "
                "interactive_replica auto or on (on shared engines the queries run in the same steps)"
            )
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


def parse_setting(name: str, text: str) -> Any:
    """An advanced setting's value from its text (``--set NAME=VALUE`` or EMBEDTEXT_NAME), by its field's type;
    ``auto`` leaves one whose default is None to the server. Bounds are checked as the config is built.

    >>> parse_setting("max_batch_tokens", "8192"), parse_setting("engine_loop", "packed")
    (8192, 'packed')
    >>> parse_setting("bulk_threads", "auto") is None
    True
    >>> parse_setting("max_batch_rows", "many")
    Traceback (most recent call last):
    ...
    ValueError: max_batch_rows takes a whole number, not 'many'
    """
    kind = str(next(f.type for f in fields(ServerConfig) if f.name == name))
    if config_flags()[name].existing_file and not Path(text).is_file():
        raise ValueError(f"{name}: no file {text}")
    optional = kind.endswith("| None")
    if optional and text.strip().lower() in ("auto", "none", ""):
        return None
    for prefix, cast, what in (("int", int, "a whole number"), ("float", float, "a number")):
        if kind.startswith(prefix):
            try:
                return cast(text)
            except ValueError:
                raise ValueError(f"{name} takes {what}, not {text!r}") from None
    return text


def advanced_settings() -> dict[str, Flag]:
    """The settings given as ``--set NAME=VALUE`` (or EMBEDTEXT_NAME), in declaration order."""
    return {name: flag for name, flag in config_flags().items() if flag.advanced}


def config_flags() -> dict[str, Flag]:
    """Each ServerConfig field's Flag, in declaration order."""
    return {f.name: f.metadata["flag"] for f in fields(ServerConfig)}


def _check(flag: Flag, value: Any, option: str) -> None:
    """The bounds a flag declares, for configs built in code as well as from the command line.

    >>> _check(Flag(choices=("auto", "on", "off")), "yes", "enforce_eager")
    Traceback (most recent call last):
    ...
    ValueError: enforce_eager must be auto, on or off, not 'yes'
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
