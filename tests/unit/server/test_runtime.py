"""ModelRuntime's dispatch around a failed batch (real batch queue, router and supervisor).

The engine here is a STAND-IN (``RefusesFirstBatchBackend``, the null engine with its first batch
held and then refused): a real vLLM engine cannot be made to refuse one chosen batch on demand,
and what is tested is the server's dispatch, which is the same code for every engine.
"""

import asyncio
import dataclasses

import pytest
from event_loop import settle

from embedtext.protocol.errors import InvalidInputError
from embedtext.server.config.resolve import ResolvedSettings, resolve
from embedtext.server.config.settings import ServerConfig
from embedtext.server.engine.base import EngineRequestError
from embedtext.server.engine.null_backend import NullBackend
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models.source import load_model_spec
from embedtext.server.pacing import bulk_turn_tokens
from embedtext.server.scheduler.options import EmbedOptions
from embedtext.server.scheduler.runtime import INTERACTIVE_EXTRA_SLOTS, ModelRuntime

DELAY_MS = 60_000.0  # far longer than any wait below: "waited for the delay" cannot pass


class RefusesFirstBatchBackend(NullBackend):
    """Holds its first batch until ``release`` is set, then refuses it; later batches succeed."""

    def __init__(self, spec) -> None:
        super().__init__(spec, name="refuses-first")
        self.release = asyncio.Event()
        self.calls = 0

    async def embed(self, rows, interactive_rows=0):
        self.calls += 1
        if self.calls == 1:
            await self.release.wait()
            raise EngineRequestError("refused on purpose (test stand-in)")
        return await super().embed(rows, interactive_rows)


BULK = EmbedOptions(interactive=False)  # bulk rows wait for a fuller batch; interactive ones would not
INTERACTIVE = EmbedOptions(interactive=True)


class HoldsEveryBatchBackend(NullBackend):
    """A busy engine (test stand-in): holds every batch it is given until ``release`` is set."""

    def __init__(self, spec) -> None:
        super().__init__(spec, name="holds-every-batch")
        self.release = asyncio.Event()
        self.held: list[int] = []  # interactive rows of each batch, in the order given

    async def embed(self, rows, interactive_rows=0):
        self.held.append(interactive_rows)
        await self.release.wait()
        return await super().embed(rows, interactive_rows)


def _settings(config: ServerConfig, **decided) -> ResolvedSettings:
    """``config`` resolved for the stand-in engines here (the null engine's: no steps of their own),
    with ``decided`` in place of what resolve chose."""
    return dataclasses.replace(resolve(dataclasses.replace(config, engine="null"), "cpu"), **decided)


@pytest.fixture(scope="module")
def tiny_spec(tiny_model_dir):
    return load_model_spec(str(tiny_model_dir), name="tiny")


def test_a_failed_batch_frees_its_replica_for_the_rows_waiting_behind_it(tiny_spec):
    """Rows queued behind a busy replica go as soon as it is free again (idle dispatch);
    a batch that FAILS frees it too, so they must not sit out --max-batch-delay-ms."""

    async def run():
        config = ServerConfig(replicas=1, max_batches_per_replica=2, max_batch_delay_ms=DELAY_MS)
        backends = []

        def factory(_index):
            backends.append(RefusesFirstBatchBackend(tiny_spec))
            return backends[-1]

        runtime = ModelRuntime(tiny_spec, _settings(config), ServerMetrics(), factory)
        await runtime.start()
        try:
            first = asyncio.ensure_future(runtime.embed_token_ids([[101, 7, 102]], BULK, None))
            async with asyncio.timeout(10):  # not the 60 s delay: the idle replica took the first row at once
                while backends[0].calls < 1:
                    await asyncio.sleep(0.01)
            second = asyncio.ensure_future(runtime.embed_token_ids([[101, 8, 9, 102]], BULK, None))
            await settle()
            assert (
                runtime.queue.queued_rows == 1 and not second.done()
            )  # queued: the replica is busy, the batch not full
            backends[0].release.set()
            with pytest.raises(InvalidInputError, match="refused on purpose"):
                await asyncio.wait_for(first, 10)
            result = await asyncio.wait_for(second, 10)  # not the 60 s delay
            assert result.embeddings.shape == (1, tiny_spec.dim)
            assert backends[0].calls == 2
        finally:
            await runtime.stop()

    asyncio.run(run())


