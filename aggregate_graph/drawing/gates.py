"""A run's limit on candidate requests in flight, where each request is its own LangGraph task (a checkpointed run).

LangGraph caps a run's tasks with the config's `max_concurrency`, but its blocking `stream` (`custom` and `messages`
modes) runs a waiter on one of those threads: the cap would leave one request fewer, and a cap of 1 none at all (the
stream never ends). So the graph gives LangGraph's cap one thread more (`LANGGRAPH_CAP_EXTRA`) and each checkpointed
request waits for its run's gate here instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

LANGGRAPH_CAP_EXTRA = 1  # a thread for the waiter of LangGraph's blocking stream


class Gates:
    """The gate of each run whose requests are under way, by the run's key: a blocking run's threads share a
    semaphore, an async run's tasks an asyncio one (on the run's event loop).

    Args:
        keep: how many runs' gates are kept; the oldest give way (runs interrupted or failed never aggregate).
    """

    def __init__(self, keep: int = 4096) -> None:
        self._keep = keep
        self._gates: dict[tuple[str, int | None], threading.Semaphore | asyncio.Semaphore] = {}
        self._lock = threading.Lock()

    def _of(self, key: tuple[str, int | None], limit: int, make: type) -> threading.Semaphore | asyncio.Semaphore:
        with self._lock:
            if (gate := self._gates.get(key)) is None:
                while len(self._gates) >= self._keep:
                    del self._gates[next(iter(self._gates))]
                gate = self._gates[key] = make(limit)
        return gate

    @contextlib.contextmanager
    def held(self, run_key: str, limit: int) -> Iterator[None]:
        """Holds one of the run's `limit` places for a blocking request."""
        with self._of((run_key, None), limit, threading.Semaphore):
            yield

    @contextlib.asynccontextmanager
    async def aheld(self, run_key: str, limit: int) -> AsyncIterator[None]:
        """Holds one of the run's `limit` places for an async request (a run resumed on another event loop gets
        another gate)."""
        async with self._of((run_key, id(asyncio.get_running_loop())), limit, asyncio.Semaphore):
            yield

    def forget(self, run_key: str) -> None:
        """Drop the gates of a run that aggregates."""
        with self._lock:
            for key in [key for key in self._gates if key[0] == run_key]:
                del self._gates[key]
