"""What a bench run measures (quick or full sizes) and the generated models it uses."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

DEFAULT_SUITES = ("cpu", "cpu-peers", "transport", "latency", "scaling")  # cpu-peers: the cpu suite's peers alone
SUITES = (*DEFAULT_SUITES, "mixed", "engine-overhead", "extension", "startup", "gpu")  # the others: when named
GPU_REPLICAS = (1, 2, 4, 8, 16, 32)  # the GPU suite's replica counts unless given


def uneven_replica_counts(replicas: tuple[int, ...], processes: int) -> list[int]:
    """Replica counts (the GPU suite's defaults when none are given) that K server processes
    cannot share evenly; counts below K run in that many processes."""
    return [n for n in replicas or GPU_REPLICAS if n % min(processes, n)]


@dataclass(frozen=True)
class BenchPlan:
    quick: bool
    cpu_work: tuple[tuple[int, int], ...]  # (tokens per row, rows)
    transport_rows: int
    transport_tokens: int
    dims: tuple[int, ...]
    loads: tuple[float, ...]  # fractions of the measured max throughput
    latency_single_s: float  # length of each single-row load step
    latency_chunk_requests: int  # 2048-row requests per load step
    scaling_rows: tuple[int, ...]
    scaling_tokens: int
    # Quick runs start engines eagerly (a shorter start), full runs as a server does (enforce_eager=auto);
    # every engine of a run gets the same setting, vLLM's own paths too: ratios stay like for like.
    eager: bool = False
    eager_reason: str = "enforce_eager=off"  # why, for the report (server/host/cpu_features.py)
    # The cpu suite's rounds; quick runs take 2 (ABCD, DCBA: each path as often early as late).
    cpu_rounds: int = 5
    # The cpu suite's peers on the default model: a tenth of the tiny model's rows/s, so fewer rows.
    cpu_peer_work: tuple[tuple[int, int], ...] = ((50, 1024), (512, 128))
    workdir: Path | None = None  # set by make_plan

    @property
    def engine_flags(self) -> list[str]:
        """Our servers' compile setting, resolved once for the run (so every server gets the same)."""
        return ["--set", f"enforce_eager={'on' if self.eager else 'off'}"]

    @property
    def engines(self) -> str:
        """The report's word on it: 'eager (enforce_eager=on)', 'compiled (enforce_eager=auto ...)'."""
        return f"{'eager' if self.eager else 'compiled'} ({self.eager_reason})"


QUICK = BenchPlan(
    quick=True,
    cpu_work=((50, 4096), (512, 384)),
    transport_rows=10_000,
    transport_tokens=10,
    dims=(768,),  # the headline dim; full runs (or --dims) cover 384 and 1024 too
    loads=(0.5, 1.25),
    latency_single_s=2.0,
    latency_chunk_requests=2,
    scaling_rows=(2_000, 5_000, 10_000),
    scaling_tokens=16,
    eager=True,
    eager_reason="enforce_eager=on",
    cpu_rounds=2,
)
FULL = replace(
    QUICK,
    quick=False,
    cpu_work=((50, 50_000), (512, 4096)),
    transport_rows=100_000,
    dims=(384, 768, 1024),
    loads=(0.25, 0.5, 0.75, 1.0, 1.25),
    latency_single_s=10.0,
    latency_chunk_requests=8,
    scaling_rows=(10_000, 100_000, 1_000_000),
    cpu_rounds=5,
    cpu_peer_work=((50, 4096), (512, 512)),
)


def make_plan(
    quick: bool,
    *,
    rows: int | None = None,
    dims: tuple[int, ...] = (),
    workdir: str | None = None,
    enforce_eager: str | None = None,
    device: str | None = None,
    flags: frozenset[str] | None = None,
) -> BenchPlan:
    """``enforce_eager`` (auto, on, off) for every engine of the run; unset, a quick run's are eager
    and a full run's as a server's default (auto), resolved for ``device`` (unset: this machine's)
    and the CPU's ``flags`` (unset: read from /proc/cpuinfo).

    >>> make_plan(False, workdir=".", device="cpu", flags=frozenset({"avx2", "avx512f"})).engines
    'compiled (enforce_eager=auto on this CPU: compiled)'
    >>> make_plan(False, workdir=".", device="cpu", flags=frozenset({"amx_bf16"})).engines
    'eager (enforce_eager=auto on a CPU with amx_bf16)'
    >>> make_plan(True, workdir=".", device="cuda").engines, make_plan(False, workdir=".", device="cuda").engines
    ('eager (enforce_eager=on)', 'compiled (enforce_eager=auto on a GPU: compiled)')
    >>> make_plan(True, workdir=".", enforce_eager="off", device="cpu", flags=frozenset({"amx_bf16"})).engine_flags
    ['--set', 'enforce_eager=off']
    """
    from embedtext.server.config.resolve import resolve
    from embedtext.server.config.settings import ServerConfig

    plan = QUICK if quick else FULL
    setting = enforce_eager or ("on" if quick else "auto")
    # As a server resolves it (the engine loop is given: it needs no model to decide).
    resolved = resolve(ServerConfig(enforce_eager=setting, engine_loop="packed"), device, flags, memory_bytes=0)
    eager, reason = resolved.enforce_eager, resolved.eager_reason
    workdir_path = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="embedtext-bench-"))
    plan = replace(plan, eager=eager, eager_reason=reason, workdir=workdir_path)
    if rows:
        long_tokens = plan.cpu_work[1][0]
        plan = replace(
            plan, transport_rows=rows, cpu_work=((plan.cpu_work[0][0], rows), (long_tokens, max(64, rows // 10)))
        )
    if dims:
        plan = replace(plan, dims=tuple(dims))
    return plan


def rows_label(rows: int) -> str:
    """1000000 -> '1m', 100000 -> '100k', 2500 -> '2500'."""
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}m"
    if rows % 1000 == 0:
        return f"{rows // 1000}k"
    return str(rows)


class GeneratedModels:
    """Random-weight BERTs written once per run under the plan's workdir."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._made: dict[str, Path] = {}

    def get(self, name: str, **shape) -> Path:
        if name not in self._made:
            # In a child process: torch stays out of this one (its RSS is measured).
            path = self.workdir / name
            command = [sys.executable, "-m", "embedtext.cli", "make-model", str(path)]
            for key, value in shape.items():
                command += [f"--{key.replace('_', '-')}", str(value)]
            subprocess.run(command, check=True, capture_output=True)
            self._made[name] = path
        return self._made[name]

    def tiny(self) -> Path:
        """The CPU suite's model: 2 layers, hidden 128, 4 heads, up to 512 tokens."""
        return self.get("tiny", max_tokens=512)

    def null_dim(self, dim: int) -> Path:
        """A 1-layer model of width ``dim`` for the null engine (only its tokenizer and dim matter)."""
        return self.get(f"d{dim}", layers=1, hidden=dim, heads=max(1, dim // 64), max_tokens=128)
