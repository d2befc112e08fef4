"""What a bench run measures (quick or full sizes) and the generated models it uses."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SUITES = ("cpu", "cpu-peers", "transport", "scaling")  # cpu-peers: the cpu suite's peers alone
SUITES = (
    *DEFAULT_SUITES,
    "mixed",
    "engine-overhead",
    "compile",
    "extension",
    "chunks",
    "startup",
    "gpu",
)  # the others: when named
GPU_REPLICAS = (1, 2, 4, 8, 16, 32)  # the GPU suite's replica counts unless given


def uneven_replica_counts(replicas: tuple[int, ...], processes: int) -> list[int]:
    """Replica counts (the GPU suite's defaults when none are given) that K server processes
    cannot share evenly; counts below K run in that many processes."""
    return [n for n in replicas or GPU_REPLICAS if n % min(processes, n)]


@dataclass(frozen=True)
class BenchPlan:
    """A run's sizes (quick or full; each suite's are in bench/session.py) and its engines' compile
    setting: quick runs start engines eagerly (a shorter start), full runs as a server does
    (enforce_eager=auto). Every engine of a run gets the same, vLLM's own too: ratios stay like for like."""

    quick: bool
    eager: bool
    eager_reason: str  # why, for the report (server/host/cpu_features.py)
    workdir: Path
    rows: int | None = None  # --rows: the cpu (50 tokens), transport and gpu suites' rows
    dims: tuple[int, ...] = ()  # --dims: the transport suite's

    @property
    def engine_flags(self) -> list[str]:
        """Our servers' compile setting, resolved once for the run (so every server gets the same)."""
        return ["--set", f"enforce_eager={'on' if self.eager else 'off'}"]

    @property
    def engines(self) -> str:
        """The report's word on it: 'eager (enforce_eager=on)', 'compiled (enforce_eager=auto ...)'."""
        return f"{'eager' if self.eager else 'compiled'} ({self.eager_reason})"


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
    >>> make_plan(False, workdir=".", device="cpu", flags=frozenset({"avx2"})).engines
    'eager (enforce_eager=auto on a CPU with avx2 and no avx512f)'
    >>> make_plan(True, workdir=".", device="cuda").engines, make_plan(False, workdir=".", device="cuda").engines
    ('eager (enforce_eager=on)', 'compiled (enforce_eager=auto on a GPU: compiled)')
    >>> make_plan(True, workdir=".", enforce_eager="off", device="cpu", flags=frozenset({"amx_bf16"})).engine_flags
    ['--set', 'enforce_eager=off']
    """
    from embedtext.server.config.resolve import resolve
    from embedtext.server.config.settings import ServerConfig

    setting = enforce_eager or ("on" if quick else "auto")
    # As a server resolves it (the engine loop is given: it needs no model to decide).
    resolved = resolve(ServerConfig(enforce_eager=setting, engine_loop="packed"), device, flags, memory_bytes=0)
    workdir_path = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="embedtext-bench-"))
    return BenchPlan(quick, resolved.enforce_eager, resolved.eager_reason, workdir_path, rows, tuple(dims))


def rows_label(rows: int) -> str:
    """1000000 -> '1m', 100000 -> '100k', 2500 -> '2500'."""
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}m"
    if rows % 1000 == 0:
        return f"{rows // 1000}k"
    return str(rows)


def _make_in_child(path: Path, **shape) -> None:
    """``embedtext make-model`` in a child process: torch stays out of this one (its RSS is measured)."""
    command = [sys.executable, "-m", "embedtext.cli", "make-model", str(path)]
    for key, value in shape.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    subprocess.run(command, check=True, capture_output=True)


class GeneratedModels:
    """Random-weight BERTs written once under the plan's workdir: a model the same workdir already
    holds in the same shape (``NAME.shape.json`` beside it) is reused, so runs sharing a ``--workdir`` make each
    once (the same seed gives the same weights)."""

    def __init__(self, workdir: Path, make: Callable[..., object] | None = None) -> None:
        self.workdir = workdir
        self._make = make or _make_in_child  # make(path, **shape) writes one
        self._made: dict[str, Path] = {}

    def get(self, name: str, **shape) -> Path:
        if name not in self._made:
            path = self.workdir / name
            stamp = self.workdir / f"{name}.shape.json"
            wanted = json.dumps(shape, sort_keys=True)
            if not (stamp.exists() and stamp.read_text() == wanted):
                stamp.unlink(missing_ok=True)  # a write cut short leaves no stamp
                self._make(path, **shape)
                stamp.write_text(wanted)
            self._made[name] = path
        return self._made[name]

    def tiny(self) -> Path:
        """The CPU suite's model: 2 layers, hidden 128, 4 heads, up to 512 tokens."""
        return self.get("tiny", max_tokens=512)

    def null_dim(self, dim: int) -> Path:
        """A 1-layer model of width ``dim`` for the null engine (only its tokenizer and dim matter)."""
        return self.get(f"d{dim}", layers=1, hidden=dim, heads=max(1, dim // 64), max_tokens=128)
