"""How many cores a vLLM-CPU engine computes on.

vLLM-CPU binds each engine's OpenMP threads to the machine's cores minus one per engine, which
it keeps for the scheduler process (``VLLM_CPU_NUM_OF_RESERVED_CPU``). On a 2-core machine that
leaves the model ONE thread, and the scheduler needs little of a core (docs/tuning.md). So on
machines of at most ``SMALL_MACHINE_CORES`` cores the server reserves none; elsewhere vLLM's
default stands (not measured here). A value the user set for either vLLM variable always wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SMALL_MACHINE_CORES = 2
RESERVED_VAR = "VLLM_CPU_NUM_OF_RESERVED_CPU"
BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which cpusets and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def cpu_engine_env(environ: Mapping[str, str] = os.environ, cores: int | None = None) -> dict[str, str]:
    """The variables to add to a vLLM-CPU engine's environment (empty: keep vLLM's defaults).

    >>> cpu_engine_env({}, cores=2)
    {'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}
    >>> cpu_engine_env({}, cores=16)
    {}
    >>> cpu_engine_env({'VLLM_CPU_NUM_OF_RESERVED_CPU': '1'}, cores=2)
    {}
    """
    if RESERVED_VAR in environ or BIND_VAR in environ:
        return {}
    cores = usable_cores() if cores is None else cores
    return {RESERVED_VAR: "0"} if cores <= SMALL_MACHINE_CORES else {}
