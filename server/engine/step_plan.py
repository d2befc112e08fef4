"""What a stepped engine runs next: interactive rows first, then bulk rows up to a step's token budget.

A replica that steps its engine itself (server/engine/vllm_stepped.py) hands the engine only
the rows of one step at a time. An interactive row that arrives while a step runs then waits
for that step and goes first in the next, whatever bulk work is queued behind it; bounding the
tokens of a step bounds that wait. ``StepPlan`` holds the batches a replica was given, picks
each step's rows, and puts the vectors of finished rows back in their batches' order. It has
no engine in it, so its rules are tested on their own (tests/unit/server/test_step_plan.py).

A step is a list of runs, ``(batch, start, end)``: rows ``start`` .. ``end`` - 1 of a batch, in
step order. A packed engine gathers and scatters a run at once; the plan finds where a run stops
in its batch's sums of token costs, without a loop over rows.

>>> plan = StepPlan()
>>> bulk = plan.add(StepBatch([[1, 2, 3], [4, 5, 6], [7, 8, 9]], interactive_rows=0))
>>> [(b is bulk, start, end) for b, start, end in plan.next_step(budget_tokens=6)]
[(True, 0, 2)]
>>> query = plan.add(StepBatch([[10, 11]], interactive_rows=1))
>>> [(b is query, start, end) for b, start, end in plan.next_step(budget_tokens=6)]  # the query, then bulk
[(True, 0, 1), (False, 2, 3)]
>>> bulk = plan.add(StepBatch([[1, 2], [3, 4], [5, 6], [7, 8]], interactive_rows=0))
>>> step_rows(plan.next_step(budget_tokens=6, query_pair_tokens=9))  # 6 tokens
3
>>> query = plan.add(StepBatch([[12]], interactive_rows=1))
>>> [(b is query, start, end) for b, start, end in plan.next_step(budget_tokens=6, query_pair_tokens=9)]
[(True, 0, 1), (False, 3, 4)]

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
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

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


# A step: runs of consecutive rows, (batch, start, end), in step order.
Step = list[tuple["StepBatch", int, int]]


@dataclass(eq=False)
class StepBatch:
    """One batch a replica was given: its rows (a list of ids per row, or ``TokenRows``), and the
    vectors of those finished so far."""

    rows: list[list[int]]
    interactive_rows: int
    vectors: list = field(init=False)  # one per row, None until finished
    unfinished: int = field(init=False)
    cancelled: bool = False
    # What rows 0 .. i - 1 cost a step, at [i]: their tokens, an empty row one (it still takes a slot).
    cost_sums: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.interactive_rows = min(self.interactive_rows, len(self.rows))
        self.vectors = [None] * len(self.rows)
        self.unfinished = len(self.rows)
        lengths = getattr(self.rows, "lengths", None)  # TokenRows carry theirs
        if lengths is None:
            lengths = np.fromiter(map(len, self.rows), dtype=np.int64, count=len(self.rows))
        self.cost_sums = np.zeros(len(self.rows) + 1, dtype=np.int64)
        np.cumsum(np.maximum(lengths, 1), out=self.cost_sums[1:])

    def tokens(self, start: int, end: int) -> int:
        """What rows ``start`` .. ``end`` - 1 cost a step."""
        return int(self.cost_sums[end] - self.cost_sums[start])

    @property
    def done(self) -> bool:
        return self.unfinished == 0


def row_tokens(batch: StepBatch, index: int) -> int:
    """What one row costs a step: its tokens (an empty row still takes a slot)."""
    return batch.tokens(index, index + 1)


def step_rows(step: Step) -> int:
    """The rows of a step."""
    return sum(end - start for _, start, end in step)


def carries_bulk(runs: Iterable[tuple[StepBatch, int, int]]) -> bool:
    """Some rows of these runs, (batch, start, end), are bulk rows. A replica measures its engine's
    speed on such steps only: a step of a few query rows is mostly the step's fixed work, and a
    speed learned from them would start the next bulk work at a fraction of the budget it needs.

    >>> query, bulk = StepBatch([[1]], interactive_rows=1), StepBatch([[2], [3]], interactive_rows=0)
    >>> carries_bulk([(query, 0, 1)]), carries_bulk([(query, 0, 1), (bulk, 1, 2)])
    (False, True)
    """
    return any(end > batch.interactive_rows for batch, _, end in runs)


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

    def next_step(self, budget_tokens: int, query_pair_tokens: int | None = None) -> Step:
        """The runs of the next step: every queued interactive row, then bulk rows in arrival order
        while the step stays within ``budget_tokens``. With ``query_pair_tokens``, a step that
        carries interactive rows takes bulk rows only while it and the step before it (the one
        running when they came) stay within that many tokens. A step never comes back empty while
        rows are queued: one row over the budget goes alone."""
        step: Step = []
        tokens = self._take(self._interactive, None, True, step)
        carries_queries = bool(step)
        if carries_queries and query_pair_tokens is not None:
            budget_tokens = min(budget_tokens, query_pair_tokens - self.last_step_tokens)
        tokens += self._take(self._bulk, budget_tokens - tokens, not carries_queries, step)
        self.queued_rows -= step_rows(step)
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

    @staticmethod
    def _take(runs: deque[_Run], budget: int | None, first_goes: bool, step: Step) -> int:
        """Append to ``step`` the head rows of ``runs`` within ``budget`` tokens (all of them for
        None; the first row whatever it costs where ``first_goes``), a run of a batch next to its
        own last one joined to it. Returns the tokens taken."""
        taken = 0
        while runs:
            run = runs[0]
            if run.batch.cancelled or run.next >= run.end:
                runs.popleft()
                continue
            sums = run.batch.cost_sums
            stop = run.end
            if budget is not None:  # the last row whose sum stays within what is left
                most = int(sums[run.next]) + budget - taken
                stop = min(stop, int(np.searchsorted(sums, most, side="right")) - 1)
                if stop <= run.next:
                    if not (first_goes and taken == 0):
                        return taken
                    stop = run.next + 1
            taken += run.batch.tokens(run.next, stop)
            if step and step[-1][0] is run.batch and step[-1][2] == run.next:
                step[-1] = (run.batch, step[-1][1], stop)
            else:
                step.append((run.batch, run.next, stop))
            run.next = stop
            if stop < run.end:
                return taken
        return taken

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
