"""What a stepped engine runs next: interactive rows first, then bulk rows up to a step's token budget.

A replica that steps its engine itself (server/engine/vllm_stepped.py) hands the engine only
the rows of one step at a time. An interactive row that arrives while a step runs then waits
for that step and goes first in the next, whatever bulk work is queued behind it; bounding the
tokens of a step bounds that wait. ``StepPlan`` holds the batches a replica was given, picks
each step's rows, and puts the vectors of finished rows back in their batches' order. It has
no engine in it, so its rules are tested on their own (tests/unit/server/test_step_plan.py).

>>> plan = StepPlan()
>>> bulk = plan.add(StepBatch([[1, 2, 3], [4, 5, 6], [7, 8, 9]], interactive_rows=0))
>>> [(b is bulk, i) for b, i in plan.next_step(budget_tokens=6)]
[(True, 0), (True, 1)]
>>> query = plan.add(StepBatch([[10, 11]], interactive_rows=1))
>>> [(b is query, i) for b, i in plan.next_step(budget_tokens=6)]  # the query first, then bulk within the budget
[(True, 0), (False, 2)]
>>> bulk = plan.add(StepBatch([[1, 2], [3, 4], [5, 6], [7, 8]], interactive_rows=0))
>>> len(plan.next_step(budget_tokens=6, query_pair_tokens=9))  # 6 tokens
3
>>> query = plan.add(StepBatch([[12]], interactive_rows=1))
>>> [(b is query, i) for b, i in plan.next_step(budget_tokens=6, query_pair_tokens=9)]  # 3 tokens after those 6
[(True, 0), (False, 3)]

With queries in most steps, the steps without them shrink towards half of the pair budget
(``bulk_step_tokens``): two equal steps instead of a long one and a short one.

>>> plan = StepPlan()
>>> plan.bulk_step_tokens(pair_tokens=1000)  # no queries yet: the long step of a long/short pair
800
>>> for _ in range(20):
...     _ = plan.add(StepBatch([[1]], interactive_rows=1)), plan.next_step(budget_tokens=6)
>>> plan.bulk_step_tokens(pair_tokens=1000)  # a query in every step: about two equal halves
502
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# A step that carries queries and the step before it (the one running when they came) hold at
# most this many bulk step budgets: with queries rare, the query's own step is short, so the
# steps without them may be longer than two equal steps would allow.
QUERY_STEPS_BUDGETS = 1.25
# With a query in every step, the pair is two equal steps: a short step computes fewer tokens a
# second on a busy host, and with queries in every step it would come every other step
# (bench: --only mixed, the probes' engine part).
EQUAL_STEPS_BUDGETS = 2.0
# Weight of the latest step in the share of steps that carried queries.
QUERY_SHARE_SMOOTHING = 0.2


@dataclass(eq=False)
class StepBatch:
    """One batch a replica was given: its rows, and the vectors of those finished so far."""

    rows: list[list[int]]
    interactive_rows: int
    vectors: list = field(init=False)  # one per row, None until finished
    unfinished: int = field(init=False)
    cancelled: bool = False

    def __post_init__(self) -> None:
        self.interactive_rows = min(self.interactive_rows, len(self.rows))
        self.vectors = [None] * len(self.rows)
        self.unfinished = len(self.rows)

    @property
    def done(self) -> bool:
        return self.unfinished == 0


def row_tokens(batch: StepBatch, index: int) -> int:
    """What one row costs a step: its tokens (an empty row still takes a slot)."""
    return max(len(batch.rows[index]), 1)


def step_runs(rows: Iterable[tuple[StepBatch, int]]) -> list[tuple[StepBatch, int, int]]:
    """A step's (batch, row index) pairs as runs of consecutive rows of one batch, (batch, start,
    end) in step order: a packed engine gathers and scatters a run at once, not a row.

    >>> a, b = StepBatch([[1], [2], [3]], interactive_rows=1), StepBatch([[4], [5]], interactive_rows=0)
    >>> [(x is a, start, end) for x, start, end in step_runs([(a, 0), (b, 0), (b, 1), (a, 1), (a, 2)])]
    [(True, 0, 1), (False, 0, 2), (True, 1, 3)]
    """
    runs: list[tuple[StepBatch, int, int]] = []
    for batch, index in rows:
        if runs and runs[-1][0] is batch and runs[-1][2] == index:
            runs[-1] = (batch, runs[-1][1], index + 1)
        else:
            runs.append((batch, index, index + 1))
    return runs


def carries_bulk(rows: Iterable[tuple[StepBatch, int]]) -> bool:
    """Some of these (batch, row index) rows are bulk rows. A replica measures its engine's speed
    on such steps only: a step of a few query rows is mostly the step's fixed work, and a speed
    learned from them would start the next bulk work at a fraction of the budget it needs.

    >>> query, bulk = StepBatch([[1]], interactive_rows=1), StepBatch([[2], [3]], interactive_rows=0)
    >>> carries_bulk([(query, 0)]), carries_bulk([(query, 0), (bulk, 1)])
    (False, True)
    """
    return any(index >= batch.interactive_rows for batch, index in rows)


@dataclass
class _Run:
    """Rows ``next`` .. ``end`` - 1 of a batch, not yet handed to the engine."""

    batch: StepBatch
    next: int
    end: int


class StepPlan:
    """The queued rows of a replica's batches, and the rows handed to its engine."""

    def __init__(self) -> None:
        self._interactive: deque[_Run] = deque()
        self._bulk: deque[_Run] = deque()
        self.queued_rows = 0
        self.last_step_tokens = 0
        self.query_share = 0.0  # of recent steps, those that carried interactive rows (a moving average)

    def add(self, batch: StepBatch) -> StepBatch:
        """Queue a batch; its first ``interactive_rows`` rows go ahead of every bulk row."""
        count = len(batch.rows)
        if batch.interactive_rows:
            self._interactive.append(_Run(batch, 0, batch.interactive_rows))
        if batch.interactive_rows < count:
            self._bulk.append(_Run(batch, batch.interactive_rows, count))
        self.queued_rows += count
        return batch

    def next_step(self, budget_tokens: int, query_pair_tokens: int | None = None) -> list[tuple[StepBatch, int]]:
        """The rows of the next step, as (batch, row index): every queued interactive row, then
        bulk rows in arrival order while the step stays within ``budget_tokens``. With
        ``query_pair_tokens``, a step that carries interactive rows takes bulk rows only while it
        and the step before it (the one running when they came) stay within that many tokens.
        A step never comes back empty while rows are queued: one row over the budget goes alone."""
        step: list[tuple[StepBatch, int]] = []
        tokens = 0
        for batch, index in self._take(self._interactive, None):
            step.append((batch, index))
            tokens += row_tokens(batch, index)
        carries_queries = bool(step)
        if carries_queries and query_pair_tokens is not None:
            budget_tokens = min(budget_tokens, query_pair_tokens - self.last_step_tokens)
        for batch, index in self._take(self._bulk, budget_tokens - tokens, first_goes=not carries_queries):
            step.append((batch, index))
            tokens += row_tokens(batch, index)
        self.queued_rows -= len(step)
        self.last_step_tokens = tokens
        if step:
            self.query_share += QUERY_SHARE_SMOOTHING * (float(carries_queries) - self.query_share)
        return step

    def bulk_step_tokens(self, pair_tokens: int) -> int:
        """The bulk budget of a step, given ``pair_tokens``, what a query's step and the step before
        it may hold together: ``pair_tokens / QUERY_STEPS_BUDGETS`` while queries are rare, moving
        towards half as the share of steps that carry queries grows."""
        budgets = QUERY_STEPS_BUDGETS + (EQUAL_STEPS_BUDGETS - QUERY_STEPS_BUDGETS) * self.query_share
        return max(int(pair_tokens / budgets), 1)

    def _take(self, runs: deque[_Run], budget: int | None, first_goes: bool = True) -> Iterator[tuple[StepBatch, int]]:
        taken = 0
        while runs:
            run = runs[0]
            if run.batch.cancelled or run.next >= run.end:
                runs.popleft()
                continue
            cost = row_tokens(run.batch, run.next)
            if budget is not None and taken + cost > budget and not (first_goes and taken == 0):
                return
            taken += cost
            run.next += 1
            yield run.batch, run.next - 1

    def finished(self, batch: StepBatch, index: int, vector) -> bool:
        """Record a finished row; True when it was its batch's last."""
        if batch.vectors[index] is None:
            batch.vectors[index] = vector
            batch.unfinished -= 1
        return batch.done

    def cancel(self, batch: StepBatch) -> None:
        """Drop a batch's queued rows (its rows in the engine are the caller's to abort)."""
        if batch.cancelled:
            return
        batch.cancelled = True
        for runs in (self._interactive, self._bulk):
            for run in runs:
                if run.batch is batch:
                    self.queued_rows -= run.end - run.next
                    run.next = run.end
