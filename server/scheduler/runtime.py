"""One served model's pipeline: tokenizer pool -> batch queue -> router -> replicas.

``ModelRuntime`` is what the servicer calls. It validates options, tokenizes off the event
loop, queues the rows, and runs a dispatcher that hands each closed batch to the
least-loaded replica. A batch whose replica dies is retried once on another replica
within the callers' deadline.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

import numpy as np

from embedtext.protocol import INTERACTIVE_MAX_ROWS
from embedtext.protocol.errors import (
    DeadlineExceededError,
    EmbedTextError,
    InternalError,
    InvalidInputError,
    UnavailableError,
)
from embedtext.server.config.resolve import ResolvedSettings
from embedtext.server.engine.base import Backend, EngineRequestError, ReplicaDeadError
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models.prompts import prompt_text
from embedtext.server.models.source import ModelSpec
from embedtext.server.pacing import EngineSpeed, PaceReport, bulk_turn_tokens
from embedtext.server.rows import TokenRows
from embedtext.server.scheduler.admission import Admission
from embedtext.server.scheduler.batching import BatchQueue
from embedtext.server.scheduler.gauges import watch_runtime
from embedtext.server.scheduler.jobs import Batch, EmbedJob, EmbedResult
from embedtext.server.scheduler.latency_window import LatencyWindow
from embedtext.server.scheduler.options import EmbedOptions, SplitOptions
from embedtext.server.scheduler.replicas import ReplicaSupervisor, reported_pace
from embedtext.server.scheduler.routing import LeastInFlightTokensPolicy
from embedtext.server.scheduler.tokenizing_gate import TokenizingGate
from embedtext.server.scheduler.vectors import shape_vectors
from embedtext.server.tokenization.pool import TokenizerPool
from embedtext.server.tokenization.splitting import TextChunks

log = logging.getLogger(__name__)

# How long a batch may wait for a healthy replica when its callers set no deadline.
_NO_DEADLINE_WAIT_S = 300.0
# Batches carrying interactive rows may run this many beyond --max-batches-per-replica: with one,
# a query waited in the queue for the query before it to be answered (two engine steps more), so
# queries coming faster than a step's length queued behind each other (the mixed suite's open-loop
# probes). Each is small (a query's rows), and the engine runs all it holds in its next step.
INTERACTIVE_EXTRA_SLOTS = 8


def _class_name(interactive: bool) -> str:
    return "interactive" if interactive else "bulk"


class ModelRuntime:
    def __init__(
        self,
        spec: ModelSpec,
        settings: ResolvedSettings,
        metrics: ServerMetrics,
        backend_factory: Callable[[int], Backend],
    ) -> None:
        config = settings.config
        self.spec = spec
        self.settings = settings  # what Info reports of the engines: dtype, loop, eager, threads
        self.config = config
        self.metrics = metrics
        self.tokenizers = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens, threads=config.tokenizer_threads)
        log.info("model %s: %s", spec.name, self.tokenizers.path)
        self.queue = BatchQueue(
            max_batch_tokens=config.max_batch_tokens,
            max_batch_rows=config.max_batch_rows,
            max_batch_delay_s=config.max_batch_delay_ms / 1000.0,
            max_queued_rows=config.max_queued_rows,
            # With bulk turns, a bulk batch is a turn of engine time, up to max_batch_rows rows.
            max_bulk_batch_tokens=config.max_batch_rows * spec.max_tokens if config.bulk_batch_ms else None,
        )
        self.queue.interactive_gather_s = settings.interactive_gather_s
        self.speed = EngineSpeed()
        self.model_seconds = 0.0  # the engines' CPU in the model's forward, for Info
        self.interactive_slo_s = settings.interactive_slo_s
        self.interactive_latency = LatencyWindow()  # the last interactive requests, for Info
        # Bulk callers take turns on the engines of about this long each (server/pacing.py); 0: off.
        self.bulk_turn_s = config.bulk_batch_ms / 1000.0
        self._pace()
        self.router = LeastInFlightTokensPolicy.of_count(
            config.replicas,
            max_batches_per_replica=config.max_batches_per_replica,
            interactive_replicas=1 if settings.interactive_replica else 0,
        )
        self.supervisor = ReplicaSupervisor(
            spec.name, self.router, backend_factory, metrics=metrics, rest_after_ready=settings.rest_after_ready
        )
        # With an interactive target, bulk requests are tokenized as the engines drain the queue
        # (server/scheduler/tokenizing_gate.py): enough queued for every engine's batches in flight.
        # A burst of bulk calls then does not stall queries, at no cost to a scan (bench/results/pacing.json).
        self.tokenizing_gate = None
        if self.interactive_slo_s:
            ahead = config.max_batch_rows * config.max_batches_per_replica * config.replicas
            self.tokenizing_gate = TokenizingGate(self.queue, ahead_rows=ahead)
            self.queue.on_rows_left = self.tokenizing_gate.release
        self.started = False
        # Deadlines are estimated on the engines bulk rows run on (an interactive replica adds none).
        self.admission = Admission(spec, config, self.queue, self.speed, metrics, healthy=self.router.healthy_serving)
        if self.tokenizing_gate is not None:
            self.tokenizing_gate.out_of_reach = functools.partial(
                self.admission.check_deadline_before_tokenizing, waited=True
            )
        self._tasks: set[asyncio.Task] = set()
        self._dispatcher: asyncio.Task | None = None
        watch_runtime(self, metrics)

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.supervisor.start()
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"dispatch-{self.spec.name}")
        self._dispatcher.add_done_callback(self._dispatcher_done)
        self.started = True

    def _dispatcher_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.critical("dispatcher of %s crashed", self.spec.name, exc_info=task.exception())
            self.queue.fail_all(InternalError(f"the dispatcher of model {self.spec.name} crashed"))

    async def stop(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.queue.fail_all(UnavailableError("the server is shutting down"))
        await self.supervisor.stop()
        self.tokenizers.close()

    def engine_paces(self) -> list[PaceReport]:
        """The step budgets the healthy replicas' engines reported (stepped engines pace themselves)."""
        return [pace for replica in self.supervisor.replicas if (pace := reported_pace(replica))]

    @property
    def engine_loop(self) -> str:
        """How the serving replicas' engines step: "packed", "stepped", "packed,stepped" when they
        differ (a packed engine whose start-up check failed steps vLLM's requests), "" for the null
        engine; the setting while none serves yet."""
        loops = {r.backend.loop for r in self.supervisor.replicas if r.healthy and r.backend is not None}
        return ",".join(sorted(loops)) if loops else self.settings.engine_loop

    @property
    def engine_tokens_per_s(self) -> float:
        """One engine's speed while busy (0.0: not measured yet): stepped engines measure their own."""
        if not self.settings.stepped:
            return self.speed.tokens_per_s or 0.0
        measured = [pace.tokens_per_s for pace in self.engine_paces() if pace.tokens_per_s]
        return sum(measured) / len(measured) if measured else 0.0

    @property
    def interactive_slo_missed(self) -> bool:
        """The engines are too slow to hold the interactive target even with batches or steps of one row."""
        return any(not pace.holds_target for pace in self.engine_paces())

    @property
    def ready(self) -> bool:
        return self.started and self.supervisor.healthy_count > 0

    # --- requests ----------------------------------------------------------------------

    async def embed_texts(self, texts: list[str], options: EmbedOptions, deadline: float | None) -> EmbedResult:
        arrived = time.monotonic()
        self.admission.check_request(len(texts), options, started=self.started)
        texts = self._prompted(texts, options)
        held = self.tokenizing_gate.held_rows if self.tokenizing_gate is not None else 0
        self.admission.check_room(len(texts), held)  # refuse before spending tokenizer time
        interactive = self._interactive(len(texts), options)
        gate = None if interactive else self.tokenizing_gate  # queries are never held back
        if not interactive:
            ahead = gate.rows_ahead(options.caller) if gate is not None else 0
            self.admission.check_deadline_before_tokenizing(len(texts), ahead, options.caller, deadline)
        if gate is not None:
            await gate.enter(len(texts), options.caller, deadline)
        try:
            tokenizing = time.monotonic()
            rows = await self.tokenizers.tokenize(texts, truncate=options.truncate, interactive=interactive)
            tokenize_s = time.monotonic() - tokenizing
            job = self._submit(rows, options, deadline, interactive)
        finally:
            if gate is not None:
                gate.leave(len(texts))  # its rows are queued (or refused): counted there now
        return await self._finish(job, options, arrived, tokenize_s)

    def _prompt(self, options: EmbedOptions | SplitOptions) -> str:
        """What goes before each text: the request's prompt, or the model's default."""
        spec = self.spec
        prompt = prompt_text(options.prompt_name, spec.prompts, spec.default_prompt_name, options.prompt, spec.name)
        if prompt and not spec.pooling_includes_prompt:
            raise InvalidInputError(
                f"model {spec.name} pools without its prompt's tokens (include_prompt false in its Pooling config), "
                "which embedtext does not do: send prompt='' to embed the texts as they are"
            )
        return prompt

    def _prompted(self, texts: list[str], options: EmbedOptions) -> list[str]:
        """The texts with the request's prompt (or the model's default) before each."""
        prompt = self._prompt(options)
        return [prompt + text for text in texts] if prompt else texts

    async def split_texts(self, texts: list[str], options: SplitOptions) -> tuple[TextChunks, int]:
        """The texts' chunks by the model's tokens, and the chunk size used: a chunk's text, with the
        model's special tokens and the prompt it will be embedded with, fits the model's max tokens."""
        self.admission.check_request(len(texts), EmbedOptions(), started=True)
        framing = self.tokenizers.special_tokens + self.tokenizers.prompt_tokens(self._prompt(options))
        room = self.spec.max_tokens - framing
        if room < 1:
            raise InvalidInputError(
                f"model {self.spec.name} takes {self.spec.max_tokens} tokens, and its special tokens and the "
                f"prompt take {framing}: no room is left for a chunk's text (use a shorter prompt)"
            )
        size = options.max_tokens or room
        if size > room:
            raise InvalidInputError(
                f"max_tokens {size} is over what model {self.spec.name} takes: {self.spec.max_tokens} tokens, "
                f"of which its special tokens and the prompt take {framing}, leave {room} for a chunk's text"
            )
        if options.overlap >= size:
            raise InvalidInputError(f"overlap {options.overlap} must be less than the chunk size, {size} tokens")
        return await self.tokenizers.split(texts, size, options.overlap), size

    async def embed_token_ids(
        self, rows: TokenRows | list[list[int]], options: EmbedOptions, deadline: float | None
    ) -> EmbedResult:
        arrived = time.monotonic()
        self.admission.check_request(len(rows), options, started=self.started)
        if options.prompt_name or options.prompt:
            raise InvalidInputError("a prompt applies to texts; token ids are embedded as they are (put it in the ids)")
        rows = self.tokenizers.check_token_ids(rows, truncate=options.truncate)
        job = self._submit(rows, options, deadline, self._interactive(len(rows), options))
        return await self._finish(job, options, arrived)

    def _interactive(self, rows: int, options: EmbedOptions) -> bool:
        """The request's latency class: as it says, or by size (at most INTERACTIVE_MAX_ROWS rows)."""
        return rows <= INTERACTIVE_MAX_ROWS if options.interactive is None else options.interactive

    def _submit(self, rows: TokenRows, options: EmbedOptions, deadline: float | None, interactive: bool) -> EmbedJob:
        """Queue a request's rows in their latency class, or refuse them (deadline, room) before they are queued."""
        job = EmbedJob(
            rows=rows,
            future=asyncio.get_running_loop().create_future(),
            interactive=interactive,
            caller=options.caller,
            deadline=deadline,
        )
        self.admission.check_deadline(job.total_tokens, interactive, deadline, options.caller)
        self.admission.check_room(len(rows))
        self.queue.submit(job)
        return job

    async def _finish(
        self, job: EmbedJob, options: EmbedOptions, arrived: float, tokenize_s: float = 0.0
    ) -> EmbedResult:
        """Wait for a queued job's vectors and shape them as the request asked (``arrived``: when
        its request came, before tokenizing)."""
        rows = job.rows
        normalize = self.spec.normalize if options.normalize is None else options.normalize
        try:
            pooled = await job.future
        finally:
            if not job.future.done():
                job.future.cancel()  # the caller went away: its queued rows are skipped
        embeddings = shape_vectors(pooled, options.dimensions, normalize)
        started = job.started_at or time.monotonic()
        counts = rows.lengths.astype(np.int32)
        latency_class = _class_name(job.interactive)
        self.metrics.rows.labels(self.spec.name).inc(len(rows))
        self.metrics.tokens.labels(self.spec.name).inc(int(counts.sum()))
        self.metrics.class_rows.labels(self.spec.name, latency_class).inc(len(rows))
        self.metrics.class_queue_time.labels(self.spec.name, latency_class).observe(max(0.0, started - job.enqueued_at))
        now = time.monotonic()
        self.metrics.class_latency.labels(self.spec.name, latency_class).observe(now - job.enqueued_at)
        if job.interactive:
            self.interactive_latency.add(now - arrived)
        return EmbedResult(
            model=self.spec.name,
            embeddings=embeddings,
            token_counts=counts,
            queue_s=max(0.0, started - job.enqueued_at),
            inference_s=job.inference_s,
            tokenize_s=tokenize_s,
        )

    # --- dispatch ----------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        policy = self.router

        # While a replica idles and no other request is being tokenized (whose rows would join
        # the batch), waiting for a fuller batch only adds latency; rows that arrive while every
        # replica is busy pile up and make the next batch anyway. The tokenizer check keeps a
        # burst from being cut into a one-row batch and the rest (bench/results/full-evidence.json).
        def engine_idle() -> bool:
            return policy.any_idle and not self.tokenizers.busy

        def room(interactive: bool) -> bool:
            # Rows pile up in the queue (bigger batches) while every replica is busy; interactive
            # rows may take one slot beyond the bound, so they never wait behind bulk batches.
            return policy.has_room(INTERACTIVE_EXTRA_SLOTS if interactive else 0, interactive)

        while True:
            # Bulk batches in flight on any engine (not queries' own): queries gather only then.
            batch = await self.queue.next_batch(engine_idle, room, lambda: policy.bulk_in_flight)
            task = asyncio.create_task(self._run_batch(batch))
            self._tasks.add(task)
            task.add_done_callback(self._batch_done)
            # Let the task take its lease before we look for room again.
            await asyncio.sleep(0)

    def _batch_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a batch of %s failed unexpectedly", self.spec.name, exc_info=task.exception())

    async def _run_batch(self, batch: Batch) -> None:
        try:
            await self._run_batch_with_retry(batch)
        except asyncio.CancelledError:
            batch.fail(UnavailableError("the server is shutting down"))
            raise
        except EmbedTextError as exc:
            batch.fail(exc)
        except Exception as exc:
            log.exception("batch of %s failed", self.spec.name)
            batch.fail(InternalError(f"model {self.spec.name} failed: {type(exc).__name__}: {exc}"))
        finally:
            self.queue.wake()  # its replica may be idle now: rows waiting for a fuller batch can go

    async def _run_batch_with_retry(self, batch: Batch) -> None:
        policy = self.router
        tried = []
        for attempt in range(2):
            if not batch.live:
                return
            deadline = batch.deadline
            wait = (deadline - time.monotonic()) if deadline is not None else _NO_DEADLINE_WAIT_S
            if wait <= 0:
                raise DeadlineExceededError("the deadline passed while the rows waited for a replica")
            try:
                async with asyncio.timeout(wait):
                    extra = INTERACTIVE_EXTRA_SLOTS if batch.interactive_rows else 0
                    async with policy.lease(
                        batch.tokens, avoid=tried, extra=extra, interactive=bool(batch.interactive_rows)
                    ) as replica:
                        await self._run_on(replica, batch)
                return
            except TimeoutError:
                if deadline is None:
                    raise UnavailableError(
                        f"no replica of model {self.spec.name} became available in {_NO_DEADLINE_WAIT_S:.0f}s"
                    ) from None
                raise DeadlineExceededError(
                    f"the deadline passed before a replica of {self.spec.name} finished the batch"
                ) from None
            except ReplicaDeadError as exc:
                tried.append(replica)
                self.supervisor.report_dead(replica, str(exc))
                if attempt == 0:
                    self.metrics.retries.labels(self.spec.name).inc()
                    log.warning("retrying a batch of %d rows on another replica", batch.row_count)
                    continue
                raise UnavailableError(
                    f"replicas of model {self.spec.name} failed twice on this batch ({exc}); retry later"
                ) from None

    def _pace(self) -> None:
        """Size the next bulk batches from the engines' measured speed: each bulk caller's turn (the
        engines size their own steps to the interactive target)."""
        budget = self.queue.max_bulk_batch_tokens
        if self.bulk_turn_s:
            budget = bulk_turn_tokens(
                self.speed.tokens_per_s,
                turn_s=self.bulk_turn_s,
                max_batch_tokens=budget,
                min_batch_tokens=self.spec.max_tokens,
            )
        self.queue.bulk_batch_tokens = budget

    def _count_model_time(self, replica) -> None:
        """The model's time the replica reported with the batch's vectors (and any before, of
        batches that failed): counted before the batch's callers have their vectors."""
        spent = replica.backend.take_model_seconds()
        if spent:
            self.model_seconds += spent
            self.metrics.replica_model_seconds.labels(self.spec.name, str(replica.index)).inc(spent)

    async def _run_on(self, replica, batch: Batch) -> None:
        now = time.monotonic()
        for part in batch.parts:
            if part.job.started_at is None:
                part.job.started_at = now
        self.metrics.queue_time.labels(self.spec.name).observe(now - batch.oldest_enqueued_at)
        self.metrics.batch_rows.labels(self.spec.name).observe(batch.row_count)
        self.metrics.batch_tokens.labels(self.spec.name).observe(batch.tokens)
        self.metrics.replica_batches.labels(self.spec.name, str(replica.index)).inc()
        # Stop the engine's work as soon as nobody waits for any row of the batch
        # (callers cancelled or past their deadline): cancelling vLLM's encode aborts it.
        work = asyncio.ensure_future(replica.backend.embed(batch.rows, batch.interactive_rows))
        # Only batches with bulk rows measure the engines: a batch of a few query rows is mostly
        # fixed work, and pacing would size the next bulk batches from that (EngineSpeed).
        measured = batch.interactive_rows < batch.row_count
        if measured:
            self.speed.started(replica.index)

        def abandon_if_unwanted(_future: asyncio.Future) -> None:
            if not batch.live and not work.done():
                work.cancel()

        for part in batch.parts:
            part.job.future.add_done_callback(abandon_if_unwanted)
        done_tokens = 0  # what the engine computed, for its measured speed
        try:
            pooled = await work
            done_tokens = batch.tokens
            self._count_model_time(replica)
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                work.cancel()
                raise
            self.metrics.failures.labels(self.spec.name, "abandoned").inc()
            return
        except EngineRequestError as exc:
            raise InvalidInputError(f"the engine refused the batch: {exc}") from None
        finally:
            for part in batch.parts:
                part.job.future.remove_done_callback(abandon_if_unwanted)
            if measured:
                self.speed.finished(replica.index, done_tokens)
        elapsed = time.monotonic() - now
        self._pace()
        self.metrics.inference_time.labels(self.spec.name).observe(elapsed)
        for part in batch.parts:
            part.job.inference_s += elapsed
        batch.deliver(pooled)
