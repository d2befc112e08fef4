"""The environment every engine process of this server starts with, and the log lines saying why."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from embedtext.server.host.allocator import engine_allocator
from embedtext.server.host.compile_cache import compile_cache_env
from embedtext.server.host.cpu_threads import cpu_engine_env, usable_cores


@dataclass(frozen=True)
class HostTuning:
    env: dict[str, str]  # variables to add to the engines' environment
    notes: tuple[tuple[int, str], ...] = ()  # (logging level, message) for the server's log

    def log_to(self, logger: logging.Logger) -> None:
        for level, message in self.notes:
            logger.log(level, "%s", message)


def host_tuning(device: str, engine: str = "vllm") -> HostTuning:
    """Threads, allocator and compile cache for vLLM-CPU engines; nothing for a GPU or the null engine."""
    if device != "cpu" or engine != "vllm":
        return HostTuning({})
    threads = cpu_engine_env()
    allocator = engine_allocator()
    # Once, at INFO: a missing tcmalloc costs speed, not correctness, and the line says how to get it.
    notes = [(logging.INFO, allocator.message)]
    if threads:
        notes.insert(0, (logging.INFO, f"vLLM-CPU on {usable_cores()} cores: {threads} (the model gets every core)"))
    cache = compile_cache_env()
    if cache:
        notes.append((logging.INFO, f"vLLM-CPU compile cache: {cache} (vLLM's AOT cache does not load back here)"))
    return HostTuning({**threads, **allocator.env, **cache}, tuple(notes))
