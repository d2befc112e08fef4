"""Every ``auto`` (and None) of a ServerConfig decided in one place, for the device the engines run on.

The rest of the server reads ``ResolvedSettings``, never an ``auto``; ``embedtext info`` and the
start-up log report what was chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, partial

from embedtext.server.config.settings import STEPPED_LOOPS, ServerConfig
from embedtext.server.engine.base import EngineSettings, detect_device
from embedtext.server.engine.vllm_args import cpu_kv_cache_bytes
from embedtext.server.host.cpu_features import EngineDtype, eager_engine, engine_dtype
from embedtext.server.host.cpu_threads import SMALL_MACHINE_CORES, usable_cores
from embedtext.server.host.memory import CPU_ENGINE_BYTES, available_memory_bytes
from embedtext.server.models.source import ModelSpec, load_model_spec, parse_model_arg

CPU_INTERACTIVE_SLO_MS = 250.0
GPU_INTERACTIVE_SLO_MS = 20.0
CPU_MEMORY_FRACTION = 0.2
GPU_MEMORY_FRACTION = 0.9
# auto starts an interactive replica for models up to this size: a second copy of larger weights
# takes device memory the bulk engines' batches need.
INTERACTIVE_REPLICA_MAX_WEIGHT_BYTES = 2 * 1024**3
# Of the interactive target, what a query may wait for others to share its step, by default on a
# CPU beside an interactive replica: the rest is for that step and the way to and from it.
GATHER_SHARE_OF_SLO = 0.3
# Bulk engines of one thread each yield a core to a query's step without stalling each other: on a
# small CPU they run at this nice value by default.
SPLIT_BULK_NICE = 10
# What one CPU engine of a model holds, in bytes (``cpu_engine_bytes`` at the server's settings).
EngineBytes = Callable[[ModelSpec], int]
# How an auto setting's reason begins where the host's memory turned it off (the log warns of it).
DECLINED = "auto: off, "


def default_interactive_slo_ms(device: str) -> float:
    """The interactive target a vLLM server holds on ``device`` unless told otherwise."""
    return CPU_INTERACTIVE_SLO_MS if device == "cpu" else GPU_INTERACTIVE_SLO_MS


@dataclass(frozen=True)
class ResolvedSettings:
    """What the server runs with: the settings as given (``config``, its replicas as resolved) and
    every ``auto`` of them decided. The runtime reads this alone."""

    config: ServerConfig
    device: str  # "cuda" or "cpu" ("auto" for the null engine, which runs nowhere)
    engine_loop: str  # "stepped", "packed", or "" (the null engine)
    interactive_slo_s: float | None  # None: no latency target (0, or the null engine)
    memory_fraction: float  # of the device, for all engines together
    dtype: EngineDtype
    enforce_eager: bool = False  # no torch.compile, no CUDA graphs
    eager_reason: str = ""  # for the start-up log
    interactive_replica: bool = False  # one more engine per model that runs interactive requests only
    interactive_replica_reason: str = ""  # for the start-up log
    interactive_gather_s: float = 0.0  # while bulk work runs, how long a query waits for others
    interactive_threads: int = 0  # threads the interactive replica's engine computes on (0: torch's own)
    split_reason: str = ""  # for the start-up log: why the bulk work runs on one engine per core
    split_declined: str = ""  # for the start-up log: why a small CPU's bulk work stays on one engine
    memory_short: str = ""  # for the start-up log: a CPU's engines as chosen need more memory than there is
    bulk_threads: int = 0  # threads each bulk replica's stepped engine computes on (0: torch's own)
    bulk_nice: int = 0  # the bulk engines' worker processes' nice value beside an interactive replica

    @property
    def replicas(self) -> int:
        """Engines per model that run bulk work (the config's, as resolved)."""
        return self.config.replicas

    @property
    def stepped(self) -> bool:
        return self.engine_loop in STEPPED_LOOPS

    @property
    def rest_after_ready(self) -> bool:
        """On a CPU the server is ready once one bulk engine per model is up, and its other engines
        (the interactive replica, more bulk engines) start behind it: their vLLM imports beside the
        first's would slow its start on a few cores. On a GPU every engine starts before batches
        run: each checks the device's free memory as it starts."""
        return self.device == "cpu" and (self.interactive_replica or self.replicas > 1)

    @property
    def backend(self) -> str:
        """The engine the factory builds: ``vllm-stepped``, ``vllm-packed``, or ``null``."""
        return f"vllm-{self.engine_loop}" if self.stepped else "null"

    @property
    def engine_processes(self) -> bool:
        """Each vLLM engine runs in a worker process of its own; the null engine in the server's."""
        return self.stepped

    def engine_settings(
        self, config: ServerConfig, memory_fraction: float, interactive: bool = False
    ) -> EngineSettings:
        """What each engine starts with, holding ``memory_fraction`` of the device. Beside an
        interactive replica (``--interactive-replica``) the bulk engines run no queries and step
        unpaced; the interactive one (``interactive``) keeps the target for when it runs bulk work."""
        paced = self.stepped and (interactive or not self.interactive_replica)
        return EngineSettings(
            memory_fraction=memory_fraction,
            max_batch_tokens=config.max_batch_tokens,
            max_num_seqs=config.max_num_seqs,
            device=self.device,
            dtype=self.dtype.dtype,
            enforce_eager=self.enforce_eager,
            interactive_slo_s=self.interactive_slo_s if paced else None,
            compute_threads=(self.interactive_threads if interactive else self.bulk_threads) or None,
            nice=0 if interactive else self.bulk_nice,
        )


def resolve(
    config: ServerConfig,
    device: str | None = None,
    flags: frozenset[str] | None = None,
    cores: int | None = None,
    memory_bytes: int | None = None,
) -> ResolvedSettings:
    """``config``'s choices on ``device`` (by default: ``--device``, or for auto a GPU if torch sees one).

    - ``engine_loop``: packed on either device. Packed steps (vLLM's model on each step's rows at
      once) cut the engine's own work a row and give the same vectors (bench: --only
      engine-overhead); on an H200 they ran 1.28x the tokens/s of vLLM's request per row at 50
      tokens with 8 replicas, 4.4x with one (bench/results/gpu-headline-h200-packed/). Either way
      the server steps each engine in a worker process of its own.
    - ``--interactive-slo-ms`` unset: 250 ms on a CPU, whose engine steps at --max-batch-tokens take
      seconds; 20 ms on a GPU.
    - ``--memory-fraction`` unset: 0.9 of a GPU, 0.2 of a CPU's memory.
    - ``--interactive-replica auto``: on with latency classes, on either device. A query on an engine
      of its own waits for no bulk step, and the bulk engines step unpaced: both faster than the
      shared engine paced for queries, on a GPU and on a 2-core CPU, whose two engines share its
      cores (bench/results/gpu-mixed-quick-h200-replica.json, cpu-mixed-quick-target-size.json).
      Off for models over 2 GiB of weights, whose second copy takes the memory bulk batches need;
      on a CPU, also where the host's available memory would not hold both engines (below).
    - ``--interactive-gather-ms`` unset: on a CPU beside an interactive replica, 30% of the target
      (75 ms of 250): each query's own step there carries the model's fixed work, which takes cores
      from the bulk engine; queries that come close together then share one step. 0 elsewhere: a
      GPU's fixed work per step is small beside its 20 ms target, and a shared engine's queries
      join its bulk steps anyway.
    - ``--interactive-threads``: on a CPU, the interactive replica's stepped engine computes on that
      many threads; unset (0), on torch's own count, every core. Fewer did not help on 2 cores: the
      bulk engine's threads wait at each step for a core the queries' engine holds, and one
      thread's steps hold it longer (bench/results/cpu-mixed-quick-interactive-threads.json).
    - ``--replicas`` unset: on a CPU of at most ``SMALL_MACHINE_CORES`` cores beside a stepped
      interactive replica (and ``--bulk-threads`` unset), one bulk engine per core, each on one
      thread and at nice ``SPLIT_BULK_NICE``; elsewhere one engine. One engine's threads meet at
      each of the model's operations, so while a query's step held one core the other waited; and
      without the lower priority engines that never idle starved the host's other processes (a
      query's own client among them). On 2 cores the split ran more bulk rows/s beside queries,
      and answered them sooner (bench/results/cpu-mixed-quick-split-bulk.json). Larger CPUs keep one engine:
      not measured. So does a host whose available memory (``memory_bytes``, by default the
      kernel's MemAvailable within the cgroup's limit) is less than the split's engines take, at
      ``cpu_engine_bytes`` each (the engine, the model's weights, its KV cache).
    - ``--bulk-nice`` unset: ``SPLIT_BULK_NICE`` for the split engines above, else 0: one engine of
      several threads lost bulk rows/s at nice 10 on 2 cores (cpu-mixed-quick-bulk-nice.json). It applies beside
      an interactive replica with engines in worker processes (elsewhere an engine runs queries too).
    - ``--dtype auto`` and ``--enforce-eager auto``: server/host/cpu_features.py, from the CPU's
      ``flags`` (by default /proc/cpuinfo's).

    >>> r = resolve(ServerConfig(engine="null"), "cpu")
    >>> (r.engine_loop, r.backend, r.engine_processes, r.interactive_slo_s)
    ('', 'null', False, None)
    >>> r = resolve(ServerConfig(), "cuda")
    >>> (r.engine_loop, r.backend, r.interactive_slo_s, r.memory_fraction, r.interactive_replica)
    ('packed', 'vllm-packed', 0.02, 0.9, True)
    >>> cpu = resolve(ServerConfig(), "cpu")
    >>> (cpu.interactive_replica, cpu.interactive_gather_s, r.interactive_gather_s)
    (True, 0.075, 0.0)
    >>> cpu.interactive_threads, resolve(ServerConfig(interactive_threads=1), "cpu").interactive_threads
    (0, 1)
    >>> small = resolve(ServerConfig(), "cpu", cores=2, memory_bytes=16 * 1024**3)
    >>> large = resolve(ServerConfig(), "cpu", cores=8)
    >>> [(r.replicas, r.bulk_threads, r.bulk_nice) for r in (small, large)]
    [(2, 1, 10), (1, 0, 0)]
    >>> resolve(ServerConfig(), "cpu", cores=2, memory_bytes=4 * 1024**3).replicas  # three engines would not fit
    1
    >>> resolve(ServerConfig(), "cpu", cores=2, memory_bytes=3 * 1024**3).interactive_replica  # nor would two
    False
    >>> told = resolve(ServerConfig(replicas=1, bulk_nice=5), "cpu", cores=2)
    >>> (told.replicas, told.bulk_threads, told.bulk_nice)
    (1, 0, 5)
    """
    vllm = config.engine == "vllm"
    if device is None:
        device = detect_device() if config.device == "auto" and vllm else config.device
    if not vllm:
        loop = ""
    else:
        loop = config.engine_loop
    slo_ms = config.interactive_slo_ms
    if slo_ms is None:
        slo_ms = default_interactive_slo_ms(device) if vllm else 0.0
    memory = config.memory_fraction
    if memory is None:
        memory = GPU_MEMORY_FRACTION if device == "cuda" else CPU_MEMORY_FRACTION
    eager, eager_reason = eager_engine(config.enforce_eager, device, flags) if vllm else (False, "null engine")
    cpu_engines = device == "cpu" and vllm
    if memory_bytes is None and cpu_engines:
        memory_bytes = available_memory_bytes()
    specs = cache(partial(_model_specs, config))  # read from disk once, and only where a choice needs them
    dtype = engine_dtype(config.dtype, device, flags) if vllm else EngineDtype("float32", "null engine")
    engine_bytes = partial(cpu_engine_bytes, config=config, dtype=dtype.dtype)
    interactive_replica, interactive_replica_reason = _interactive_replica(
        config, device, memory_bytes, specs, engine_bytes
    )
    slo_s = slo_ms / 1000.0 if slo_ms else None
    gather_ms = config.interactive_gather_ms
    if gather_ms is None:
        gather_ms = GATHER_SHARE_OF_SLO * slo_ms if slo_s and interactive_replica and device == "cpu" else 0.0
    cpu_stepped_replica = interactive_replica and device == "cpu" and loop in STEPPED_LOOPS
    threads = (config.interactive_threads or 0) if cpu_stepped_replica else 0
    cores = usable_cores() if cores is None else cores
    split = cpu_stepped_replica and config.replicas is None and config.bulk_threads is None
    split = split and 1 < cores <= SMALL_MACHINE_CORES
    split_declined = _split_declined(cores, memory_bytes, specs, engine_bytes) if split else ""
    split = split and not split_declined
    replicas = config.replicas or (cores if split else 1)
    bulk_threads = 1 if split else (config.bulk_threads or 0) if device == "cpu" and loop in STEPPED_LOOPS else 0
    nice = config.bulk_nice if config.bulk_nice is not None else SPLIT_BULK_NICE if split else 0
    bulk_nice = nice if interactive_replica and loop in STEPPED_LOOPS else 0
    engines = replicas + interactive_replica
    return ResolvedSettings(
        config=replace(config, replicas=replicas),
        device=device,
        engine_loop=loop,
        interactive_slo_s=slo_s,
        memory_fraction=memory,
        dtype=dtype,
        enforce_eager=eager,
        eager_reason=eager_reason,
        interactive_replica=interactive_replica,
        interactive_replica_reason=interactive_replica_reason,
        interactive_gather_s=gather_ms / 1000.0,
        interactive_threads=threads,
        split_reason=f"auto: a CPU of {cores} cores beside an interactive replica" if split else "",
        split_declined=split_declined,
        memory_short=_memory_short(engines, memory_bytes, specs, engine_bytes) if cpu_engines else "",
        bulk_threads=bulk_threads,
        bulk_nice=bulk_nice,
    )


def _interactive_replica(
    config: ServerConfig,
    device: str,
    memory_bytes: int | None,
    specs: Callable[[], list[ModelSpec]],
    engine_bytes: EngineBytes,
) -> tuple[bool, str]:
    """Whether each model gets an interactive replica, and why (``--interactive-replica``)."""
    if config.interactive_replica != "auto":
        return config.interactive_replica == "on", f"interactive_replica={config.interactive_replica}"
    if config.engine != "vllm":
        return False, "auto: off for the null engine"
    for spec in specs():
        if spec.weight_bytes > INTERACTIVE_REPLICA_MAX_WEIGHT_BYTES:
            return False, (
                f"{DECLINED}{spec.name}'s weights take {spec.weight_bytes / 1024**3:.1f} GiB "
                f"(over {INTERACTIVE_REPLICA_MAX_WEIGHT_BYTES / 1024**3:g}): a second copy would take the memory "
                "bulk batches need"
            )
    short = _memory_short((config.replicas or 1) + 1, memory_bytes, specs, engine_bytes) if device == "cpu" else ""
    if short:
        return False, f"{DECLINED}{short}; queries share the bulk engines"
    return True, "auto: queries run on an engine of their own"


def _split_declined(
    cores: int, memory_bytes: int | None, specs: Callable[[], list[ModelSpec]], engine_bytes: EngineBytes
) -> str:
    """Why a small CPU's bulk work stays on one engine (empty: it may split): the engines of a bulk
    engine per core, and each model's interactive one, would not fit in the available memory."""
    short = _memory_short(cores + 1, memory_bytes, specs, engine_bytes)
    return f"auto: one bulk engine, not one per core: {short} (--replicas sets the count)" if short else ""


def cpu_engine_bytes(spec: ModelSpec, config: ServerConfig, dtype: str) -> int:
    """What one CPU engine of ``spec`` holds: ``CPU_ENGINE_BYTES``, the model's weights, and the KV
    cache its engine is given (server/engine/vllm_args.py; a decoder's is allocated, an encoder's
    is not, and config.json does not tell them apart, so it counts for every model)."""
    return CPU_ENGINE_BYTES + spec.weight_bytes + cpu_kv_cache_bytes(spec, config.max_batch_tokens, dtype)


def _memory_short(
    engines: int, memory_bytes: int | None, specs: Callable[[], list[ModelSpec]], engine_bytes: EngineBytes
) -> str:
    """Empty where ``engines`` CPU engines of each model fit in ``memory_bytes`` (unknown: they do),
    at ``engine_bytes`` of its spec each (``cpu_engine_bytes``); else what they need against what there is."""
    if memory_bytes is None:
        return ""
    need = sum(engines * engine_bytes(spec) for spec in specs())
    if memory_bytes >= need:
        return ""
    count = engines * len(specs())
    return (
        f"{count} engine{'s' if count > 1 else ''} would take about {need / 1024**3:.1f} GiB where "
        f"{memory_bytes / 1024**3:.1f} GiB is available to the server"
    )


def _model_specs(config: ServerConfig) -> list[ModelSpec]:
    return [load_model_spec(source, name) for name, source in map(parse_model_arg, config.models)]
