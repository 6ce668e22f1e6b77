"""A run's limit on candidate requests in flight (`max_concurrency`): the graph's own runs (`AggregateGraph`), and
the gate each request waits for where it is its own LangGraph task (a checkpointed run); and the mark of a run
nobody watches as it goes (`UNWATCHED_KEY`).

LangGraph caps a run's tasks with the config's `max_concurrency`, but its blocking `stream` (`custom` and `messages`
modes) runs a waiter on one of those threads: the cap would leave one request fewer, and a cap of 1 none at all (the
stream never ends). So each run's cap gets one thread more (`LANGGRAPH_CAP_EXTRA`), the run's own limit travels in
its config (`REQUEST_LIMIT_KEY`), and the requests keep to it: a sampler's share of a wave drawn in one task, or
each checkpointed request waiting for its run's gate here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.graph.state import CompiledStateGraph

from aggregate_graph.drawing.per_run import PerRun

LANGGRAPH_CAP_EXTRA = 1  # a thread for the waiter of LangGraph's blocking stream
REQUEST_LIMIT_KEY = "__aggregate_graph_request_limit"  # `configurable`: the run's limit on requests in flight
# `configurable`: True in a run nobody watches as it goes (`unwatched`), so that a candidate's answer is not read as
# it lands only for the progress event (~30 µs a candidate: at n=64, about a fifth of the graph's own time)
UNWATCHED_KEY = "__aggregate_graph_unwatched"


class AggregateGraph(CompiledStateGraph):
    """The compiled aggregation graph (`build_aggregate_graph`): a LangGraph graph whose runs keep their candidate
    requests to `max_concurrency` — the graph's own (its default config), or a run config's — with one more thread
    for LangGraph's blocking stream. Every run goes through `stream` or `astream` (`invoke`, `batch`, a parent's
    call, `astream_events`); an `invoke` nobody watches as it goes is marked so (`unwatched`)."""

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return super().invoke(input, self._watched_or_not(config, kwargs), **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await super().ainvoke(input, self._watched_or_not(config, kwargs), **kwargs)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        return super().stream(input, self._run_config(config), **kwargs)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        return super().astream(input, self._run_config(config), **kwargs)

    def copy(self, update: dict[str, Any] | None = None) -> AggregateGraph:
        copied = super().copy(update)
        # LangGraph's copy (`with_config`) drops the msgpack allowlist a strict-mode compile derived (langgraph 1.2)
        copied._serde_allowlist = self._serde_allowlist
        return copied

    def _watched_or_not(self, config: RunnableConfig | None, kwargs: dict[str, Any]) -> RunnableConfig:
        """`config`, marked for a run nobody watches as it goes (`unwatched`)."""
        config = config or {}
        if not unwatched(self, config, kwargs):
            return config
        return {**config, "configurable": {**(config.get("configurable") or {}), UNWATCHED_KEY: True}}

    def _run_config(self, config: RunnableConfig | None) -> RunnableConfig:
        """`config` with the run's limit on requests in flight, and LangGraph's cap on tasks one above it."""
        config = config or {}
        configurable = config.get("configurable") or {}
        cap, inherited = config.get("max_concurrency"), configurable.get(REQUEST_LIMIT_KEY)
        if cap is None:
            limit = (self.config or {})["max_concurrency"]
        elif inherited is not None and cap == inherited + LANGGRAPH_CAP_EXTRA:  # a parent aggregate graph's run
            limit = inherited
        else:
            limit = cap
        configurable = {**configurable, REQUEST_LIMIT_KEY: limit}
        if _within_another_run(config):  # a mark it carries is its parent's: this run may be watched through it
            configurable.pop(UNWATCHED_KEY, None)
        return {**config, "max_concurrency": limit + LANGGRAPH_CAP_EXTRA, "configurable": configurable}


def unwatched(graph: CompiledStateGraph, config: RunnableConfig, kwargs: dict[str, Any]) -> bool:
    """Whether nobody can watch an `invoke` run of `graph` (called with `kwargs`) as it goes: it returns the final
    state alone (`stream_mode` "values") and prints nothing (`print_mode`), no checkpointer saves its states, and it
    runs within no other run — a parent graph's node, a chat model's call — whose own stream may carry them."""
    quiet = kwargs.get("stream_mode", "values") == "values" and not kwargs.get("print_mode")
    return quiet and not graph.checkpointer and not _within_another_run(config)


def _within_another_run(config: RunnableConfig) -> bool:
    # a parent's context (LangChain's, as LangGraph's nodes run in it), or its config passed on outside it: LangGraph's
    # keys of a running task (`__pregel_…`)
    within = var_child_runnable_config.get() is not None
    return within or any(key.startswith("__pregel_") for key in config.get("configurable") or {})


class Gates:
    """The places of each run whose requests are under way (`PerRun`): a blocking run's threads share a semaphore,
    an async run's tasks an asyncio one (on the run's event loop)."""

    def __init__(self) -> None:
        self._gates: PerRun[threading.Semaphore | asyncio.Semaphore] = PerRun()

    @contextlib.contextmanager
    def held(self, run_key: str, limit: int) -> Iterator[None]:
        """Holds one of the run's `limit` places for a blocking request."""
        with self._gates.of(f"{run_key}:threads", lambda: threading.Semaphore(limit)):
            yield

    @contextlib.asynccontextmanager
    async def aheld(self, run_key: str, limit: int) -> AsyncIterator[None]:
        """Holds one of the run's `limit` places for an async request (a run resumed on another event loop gets
        another gate)."""
        loop = id(asyncio.get_running_loop())
        async with self._gates.of(f"{run_key}:loop {loop}", lambda: asyncio.Semaphore(limit)):
            yield

    def forget(self, run_key: str) -> None:
        """Drop the gates of a run that aggregates."""
        self._gates.forget(run_key)