def test_queries_reach_a_busy_engine_without_waiting_for_the_queries_before_them(tiny_spec):
    """Bulk batches fill the replica's slots and the engine holds everything: each query that
    comes still goes to the engine at once (which runs every query it holds in its next step),
    not after the query before it is answered, up to INTERACTIVE_EXTRA_SLOTS of them; the next
    waits for a slot (the bound)."""

    async def run():
        config = ServerConfig(replicas=1, max_batches_per_replica=2, max_batch_delay_ms=1.0)
        backends = []

        def factory(_index):
            backends.append(HoldsEveryBatchBackend(tiny_spec))
            return backends[-1]

        async def until_held(count: int) -> None:
            async with asyncio.timeout(10):
                while len(backends[0].held) < count:
                    await asyncio.sleep(0.01)

        runtime = ModelRuntime(tiny_spec, _settings(config), ServerMetrics(), factory)
        await runtime.start()
        try:
            calls = []
            for i in range(2):  # the bulk slots
                calls.append(asyncio.ensure_future(runtime.embed_token_ids([[101, 7 + i, 102]], BULK, None)))
                await until_held(i + 1)
            for i in range(INTERACTIVE_EXTRA_SLOTS):
                calls.append(asyncio.ensure_future(runtime.embed_token_ids([[101, 20 + i, 102]], INTERACTIVE, None)))
                await until_held(3 + i)  # none answered yet: it went all the same
            assert backends[0].held == [0, 0] + [1] * INTERACTIVE_EXTRA_SLOTS
            calls.append(asyncio.ensure_future(runtime.embed_token_ids([[101, 99, 102]], INTERACTIVE, None)))
            await settle()
            assert runtime.queue.queued_interactive_rows == 1  # one more waits for a slot
            assert len(backends[0].held) == 2 + INTERACTIVE_EXTRA_SLOTS
            backends[0].release.set()
            results = await asyncio.wait_for(asyncio.gather(*calls), 10)
            assert [r.embeddings.shape for r in results] == [(1, tiny_spec.dim)] * len(calls)
        finally:
            await runtime.stop()

    asyncio.run(run())


class TakesATenthBackend(NullBackend):
    """An engine with a fixed time per batch (test stand-in: the null engine, slowed), so that the
    runtime measures a speed from it; what is tested is which batches the runtime measures."""

    def __init__(self, spec) -> None:
        super().__init__(spec, name="takes-a-tenth")

    async def embed(self, rows, interactive_rows=0):
        await asyncio.sleep(0.1)
        return await super().embed(rows, interactive_rows)


def test_only_batches_with_bulk_rows_measure_the_engines_speed(tiny_spec):
    """Queries alone are mostly an engine's fixed work per batch: a speed learned from them would
    size the next bulk batches to a fraction of what the target allows. So a runtime that has
    served only queries has measured nothing, and bulk batches then measure the engine."""

    async def run():
        config = ServerConfig(replicas=1, max_batches_per_replica=2, max_batch_delay_ms=1.0)
        runtime = ModelRuntime(
            tiny_spec,
            _settings(config, interactive_slo_s=0.25),
            ServerMetrics(),
            lambda _index: TakesATenthBackend(tiny_spec),
        )
        await runtime.start()
        try:
            for i in range(8):  # 0.8 s of engine time, over the speed's window
                await runtime.embed_token_ids([[101, 7 + i, 102]], INTERACTIVE, None)
            assert runtime.speed.tokens_per_s is None
            first = bulk_turn_tokens(
                None,
                turn_s=runtime.bulk_turn_s,
                max_batch_tokens=config.max_batch_tokens,
                min_batch_tokens=tiny_spec.max_tokens,
            )
            assert runtime.queue.bulk_batch_tokens == first  # still the first, cautious budget
            for i in range(8):
                await runtime.embed_token_ids([[101, 7 + i, 102]] * 4, BULK, None)
            assert runtime.speed.tokens_per_s is not None and runtime.speed.tokens_per_s > 0
        finally:
            await runtime.stop()

    asyncio.run(run())


