"""How much of an engine thread's CPU goes to the model's forward, and so how much to the path
around it (requests, scheduling, pooling, copies): the split the engine-overhead suite reports.

The clock wraps the calls that run the model: vLLM's runner's ``_model_forward`` on the
stepped path, the packed path's own call of the model, and the sentence-transformers Dense layers
after pooling where a model has them (server/engine/vllm_runner.py). On a CPU the
forward's time is the model's compute; on a GPU it is the host's side of it (the kernels' launches),
and waiting for the device falls outside it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ModelClock:
    """CPU seconds of the calling thread inside the wrapped forward, summed; ``take`` hands them on.

    >>> clock = ModelClock()
    >>> square = clock.timed(lambda x: sum(i * i for i in range(x)))
    >>> square(10**5) > 0 and clock.take() > 0.0, clock.take()
    (True, 0.0)
    """

    def __init__(self) -> None:
        self.seconds = 0.0  # written by the engine thread alone
        self._taken = 0.0

    def timed(self, forward: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(forward)
        def run(*args, **kwargs) -> T:
            start = time.thread_time()
            try:
                return forward(*args, **kwargs)
            finally:
                self.seconds += time.thread_time() - start

        return run

    def take(self) -> float:
        """The seconds since the last ``take`` (one reader: the worker's event loop)."""
        now = self.seconds
        spent, self._taken = now - self._taken, now
        return spent
