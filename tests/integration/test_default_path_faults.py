"""The default engine path under faults: packed engines (the default loop) in the dtype that
``--dtype auto`` picks on this CPU (bfloat16 where it has bfloat16 instructions), two bulk engines
and an interactive one, as ``resolve`` picks them on a 2-core host. An engine is killed in the
middle of a client's calls, in the middle of a DuckDB scan, and (the interactive one) while queries
come; afterwards each row's vector is checked against its text's own. The bulk engines are also
frozen while a call's deadline passes.

The module owns its server. Each test waits until every engine is back before it ends, so the next
one starts from a whole server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import numpy as np
import psutil
import pyarrow as pa
import pytest
from duckdb_scans import extension_connection, scan_under_way
from server_metrics import MetricsServer, per_replica, summed, wait_for_metrics

import embedtext
from embedtext.bench.servers import free_port
from embedtext.corpus import docstring_corpus
from embedtext.protocol.errors import DeadlineExceededError
from embedtext.server.config.settings import ServerConfig
from embedtext.server.engine.base import INTERACTIVE_WORKER_NAME, WORKER_NAME
from embedtext.server.engine.vllm_packed import CHECK_FLOOR_COSINE
from embedtext.server.host.cpu_features import engine_dtype

pytestmark = pytest.mark.slow  # a server of its own, and engines that restart

BULK_REPLICAS = 2  # what resolve picks on a 2-core host
# Real prose, each text numbered: no two rows share a text, so a row given another row's vector fails.
BODIES = docstring_corpus(400)["body"]


def _texts(count: int, tag: str) -> list[str]:
    return [f"{tag} {i}: {BODIES[i % len(BODIES)]}" for i in range(count)]


def _assert_each_rows_own_vector(got: np.ndarray, expected: np.ndarray) -> None:
    """Cosine to the text's own vector at least the floor the server's start-up check never goes
    below: bfloat16 rows computed in other batches differ by far less than that, another text's
    vector by far more."""
    cosines = np.einsum("ij,ij->i", got, expected) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosines.min() >= CHECK_FLOOR_COSINE, (int(cosines.argmin()), float(cosines.min()))


def _workers(server: MetricsServer, name: str) -> list[psutil.Process]:
    return [p for p in psutil.Process(server.process.pid).children(recursive=True) if p.name() == name]


def _wait_until_whole(server: MetricsServer, restarts_before: float) -> None:
    """Every engine up again: one more restart counted, and every replica healthy."""

    def whole(m: dict[str, float]) -> bool:
        restarts = sum(per_replica(m, "embedtext_replica_restarts_total").values())
        healthy = list(per_replica(m, "embedtext_replica_healthy").values())
        return restarts >= restarts_before + 1 and len(healthy) == BULK_REPLICAS + 1 and all(healthy)

    wait_for_metrics(server.metrics, whole, "the killed engine back and every replica healthy", timeout_s=300)


def _ended_late(samples: dict[str, float]) -> float:
    """The tiny model's calls the server ended past their deadline (or on the caller's going away)."""
    codes = ("DEADLINE_EXCEEDED", "CANCELLED")  # Prometheus writes the labels sorted: code, then model
    return sum(summed(samples, f'embedtext_requests_total{{code="{code}",model="tiny"}}') for code in codes)


def _restarts(server: MetricsServer) -> float:
    return sum(per_replica(server.metrics(), "embedtext_replica_restarts_total").values())


@pytest.fixture(scope="module")
def default_path(tiny_model_dir, tmp_path_factory):
    """The tiny model on the server's defaults, in the dtype ``--dtype auto`` picks on this CPU (not
    the suite's float32), with a metrics port; eager, as the suite's other generated-model servers."""
    from embedtext.connectors.local_server import LocalServer

    port = free_port()
    args = ["--dtype", "auto", "--metrics-port", str(port), "--set", "enforce_eager=on"]
    log_path = tmp_path_factory.mktemp("logs") / "default-path.log"
    with LocalServer([f"tiny={tiny_model_dir}"], replicas=BULK_REPLICAS, args=args, log_path=log_path) as server:
        server.wait_ready(900, every_engine=True)
        yield MetricsServer(server, port)


def test_the_server_runs_the_default_path(default_path):
    with embedtext.Client(default_path.target) as client:
        model = client.info().model()
    assert (model.engine_loop, model.dtype) == ("packed", engine_dtype("auto", "cpu").dtype)
    assert (model.replicas, model.interactive_replicas) == (BULK_REPLICAS + 1, 1)


def test_a_bulk_engine_killed_mid_call_loses_no_row(default_path):
    """SIGKILL of a bulk engine's worker while both bulk engines hold batches: no call fails, every
    row gets its own text's vector, and the engine comes back."""
    restarts = _restarts(default_path)
    calls = [_texts(128, f"call {c}") for c in range(24)]
    with embedtext.Client(default_path.target) as client:
        expected = [client.embed(texts) for texts in calls]
    victim = _workers(default_path, WORKER_NAME)[0]

    async def load_while_killing() -> list[np.ndarray]:
        options = dict(max_batch_rows=8, max_in_flight=8, timeout=300, latency_class="bulk")
        async with embedtext.AsyncClient(default_path.target, **options) as c:
            tasks = [asyncio.ensure_future(c.embed(texts)) for texts in calls]
            # The event: both bulk engines hold batches of these calls.
            await asyncio.to_thread(
                wait_for_metrics,
                default_path.metrics,
                lambda m: all(per_replica(m, "embedtext_replica_inflight_batches").get(str(i)) for i in (0, 1)),
                "batches on both bulk engines",
            )
            os.kill(victim.pid, signal.SIGKILL)
            return await asyncio.gather(*tasks)

    got = asyncio.run(load_while_killing())
    for vectors, reference in zip(got, expected, strict=True):
        _assert_each_rows_own_vector(vectors, reference)
    _wait_until_whole(default_path, restarts)
    assert not victim.is_running(), f"worker {victim.pid} was killed and is still there"


