"""The rows of each engine step (server/engine/step_plan.py): the rules a stepped replica keeps.
Bookkeeping only, no engine."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from embedtext.server.engine.step_plan import StepBatch, StepPlan, row_tokens
from embedtext.server.rows import TokenRows


def _rows(count: int, tokens: int, first: int = 0) -> list[list[int]]:
    return [[first + i] * tokens for i in range(count)]


def _pairs(step) -> list[tuple[StepBatch, int]]:
    """A step's runs, (batch, start, end), as (batch, row index), row by row."""
    return [(batch, index) for batch, start, end in step for index in range(start, end)]


def _ids(step) -> list[tuple[int, int]]:
    return [(id(batch), index) for batch, index in _pairs(step)]


def test_bulk_rows_fill_a_step_up_to_the_budget_in_arrival_order():
    plan = StepPlan()
    first = plan.add(StepBatch(_rows(3, 4), interactive_rows=0))
    second = plan.add(StepBatch(_rows(3, 4), interactive_rows=0))
    assert _ids(plan.next_step(budget_tokens=10)) == [(id(first), 0), (id(first), 1)]
    assert _ids(plan.next_step(budget_tokens=10)) == [(id(first), 2), (id(second), 0)]
    assert _ids(plan.next_step(budget_tokens=100)) == [(id(second), 1), (id(second), 2)]
    assert plan.next_step(budget_tokens=100) == [] and plan.queued_rows == 0


def test_an_interactive_row_goes_first_in_the_next_step_whatever_bulk_is_queued():
    plan = StepPlan()
    bulk = plan.add(StepBatch(_rows(50, 10), interactive_rows=0))
    plan.next_step(budget_tokens=30)  # the step running when the query comes
    query = plan.add(StepBatch(_rows(1, 5), interactive_rows=1))
    step = _ids(plan.next_step(budget_tokens=30))
    assert step[0] == (id(query), 0)
    assert step[1:] == [(id(bulk), 3), (id(bulk), 4)]  # bulk fills the rest of the budget


def test_a_batch_with_an_interactive_head_splits_by_class():
    plan = StepPlan()
    bulk = plan.add(StepBatch(_rows(4, 10), interactive_rows=0))
    mixed = plan.add(StepBatch(_rows(3, 10), interactive_rows=1))
    step = _ids(plan.next_step(budget_tokens=20))
    assert step == [(id(mixed), 0), (id(bulk), 0)]


def test_one_row_over_the_budget_goes_alone_and_interactive_rows_are_never_held_back():
    plan = StepPlan()
    long_row = plan.add(StepBatch(_rows(2, 50), interactive_rows=0))
    assert _ids(plan.next_step(budget_tokens=10)) == [(id(long_row), 0)]
    queries = plan.add(StepBatch(_rows(3, 20), interactive_rows=3))
    assert _ids(plan.next_step(budget_tokens=10)) == [(id(queries), 0), (id(queries), 1), (id(queries), 2)]
    assert _ids(plan.next_step(budget_tokens=10)) == [(id(long_row), 1)]


def test_a_cancelled_batch_loses_its_queued_rows_and_the_count_follows():
    plan = StepPlan()
    gone = plan.add(StepBatch(_rows(5, 2), interactive_rows=2))
    kept = plan.add(StepBatch(_rows(2, 2), interactive_rows=0))
    assert _ids(plan.next_step(budget_tokens=4)) == [(id(gone), 0), (id(gone), 1)]
    plan.cancel(gone)
    assert plan.queued_rows == 2
    assert _ids(plan.next_step(budget_tokens=100)) == [(id(kept), 0), (id(kept), 1)]
    assert plan.queued_rows == 0


def test_vectors_come_back_in_the_batch_order_whatever_order_rows_finish_in():
    plan = StepPlan()
    batch = plan.add(StepBatch(_rows(3, 2), interactive_rows=1))
    step = plan.next_step(budget_tokens=100)
    done = [plan.finished(b, i, f"vector {i}") for b, i in reversed(_pairs(step))]
    assert done == [False, False, True]
    assert batch.vectors == ["vector 0", "vector 1", "vector 2"]
    assert plan.finished(batch, 1, "again") is True and batch.vectors[1] == "vector 1"  # counted once


def test_a_step_that_carries_queries_stays_within_the_pair_budget_with_the_step_before():
    plan = StepPlan()
    bulk = plan.add(StepBatch(_rows(50, 10), interactive_rows=0))
    assert len(_ids(plan.next_step(budget_tokens=40, query_pair_tokens=60))) == 4  # no query: the whole budget
    query = plan.add(StepBatch(_rows(1, 5), interactive_rows=1))
    # 40 tokens ran while it waited: its own step holds 20 (5 + one bulk row)
    assert _ids(plan.next_step(budget_tokens=40, query_pair_tokens=60)) == [(id(query), 0), (id(bulk), 4)]
    query = plan.add(StepBatch(_rows(1, 5), interactive_rows=1))
    # after that short step of 15 tokens, a full step: 5 + three bulk rows
    step = _ids(plan.next_step(budget_tokens=40, query_pair_tokens=60))
    assert step == [(id(query), 0), (id(bulk), 5), (id(bulk), 6), (id(bulk), 7)]
    long_query = plan.add(StepBatch(_rows(1, 25), interactive_rows=1))
    assert _ids(plan.next_step(budget_tokens=40, query_pair_tokens=60)) == [(id(long_query), 0)]  # no bulk row
    assert len(_ids(plan.next_step(budget_tokens=40, query_pair_tokens=60))) == 4  # no query: full steps again