class BatchSizesBackend(NullBackend):
    """The null engine, recording the rows of each batch it is given."""

    def __init__(self, spec) -> None:
        super().__init__(spec, name="batch-sizes")
        self.rows: list[int] = []

    async def embed(self, rows, interactive_rows=0):
        self.rows.append(len(rows))
        return await super().embed(rows, interactive_rows)


def test_the_null_engines_bulk_batches_reach_the_full_budget_after_a_window_of_batches(tiny_spec):
    """The null engine takes next to no time: its speed is measured after a window of batches, and
    its bulk batches then hold a whole turn, up to max_batch_rows rows: more tokens than one
    engine step (max_batch_tokens), so a request of 1,024 rows of 50 tokens goes as one batch."""

    async def run():
        config = ServerConfig(replicas=1, max_batches_per_replica=2)
        backend = BatchSizesBackend(tiny_spec)
        runtime = ModelRuntime(tiny_spec, _settings(config), ServerMetrics(), lambda _index: backend)
        await runtime.start()
        try:
            first = runtime.queue.bulk_batch_tokens
            assert first < config.max_batch_tokens
            row = [101] + [7] * 48 + [102]  # 50 tokens: 20 rows a request, within the first budget
            for _ in range(runtime.speed.WINDOW_BATCHES - 1):
                await runtime.embed_token_ids([row] * 20, BULK, None)
            assert runtime.speed.tokens_per_s is None and runtime.queue.bulk_batch_tokens == first
            await runtime.embed_token_ids([row] * 20, BULK, None)
            assert runtime.speed.tokens_per_s > 0
            full = config.max_batch_rows * tiny_spec.max_tokens
            assert runtime.queue.bulk_batch_tokens == runtime.queue.max_bulk_batch_tokens == full
            backend.rows.clear()
            rows = config.max_batch_rows  # 51,200 tokens: over max_batch_tokens
            assert rows * len(row) > config.max_batch_tokens
            result = await runtime.embed_token_ids([row] * rows, BULK, None)
            assert len(result.embeddings) == rows and backend.rows == [rows]
        finally:
            await runtime.stop()

    asyncio.run(run())


class TokensAtARateBackend(NullBackend):
    """An engine that takes time in proportion to a batch's tokens, and runs the batches it holds
    in the order given (test stand-in: the null engine, slowed, so that the runtime measures a
    speed); it records whose rows each batch held, by each row's second token id."""

    TOKENS_PER_S = 4000.0

    def __init__(self, spec) -> None:
        super().__init__(spec, name="tokens-at-a-rate")
        self.lock = asyncio.Lock()
        self.batches: list[tuple[set[int], int]] = []  # (the callers' ids, tokens), in the order run

    async def embed(self, rows, interactive_rows=0):
        async with self.lock:
            tokens = sum(len(r) for r in rows)
            self.batches.append(({r[1] for r in rows}, tokens))
            await asyncio.sleep(tokens / self.TOKENS_PER_S)
            return await super().embed(rows, interactive_rows)


