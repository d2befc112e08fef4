"""What a model's runtime refuses before it queues a request, and when it tells the caller to come back.

A request is refused at once, with a clear message, when it is malformed or asks for what the model
lacks, while the model is starting, when the queue has no room (with a retry hint from the engines'
measured speed, so clients back off rather than fail), and when the engines cannot finish it
before its deadline (a bulk request: its fair share of the queue, beside the other bulk callers).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from embedtext.protocol.errors import DeadlineExceededError, InvalidInputError, OverloadedError, UnavailableError
from embedtext.server.config.settings import ServerConfig
from embedtext.server.metrics import ServerMetrics
from embedtext.server.models.source import ModelSpec
from embedtext.server.pacing import EngineSpeed
from embedtext.server.scheduler.batching import BatchQueue
from embedtext.server.scheduler.options import EmbedOptions

# A refused caller is told to come back after this long at least, at most, and while the
# engines' speed is not measured yet.
MIN_RETRY_S, MAX_RETRY_S, UNKNOWN_RETRY_S = 0.05, 5.0, 0.2
# A request is refused at once when even at this many times the engines' measured speed it
# would not finish before its deadline (the speed is an average; a refusal must be sure).
DEADLINE_REFUSAL_MARGIN = 1.5


class Admission:
    def __init__(
        self,
        spec: ModelSpec,
        config: ServerConfig,
        queue: BatchQueue,
        speed: EngineSpeed,
        metrics: ServerMetrics,
        *,
        healthy: Callable[[], int],
    ) -> None:
        self.spec = spec
        self.config = config
        self.queue = queue
        self.speed = speed
        self.metrics = metrics
        self.healthy = healthy  # replicas serving now

    def check_request(self, count: int, options: EmbedOptions, *, started: bool) -> None:
        if count == 0:
            raise InvalidInputError("the request holds no rows; send at least one text")
        if count > self.config.max_request_rows:
            raise InvalidInputError(
                f"the request holds {count} rows; the server takes at most {self.config.max_request_rows} "
                "per request (the client splits larger inputs for you)"
            )
        if options.dimensions < 0 or options.dimensions > self.spec.dim:
            raise InvalidInputError(
                f"dimensions={options.dimensions} is not available: model {self.spec.name} "
                f"has {self.spec.dim} dimensions (ask for 1..{self.spec.dim}, or 0 for all)"
            )
        if not started:
            raise UnavailableError(f"model {self.spec.name} is still starting; retry in a moment")

    def check_room(self, rows: int, held: int = 0) -> None:
        """Refuse what the queue cannot take beside ``held`` rows admitted ahead of it and not
        queued yet, saying when it expects room (the clients back off)."""
        try:
            self.queue.check_room(rows, held)
        except OverloadedError as exc:
            excess_rows = self.queue.queued_rows + held + rows - self.queue.max_queued_rows
            seconds = self.speed.seconds_for(self.tokens_like_queued(excess_rows), self.healthy())
            exc.retry_after_s = UNKNOWN_RETRY_S if seconds is None else min(MAX_RETRY_S, max(MIN_RETRY_S, seconds))
            self.metrics.refusals.labels(self.spec.name, "queue_full").inc()
            raise

    def tokens_like_queued(self, rows: int) -> int:
        """About how many tokens ``rows`` texts hold, as many a row as the queued ones (0 with none queued)."""
        return rows * self.queue.queued_tokens // max(self.queue.queued_rows, 1)

    def check_deadline(self, tokens: int, interactive: bool, deadline: float | None, caller: str = "") -> None:
        """Refuse at once a request of ``tokens`` (what its rows cost a batch: EmbedJob.total_tokens) that
        the engines cannot finish before its deadline, instead of failing it when the deadline
        passes. An interactive request waits for its own tokens; a bulk one for its share of the
        queue beside the other bulk callers' (in one FIFO queue, for every queued token)."""
        if deadline is None:
            return
        self._refuse_if_late(tokens, self.queue.tokens_before_done(tokens, caller, interactive=interactive), deadline)

    def check_deadline_before_tokenizing(
        self, rows: int, held_ahead_rows: int, caller: str, deadline: float | None, *, waited: bool = False
    ) -> None:
        """The same for a bulk request not tokenized yet, which may wait before its tokenizer
        (server/scheduler/tokenizing_gate.py) behind ``held_ahead_rows``: its tokens, and theirs, estimated
        from the queued rows' tokens a row; ``waited``: it has been waiting there."""
        if deadline is None:
            return
        tokens = self.tokens_like_queued(rows)
        if tokens:  # else nothing is queued: no estimate, and nothing ahead of it
            total = self.queue.tokens_before_done(tokens, caller) + self.tokens_like_queued(held_ahead_rows)
            when = "refused while it waited to be tokenized" if waited else "refused at once"
            self._refuse_if_late(tokens, total, deadline, estimated=True, when=when)

    def _refuse_if_late(
        self, tokens: int, total: int, deadline: float, estimated: bool = False, when: str = "refused at once"
    ) -> None:
        """Raise DeadlineExceededError if ``total`` tokens (``tokens`` of them the request's own)
        take the engines more than the margin times what the deadline leaves."""
        need = self.speed.seconds_for(total, self.healthy())
        left = deadline - time.monotonic()
        if need is None or need <= left * DEADLINE_REFUSAL_MARGIN:
            return
        self.metrics.refusals.labels(self.spec.name, "deadline").inc()
        about = "about " if estimated else ""
        ahead = f", and {about}{total - tokens} tokens of other work before or beside it" if total > tokens else ""
        raise DeadlineExceededError(
            f"{when}: the request needs about {need:.1f}s of engine time ({about}{tokens} tokens{ahead}, at "
            f"about {self.speed.tokens_per_s * max(self.healthy(), 1):.0f} tokens/s) but its "
            f"deadline leaves {max(left, 0):.1f}s; raise the timeout or send fewer rows per call"
        )