def test_a_bulk_engine_killed_mid_scan_the_query_gets_every_row(default_path, extension_path, tmp_path):
    """The extension's scan of 20,000 rows on two DuckDB threads; a bulk engine killed once the
    server has embedded 2,048 of them: every row comes back, in order, with its own text's vector."""
    restarts = _restarts(default_path)
    texts = _texts(20_000, "row")
    con = extension_connection(extension_path, default_path.target, threads=2)
    con.execute(f"ATTACH '{tmp_path}/docs.db' AS scan (ROW_GROUP_SIZE 2048)")
    con.register("texts", pa.table({"id": range(len(texts)), "body": texts}))
    con.execute("CREATE TABLE scan.docs AS SELECT id, body FROM texts")
    worker, outcome = scan_under_way(con, "scan.docs", default_path.metrics)
    os.kill(_workers(default_path, WORKER_NAME)[0].pid, signal.SIGKILL)
    worker.join(600)
    assert "error" not in outcome, outcome.get("error")
    rows = outcome["rows"]
    assert [r[0] for r in rows] == list(range(len(texts))) and all(r[1] is not None for r in rows)
    sample = rows[::97]
    with embedtext.Client(default_path.target) as client:
        expected = client.embed([texts[i] for i, _ in sample])
    _assert_each_rows_own_vector(np.array([v for _, v in sample], dtype=np.float32), expected)
    _wait_until_whole(default_path, restarts)