@pytest.mark.parametrize("bulk_batch_ms", [250.0, 0.0])
def test_bulk_callers_take_turns_of_about_the_bulk_batch_time(tiny_spec, bulk_batch_ms):
    """Two bulk callers queued together: with turns (--bulk-batch-ms), the engine gets their rows
    in batches of about 250 ms of its measured time, in alternation; with 0, in batches of up to
    --max-batch-tokens (here one for both), which an engine runs whole, in the order given."""

    async def run():
        config = ServerConfig(replicas=1, max_batches_per_replica=2, bulk_batch_ms=bulk_batch_ms)
        backend = TokensAtARateBackend(tiny_spec)
        runtime = ModelRuntime(tiny_spec, _settings(config), ServerMetrics(), lambda _index: backend)
        await runtime.start()
        try:
            warm_up = [[101, 5] + [7] * 8 + [102]] * 250  # 2,750 tokens: over the speed's window
            await runtime.embed_token_ids(warm_up, BULK, None)
            speed = runtime.speed.tokens_per_s
            assert speed is not None and speed <= TokensAtARateBackend.TOKENS_PER_S  # a sleep only overshoots
            backend.batches.clear()
            a, b = ([[101, who] + [7] * 8 + [102]] * 200 for who in (200, 201))  # 2,200 tokens each
            await asyncio.gather(
                runtime.embed_token_ids(a, EmbedOptions(interactive=False, caller="a"), None),
                runtime.embed_token_ids(b, EmbedOptions(interactive=False, caller="b"), None),
            )
            order = [callers for callers, _ in backend.batches]
            firsts = {who: min(i for i, c in enumerate(order) if who in c) for who in (200, 201)}
            lasts = {who: max(i for i, c in enumerate(order) if who in c) for who in (200, 201)}
            # Turns of at most 250 ms at the measured speed, which is at most the engine's rate.
            turn_tokens = int(TokensAtARateBackend.TOKENS_PER_S * 0.25)
            assert turn_tokens > tiny_spec.max_tokens  # (not the smallest budget: the longest row)
            if bulk_batch_ms:
                assert max(tokens for _, tokens in backend.batches) <= turn_tokens
                assert runtime.queue.bulk_batch_tokens <= turn_tokens
                # Each caller's first batch ran before the other's last one: they took turns.
                assert firsts[201] < lasts[200] and firsts[200] < lasts[201], order
                assert len(order) >= 4
            else:  # both requests in one batch of up to --max-batch-tokens
                assert order == [{200, 201}] and runtime.queue.bulk_batch_tokens == config.max_batch_tokens
                assert backend.batches[0][1] > turn_tokens
        finally:
            await runtime.stop()

    asyncio.run(run())


@pytest.mark.parametrize("slo_s", [0.25, None])
def test_with_an_interactive_target_a_burst_of_bulk_requests_waits_before_the_tokenizer(tiny_spec, slo_s):
    """A busy engine, one bulk batch of 2 rows in flight: with an interactive target, of 4 bulk
    requests sent at once only those that the queue needs to keep the engine busy are tokenized;
    the rest wait before the tokenizer (server/scheduler/tokenizing_gate.py). Without a target
    every request is tokenized and queued at once."""

    async def run():
        config = ServerConfig(replicas=1, max_batches_per_replica=1, max_batch_rows=2, max_batch_delay_ms=DELAY_MS)
        backend = HoldsEveryBatchBackend(tiny_spec)
        metrics = ServerMetrics()
        runtime = ModelRuntime(tiny_spec, _settings(config, interactive_slo_s=slo_s), metrics, lambda _index: backend)
        await runtime.start()
        try:
            texts = [[f"request {i} row {j}" for j in range(2)] for i in range(5)]
            calls = [asyncio.ensure_future(runtime.embed_texts(texts[0], BULK, None))]
            async with asyncio.timeout(10):
                while not backend.held:  # the engine holds the first request's batch
                    await asyncio.sleep(0.01)
            calls += [asyncio.ensure_future(runtime.embed_texts(t, BULK, None)) for t in texts[1:]]
            async with asyncio.timeout(10):
                while runtime.queue.queued_rows + (runtime.tokenizing_gate.held_rows if slo_s else 0) < 8:
                    await asyncio.sleep(0.01)
            await settle()
            if slo_s:
                assert runtime.tokenizing_gate.waiting_requests == 3 and runtime.queue.queued_rows == 2
                # The gauge an operator scrapes reads the same rows held.
                held = metrics.registry.get_sample_value("embedtext_bulk_rows_held", {"model": tiny_spec.name})
                assert held == 6
            else:
                assert runtime.tokenizing_gate is None and runtime.queue.queued_rows == 8
            backend.release.set()
            results = await asyncio.wait_for(asyncio.gather(*calls), 10)
            assert [r.embeddings.shape[0] for r in results] == [2] * 5
        finally:
            await runtime.stop()

    asyncio.run(run())
