"""The mixed suite's servers, as data: each mode a name and the ``embedtext serve`` arguments it adds.

``interactive_replica`` is the defaults; ``classes`` queries and bulk work on shared engines paced
to the interactive target; ``unpaced`` the baseline every ratio is over (shared engines, bulk
steps flat out, no target). The others change one thing of those. A paced mode with ``_slo<ms>``
after its name holds that target instead of the run's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from embedtext.server.config.resolve import resolve

# The defaults (an interactive replica), the shared engines paced for queries, and the baseline.
MODES = ("interactive_replica", "classes", "unpaced")


# On a GPU one more server: the shared stepped engine with no target.
GPU_MODES = ("interactive_replica", "classes", "unpaced")


# Every ratio's denominator: shared engines, bulk steps flat out, no target to pace them for.
BASELINE = "unpaced"


SHARED = ("--set", "interactive_replica=off")  # queries and bulk work on the same engines


# What each mode adds to the servers' arguments: the defaults, the shared engines, and the order and
# engine loop before them.
MODE_ARGS = {
    # Latency classes on shared engines, their steps paced.
    "classes": SHARED,
    "unpaced": (*SHARED, "--interactive-slo-ms", "0"),
    # classes with a GIL switch interval of 0.5 ms (Python's: 5 ms).
    "short_switch": (*SHARED, "--set", "switch_interval_ms=0.5"),
    # One more engine that runs the queries alone, the bulk engines unpaced: the defaults.
    "interactive_replica": ("--set", "interactive_replica=on"),
    # The same, each query sent at once: no gathering of queries into shared steps on a CPU.
    "no_gather": ("--set", "interactive_replica=on", "--set", "interactive_gather_ms=0"),
    # The same, queries gathering for 150 ms (the CPU's default: 30% of the 250 ms target, 75 ms).
    "long_gather": ("--set", "interactive_replica=on", "--set", "interactive_gather_ms=150"),
    # The same, the bulk engine at nice 10 (by default at the server's priority).
    "bulk_nice": ("--set", "interactive_replica=on", "--set", "bulk_nice=10"),
    # The same, the queries' engine on one thread (by default: torch's own count, every core).
    "one_thread": ("--set", "interactive_replica=on", "--set", "interactive_threads=1"),
    # The same with one bulk engine on every core (--replicas 1).
    "one_bulk_engine": ("--set", "interactive_replica=on", "--replicas", "1"),
    # A small CPU's defaults with the bulk engines at the server's priority (by default nice 10 there).
    "split_same_priority": ("--set", "interactive_replica=on", "--set", "bulk_nice=0"),
    # classes with bulk batches at --max-batch-tokens: no turns among bulk callers.
    "full_batches": (*SHARED, "--set", "bulk_batch_ms=0"),
    # classes with bulk turns of 250 ms of engine time (the default).
    "short_turns": (*SHARED, "--set", "bulk_batch_ms=250"),
    # classes with bulk turns of 1,000 ms.
    "long_turns": (*SHARED, "--set", "bulk_batch_ms=1000"),
    # The defaults with bulk turns of 250 ms, named.
    "replica_short_turns": ("--set", "interactive_replica=on", "--set", "bulk_batch_ms=250"),
    # The defaults with bulk turns of 1,000 ms.
    "replica_long_turns": ("--set", "interactive_replica=on", "--set", "bulk_batch_ms=1000"),
}


# The modes given ``slo_ms`` where it is given.
PACED_MODES = (
    "classes",
    "short_switch",
    "interactive_replica",
    "no_gather",
    "long_gather",
    "bulk_nice",
    "one_thread",
    "one_bulk_engine",
    "split_same_priority",
    "full_batches",
    "short_turns",
    "long_turns",
    "replica_short_turns",
    "replica_long_turns",
)


SLO_SUFFIX = re.compile(r"^(?P<base>\w+?)_slo(?P<ms>\d+(?:\.\d+)?)$")


def split_mode(mode: str) -> tuple[str, float | None]:
    """A mode's base mode, and the target its own ``_slo<ms>`` suffix names (None: no suffix).

    >>> split_mode("classes_slo500"), split_mode("short_turns_slo1000"), split_mode("classes")
    (('classes', 500.0), ('short_turns', 1000.0), ('classes', None))
    """
    found = SLO_SUFFIX.match(mode)
    return (found["base"], float(found["ms"])) if found else (mode, None)


def mode_slo_ms(mode: str, slo_ms: float | None) -> float | None:
    """The target a mode's server holds: its own suffix's, else the run's ``slo_ms`` (None: the
    server's default)."""
    return split_mode(mode)[1] or slo_ms


def server_args(mode: str, slo_ms: float | None = None) -> tuple[str, ...]:
    """A mode's server arguments; the paced servers hold ``slo_ms`` when given one (else the
    server's default: 250 ms on a CPU, 20 ms on a GPU), or the target of their ``_slo<ms>`` suffix.

    >>> server_args("classes_slo500", 250.0)
    ('--set', 'interactive_replica=off', '--interactive-slo-ms', '500')
    """
    base = split_mode(mode)[0]
    slo_ms = mode_slo_ms(mode, slo_ms)
    target = ("--interactive-slo-ms", f"{slo_ms:g}") if slo_ms and base in PACED_MODES else ()
    return (*MODE_ARGS[base], *target)


def steps_its_engines(args: Sequence[str]) -> bool:
    """A server started with ``args`` steps its vLLM engines itself, so it can keep a step timeline:
    the flags parsed as ``embedtext serve`` parses them and resolved as it resolves them."""
    from embedtext.server.cli import config_from_args

    return resolve(config_from_args(list(args)), "cpu").stepped  # stepped or not, whatever the device


def check_modes(modes: Sequence[str]) -> None:
    """Known modes, the baseline among them (every ratio is over the baseline's same phase).

    >>> check_modes(["classes"])
    Traceback (most recent call last):
    ValueError: mixed modes need unpaced, the ratios' denominator: got classes
    >>> check_modes(["unpaced_slo500", "unpaced"])
    Traceback (most recent call last):
    ValueError: a target (_slo<ms>) needs a paced mode (classes, short_switch, ...): got unpaced_slo500
    """
    parts = {mode: split_mode(mode) for mode in modes}
    unknown = [m for m, (base, _) in parts.items() if base not in MODE_ARGS]
    if unknown:
        raise ValueError(f"unknown mixed modes {unknown}: choose from {', '.join(MODE_ARGS)}")
    unpaced = [m for m, (base, target) in parts.items() if target and base not in PACED_MODES]
    if unpaced:
        raise ValueError(f"a target (_slo<ms>) needs a paced mode ({', '.join(PACED_MODES)}): got {', '.join(unpaced)}")
    if BASELINE not in modes:
        raise ValueError(f"mixed modes need {BASELINE}, the ratios' denominator: got {','.join(modes)}")