def _paced_steps(plan: StepPlan, pair: int, steps: int, query_every: int) -> list[int]:
    """Tokens of each step as the stepped engine plans them, a one-token query before every
    ``query_every``-th step (0: none)."""
    tokens = []
    for number in range(steps):
        if query_every and number % query_every == 0:
            plan.add(StepBatch([[7]], interactive_rows=1))
        step = plan.next_step(plan.bulk_step_tokens(pair), pair)
        tokens.append(sum(len(batch.rows[index]) for batch, index in _pairs(step)))
    return tokens


def test_the_share_of_steps_that_carry_queries_follows_the_recent_steps():
    plan = StepPlan()
    plan.add(StepBatch(_rows(2000, 10), interactive_rows=0))
    _paced_steps(plan, pair=250, steps=10, query_every=0)
    assert plan.query_share == 0.0
    _paced_steps(plan, pair=250, steps=30, query_every=1)
    assert plan.query_share > 0.95
    # A batch with an interactive head counts once its head is taken; its bulk rows do not.
    plan.add(StepBatch(_rows(3, 10), interactive_rows=1))
    plan.next_step(budget_tokens=100)
    rising = plan.query_share
    _paced_steps(plan, pair=250, steps=10, query_every=0)
    assert plan.query_share < 0.15 < rising


def test_with_a_query_in_every_step_steps_are_two_equal_halves_of_the_pair():
    plan = StepPlan()
    plan.add(StepBatch(_rows(2000, 10), interactive_rows=0))
    # No queries: the long step of a long/short pair, 250 / 1.25 tokens.
    assert set(_paced_steps(plan, pair=250, steps=5, query_every=0)) == {200}
    # Queries rare: long steps, and the query's own step short (within the pair with the one before).
    rare = _paced_steps(plan, pair=250, steps=20, query_every=10)
    assert min(rare[1:10]) >= 170 and rare[10] <= 250 - rare[9]
    assert sorted(rare)[:2] == sorted((rare[0], rare[10])) and max(rare[0], rare[10]) <= 60
    # A query in every step: the share grows, and the steps settle at about half the pair each,
    # never a short one after a long one.
    every = _paced_steps(plan, pair=250, steps=40, query_every=1)[20:]
    assert all(115 <= tokens <= 125 for tokens in every), every
    assert all(a + b <= 250 for a, b in zip(every, every[1:]))


def test_a_step_is_runs_of_consecutive_rows_a_batch_with_a_query_head_in_one_run():
    """A packed engine gathers a run at once: the plan hands out runs, not rows, and joins a batch's
    interactive head to its bulk rows where they follow in the same step."""
    plan = StepPlan()
    mixed = plan.add(StepBatch(_rows(5, 3), interactive_rows=2))
    assert [(id(b), start, end) for b, start, end in plan.next_step(budget_tokens=100)] == [(id(mixed), 0, 5)]
    bulk = plan.add(StepBatch(_rows(4, 3), interactive_rows=0))
    mixed = plan.add(StepBatch(_rows(5, 3), interactive_rows=2))
    step = [(id(b), start, end) for b, start, end in plan.next_step(budget_tokens=100)]
    assert step == [(id(mixed), 0, 2), (id(bulk), 0, 4), (id(mixed), 2, 5)]  # bulk rows in arrival order
    assert plan.queued_rows == 0


def test_row_costs_come_from_token_rows_as_from_lists_and_an_empty_row_costs_one():
    rows = [[1, 2, 3], [], [4, 5]]
    listed = StepBatch(rows, interactive_rows=0)
    packed = StepBatch(TokenRows.from_lists(rows), interactive_rows=0)
    assert listed.cost_sums.tolist() == packed.cost_sums.tolist() == [0, 3, 4, 6]
    assert [row_tokens(listed, i) for i in range(3)] == [3, 1, 2] and listed.tokens(1, 3) == 3


def _reference_steps(batches, budgets) -> list[list[tuple[int, int]]]:
    """The plan's rules row by row, as (batch number, row index) per step: queries first, then bulk
    rows in arrival order within the budget, one row over it alone in a step without queries."""
    interactive = [(b, i) for b, (lengths, head) in enumerate(batches) for i in range(head)]
    bulk = [(b, i) for b, (lengths, head) in enumerate(batches) for i in range(head, len(lengths))]
    steps = []
    for budget in budgets:
        step, tokens = interactive, sum(max(batches[b][0][i], 1) for b, i in interactive)
        interactive = []
        while bulk:
            cost = max(batches[bulk[0][0]][0][bulk[0][1]], 1)
            if tokens + cost > budget and (step or tokens):
                break
            step, tokens = [*step, bulk[0]], tokens + cost
            bulk = bulk[1:]
        steps.append(step)
    return steps


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 12), min_size=1, max_size=9), st.integers(0, 9)), min_size=1, max_size=5
    ),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
)
def test_the_runs_hold_the_rows_a_row_by_row_plan_would_take(batches, budgets):
    batches = [(lengths, min(head, len(lengths))) for lengths, head in batches]
    plan = StepPlan()
    added = [plan.add(StepBatch(TokenRows.from_lists([[5] * n for n in lengths]), head)) for lengths, head in batches]
    number = {id(batch): n for n, batch in enumerate(added)}
    got = [[(number[id(b)], i) for b, i in _pairs(plan.next_step(budget))] for budget in budgets]
    assert got == _reference_steps(batches, budgets)
