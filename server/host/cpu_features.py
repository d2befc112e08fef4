"""The dtype a vLLM engine computes in when ``--dtype auto``.

On a CPU with bfloat16 instructions (AVX512-BF16 or AMX), bfloat16 runs the model faster and the
answers hold on the default model: per-row cosine to float32 and top-10 retrieval overlap
(bench/results/dtype.json). Elsewhere bfloat16 is emulated, so float32, which also gives vectors
equal to sentence-transformers'. On a GPU vLLM chooses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# On an x86 CPU with AVX2 and no AVX-512 vLLM's compiled model ran as fast as eager and started
# later (bench/results/cpu-compile-avx2.json). With AVX-512, AMX included, packed engines run the
# RMSNorm families compiled much faster, and BERTs as fast (the compile suite).
AVX2_ONLY = ("avx2", "avx512f")


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``/proc/cpuinfo`` (empty when unreadable).

    >>> sorted(cpu_flags("processor : 0\\nflags : fpu avx512f avx512_bf16\\n\\nprocessor : 1\\nflags : fpu\\n"))
    ['avx512_bf16', 'avx512f', 'fpu']
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


@dataclass(frozen=True)
class EngineDtype:
    dtype: str  # what the engine is given
    reason: str  # for the server's log and `embedtext info`

    @property
    def note(self) -> str:
        return f"engine dtype {self.dtype}: {self.reason}"


def eager_engine(requested: str, device: str, flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """``--enforce-eager`` resolved for ``device``: (eager, why).

    >>> eager_engine("auto", "cpu", frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}))
    (False, 'enforce_eager=auto on this CPU: compiled')
    >>> eager_engine("auto", "cpu", frozenset({"avx2", "fma"}))
    (True, 'enforce_eager=auto on a CPU with avx2 and no avx512f')
    >>> eager_engine("auto", "cpu", frozenset({"avx2", "avx512f", "avx512_bf16"}))
    (False, 'enforce_eager=auto on this CPU: compiled')
    >>> eager_engine("auto", "cpu", frozenset())[0], eager_engine("auto", "cuda", frozenset({"avx2"}))[0]
    (False, False)
    >>> eager_engine("off", "cpu", frozenset({"amx_bf16"}))
    (False, 'enforce_eager=off')
    """
    if requested != "auto":
        return requested == "on", f"enforce_eager={requested}"
    if device != "cpu":
        return False, "enforce_eager=auto on a GPU: compiled"
    have = cpu_flags() if flags is None else flags
    with_flag, without_flag = AVX2_ONLY
    if with_flag in have and without_flag not in have:
        return True, f"enforce_eager=auto on a CPU with {with_flag} and no {without_flag}"
    # AVX-512 (compiled ran faster there), or another architecture (not measured): compiled.
    return False, "enforce_eager=auto on this CPU: compiled"


def engine_dtype(requested: str, device: str, flags: frozenset[str] | None = None) -> EngineDtype:
    """``--dtype`` resolved for ``device``: a dtype the user named stands.

    >>> engine_dtype("auto", "cpu", frozenset({"avx512f", "avx512_bf16"})).dtype
    'bfloat16'
    >>> engine_dtype("auto", "cpu", frozenset({"avx512f"})).dtype
    'float32'
    >>> engine_dtype("float32", "cpu", frozenset({"amx_bf16"})).dtype
    'float32'
    >>> engine_dtype("auto", "cuda").dtype
    'auto'
    """
    if requested != "auto":
        return EngineDtype(requested, "--dtype")
    if device != "cpu":
        return EngineDtype("auto", "--dtype auto: vLLM's choice for the model on this device")
    found = [flag for flag in BF16_FLAGS if flag in (cpu_flags() if flags is None else flags)]
    if found:
        return EngineDtype("bfloat16", f"--dtype auto on a CPU with {', '.join(found)} (float32: --dtype float32)")
    # vLLM's own "auto" would pick float16 for a checkpoint without a dtype: slow on a CPU.
    return EngineDtype("float32", "--dtype auto on a CPU without bfloat16 instructions")