def test_a_call_past_its_deadline_starts_no_more_of_its_batches(default_path):
    """The bulk engines frozen (SIGSTOP: a frozen engine is not a dead one, its process and socket
    stay) while a bulk call waits, so its deadline passes on a machine of any speed: the call ends
    DEADLINE_EXCEEDED, and once the engines run again no batch of it starts beyond the ones they
    already held (two each: ``max_batches_per_replica``)."""
    with embedtext.Client(default_path.target) as client:
        for _ in range(30):  # until the server has measured its engines' speed
            info = client.info(refresh=True)
            if info.model().engine_tokens_per_second > 0:
                break
            client.embed(_texts(256, "warm"), latency_class="bulk")
        rows = 8 * ServerConfig().max_batch_rows  # 8 batches or more; within the queue's bound
        model, texts = info.model(), [f"late row {i}" for i in range(rows)]
        tokens = int(client.split(texts).tokens.sum()) + 2 * len(texts)  # and [CLS], [SEP]
    assert model.engine_tokens_per_second > 0, "the server never measured its engines' speed"
    # Above what the rows need at the measured speed, so that the call is not refused at once.
    need_s = tokens / (model.engine_tokens_per_second * BULK_REPLICAS)

    def settled(m: dict[str, float]) -> bool:
        idle = sum(per_replica(m, "embedtext_replica_inflight_batches").values()) == 0
        return idle and m.get('embedtext_queued_rows{model="tiny"}') == 0

    before = wait_for_metrics(default_path.metrics, settled, "no work of an earlier test left")
    engines = _workers(default_path, WORKER_NAME)
    for engine in engines:
        engine.suspend()
    try:
        # One request (no client sub-batches), whose end on the server's side the metrics count.
        options = dict(timeout=1.2 * need_s + 2, latency_class="bulk", max_batch_rows=len(texts))
        with embedtext.Client(default_path.target, **options) as client:
            with pytest.raises(DeadlineExceededError, match="(?i)deadline") as caught:
                client.embed(texts)
        assert "refused at once" not in str(caught.value) and "overloaded" not in str(caught.value), caught.value
        # The event: the server's own deadline for the call has passed too, and it ended the call
        # (the client's deadline passes a little sooner): from then on none of its batches may start.
        wait_for_metrics(
            default_path.metrics,
            lambda m: _ended_late(m) >= _ended_late(before) + 1,
            "the server ended the late call",
        )
    finally:
        for engine in engines:
            engine.resume()

    after = wait_for_metrics(default_path.metrics, settled, "the late call's rows left the queue and the engines")
    batches = "embedtext_replica_batches_total"
    by_replica = {k: v - per_replica(before, batches).get(k, 0) for k, v in per_replica(after, batches).items()}
    started, held = sum(by_replica.values()), BULK_REPLICAS * ServerConfig().max_batches_per_replica
    assert 0 < started <= held, f"batches started of a call nobody waited for (the engines held {held}): {by_replica}"
    with embedtext.Client(default_path.target) as client:  # and the next caller is served
        assert client.embed(texts[:3]).shape[0] == 3


def test_queries_run_on_the_bulk_engines_while_theirs_restarts(default_path):
    restarts = _restarts(default_path)
    (victim,) = _workers(default_path, INTERACTIVE_WORKER_NAME)
    os.kill(victim.pid, signal.SIGKILL)
    with embedtext.Client(default_path.target) as client:
        give_up = time.monotonic() + 120
        while client.info(refresh=True).model().interactive_replicas:
            assert time.monotonic() < give_up, "the killed engine was never taken out of rotation"
            time.sleep(0.05)
        before = per_replica(default_path.metrics(), "embedtext_replica_batches_total")
        texts = _texts(4, "query")
        vectors = [client.embed([t]) for t in texts]
        after = per_replica(default_path.metrics(), "embedtext_replica_batches_total")
        _wait_until_whole(default_path, restarts)
        _assert_each_rows_own_vector(np.concatenate(vectors), client.embed(texts))
    bulk = [str(i) for i in range(BULK_REPLICAS)]
    assert sum(after.get(i, 0) - before.get(i, 0) for i in bulk) >= len(texts)  # on the bulk engines
    assert after.get(str(BULK_REPLICAS), 0) == before.get(str(BULK_REPLICAS), 0)  # not on the killed one
