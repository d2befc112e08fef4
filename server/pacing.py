"""SLO pacing: size bulk batches so an interactive row waits at most about its target.

An engine step cannot be interrupted, and vLLM fills the step that carries an interactive row
with whatever bulk rows it holds. So an interactive row waits for the bulk tokens already handed
to its engine: the step running when it arrives, then the rest in its own step. Bounding those
tokens bounds the wait. :class:`EngineSpeed` measures how many tokens a replica computes per
second while it has work; :class:`BulkPacer` turns that and ``--interactive-slo-ms`` into the
token budget of one bulk batch (or engine step), so that the bulk work an interactive row may
wait behind (``budgets_waited`` budgets: all the batches a replica may hold at once,
``--max-batches-per-replica``) takes about half the target. The other half is for the
interactive row's own step, the server's work around it, and noise.

>>> pacer = BulkPacer(slo_s=0.25, max_batch_tokens=16384, budgets_waited=2, min_batch_tokens=256)
>>> pacer.batch_tokens  # no speed measured yet: a cautious start
1024
>>> pacer.update(tokens_per_s=8000.0)  # 8000 tokens/s x 0.25 s x 0.5, over 2 batches
500
>>> pacer.update(tokens_per_s=1000.0)  # too slow to hold the target: the smallest batch
256
>>> pacer.holds_target, pacer.just_lost_target  # the caller warns once, on this update
(False, True)
>>> pacer.update(tokens_per_s=1000.0), pacer.just_lost_target
(256, False)

Apart from any target, bulk callers take turns on the engines in batches of about
``--bulk-batch-ms`` of engine time (:func:`bulk_turn_tokens`): the queue shares bulk work fairly
only as it hands batches out, and an engine runs what it holds in the order given, so two scans
can be no fairer than two batches of each replica's work.

>>> bulk_turn_tokens(None, turn_s=1.0, max_batch_tokens=16384, min_batch_tokens=256)  # a cautious start
1024
>>> bulk_turn_tokens(4000.0, turn_s=1.0, max_batch_tokens=16384, min_batch_tokens=256)  # a slow CPU
4000
>>> bulk_turn_tokens(400_000.0, turn_s=1.0, max_batch_tokens=16384, min_batch_tokens=256)  # a GPU
16384
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# Share of the target the bulk tokens an engine holds may take.
BULK_SHARE_OF_SLO = 0.5
# Bulk batches before the first speed measurement: at most this many tokens (a few rows).
FIRST_BATCH_TOKENS = 1024


@dataclass
class _ReplicaClock:
    in_flight: int = 0
    since: float = 0.0  # the last start or finish while busy
    busy_s: float = 0.0
    tokens: int = 0
    batches: int = 0


class EngineSpeed:
    """Tokens per second a replica computes while it holds work (a moving average over windows).

    Each replica's busy time (any batch in flight) and the tokens it finished are summed until
    the window is full (``WINDOW_S`` of busy time or ``WINDOW_BATCHES`` batches), then averaged in.
    Per batch would not do: batches in flight overlap, and an engine may run two in one step, so
    one finishes late and the next at once. Callers count only batches or steps with bulk rows: a
    few query rows alone are mostly fixed work.
    """

    WINDOW_S = 0.5
    # ... or this many finished batches, whichever comes first: an engine that takes next to no time
    # (the null engine) would otherwise run thousands of batches at the first, cautious budget.
    WINDOW_BATCHES = 64

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.tokens_per_s: float | None = None
        self._replicas: dict[int, _ReplicaClock] = {}

    def _advance(self, replica: int, now: float | None) -> tuple[_ReplicaClock, float]:
        now = time.monotonic() if now is None else now
        clock = self._replicas.setdefault(replica, _ReplicaClock())
        if clock.in_flight:
            clock.busy_s += now - clock.since
        clock.since = now
        return clock, now

    def started(self, replica: int, now: float | None = None) -> None:
        clock, _ = self._advance(replica, now)
        clock.in_flight += 1

    def finished(self, replica: int, tokens: int, now: float | None = None) -> None:
        clock, _ = self._advance(replica, now)
        clock.in_flight = max(clock.in_flight - 1, 0)
        clock.tokens += tokens
        clock.batches += 1
        if clock.busy_s <= 0.0 or (clock.busy_s < self.WINDOW_S and clock.batches < self.WINDOW_BATCHES):
            return
        rate = clock.tokens / clock.busy_s
        clock.busy_s, clock.tokens, clock.batches = 0.0, 0, 0
        self.tokens_per_s = (
            rate if self.tokens_per_s is None else self.tokens_per_s + self.smoothing * (rate - self.tokens_per_s)
        )

    def seconds_for(self, tokens: int, replicas: int = 1) -> float | None:
        """About how long ``replicas`` engines take to compute ``tokens`` (None: not measured yet)."""
        if not self.tokens_per_s:
            return None
        return tokens / (self.tokens_per_s * max(replicas, 1))


@dataclass(frozen=True)
class PaceReport:
    """What a pacer settled on: its token budget, the speed it was sized from, whether it holds the target."""

    budget_tokens: int
    tokens_per_s: float  # 0.0: not measured yet
    holds_target: bool


def batch_budget(wanted: int | None, *, min_batch_tokens: int, max_batch_tokens: int) -> int:
    """A bulk batch's token budget: ``wanted`` (None: a cautious start, no speed measured yet)
    within the smallest batch (one longest row, never split) and the largest."""
    smallest = min(min_batch_tokens, max_batch_tokens)
    return max(smallest, min(max_batch_tokens, FIRST_BATCH_TOKENS if wanted is None else wanted))


def bulk_turn_tokens(tokens_per_s: float | None, *, turn_s: float, max_batch_tokens: int, min_batch_tokens: int) -> int:
    """The token budget of a bulk batch that takes an engine about ``turn_s`` at the measured speed."""
    wanted = int(tokens_per_s * turn_s) if tokens_per_s else None
    return batch_budget(wanted, min_batch_tokens=min_batch_tokens, max_batch_tokens=max_batch_tokens)


class BulkPacer:
    """The token budget of one bulk batch under an interactive latency target."""

    def __init__(
        self,
        *,
        slo_s: float,
        max_batch_tokens: int,
        budgets_waited: float,
        min_batch_tokens: int,
        share: float = BULK_SHARE_OF_SLO,
    ) -> None:
        if slo_s <= 0:
            raise ValueError("the interactive target must be positive")
        self.slo_s = slo_s
        self.share = share  # of the target, for the bulk batches an interactive row may wait behind
        self.max_batch_tokens = max_batch_tokens
        # How many budgets of bulk tokens an interactive row may wait behind, at most.
        self.budgets_waited = budgets_waited
        # One row is never split: the longest row the model takes is the smallest budget.
        self.min_batch_tokens = min(min_batch_tokens, max_batch_tokens)
        self.batch_tokens = batch_budget(None, min_batch_tokens=min_batch_tokens, max_batch_tokens=max_batch_tokens)
        self.holds_target = True
        self.just_lost_target = False  # the last update found the target can no longer be held

    def update(self, tokens_per_s: float | None) -> int:
        """The budget for the measured speed (unchanged while none is measured)."""
        self.just_lost_target = False
        if tokens_per_s:
            wanted = int(tokens_per_s * self.slo_s * self.share / self.budgets_waited)
            held, self.holds_target = self.holds_target, wanted >= self.min_batch_tokens
            self.just_lost_target = held and not self.holds_target
            self.batch_tokens = batch_budget(
                wanted, min_batch_tokens=self.min_batch_tokens, max_batch_tokens=self.max_batch_tokens
            )
        return self.batch_tokens

    def report(self, tokens_per_s: float | None) -> PaceReport:
        return PaceReport(self.batch_tokens, float(tokens_per_s or 0.0), self.holds_target)

    def step_s(self, tokens_per_s: float | None) -> float | None:
        """About how long the bulk work an interactive row may wait behind takes at that speed."""
        if not tokens_per_s:
            return None
        return self.batch_tokens * self.budgets_waited / tokens_per_s
