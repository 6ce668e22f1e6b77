"""Settling early: a wave of candidate draws stops as soon as the candidates still out can no longer change the
decision (`Aggregator.settled`), and the requests still out are cancelled.

The draws of one wave — one task per sampler, or one per candidate under a checkpointer — share one `Settling`,
which sees every candidate as it lands. Once the decision is settled, async requests in flight are cancelled (their
HTTP connections close, so the upstream stops generating) but those whose reply has already reached the client (read
within a few turns of the event loop: `READ_TURNS`), and requests not yet sent are never sent. A blocking
(sync) draw cannot cancel a request in flight: it waits for those and skips the ones not yet sent, or, with
`stream_candidates`, streams each request — through an `openai` client (`StreamsChoices`) or the chat model's own
`stream` (`streamed_reply`) — and closes it at its next event.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from aggregate_graph.drawing.per_run import PerRun
from aggregate_graph.sample_set import Candidate

STOP_CONFIG_KEY = "aggregate_graph_stop"  # `configurable` key: a blocking run's stop signal (`stopping_stream`)

# (candidates landed, how many are still out) -> settled? The candidates are the check's own copies, made once as
# each lands and kept from one check to the next: it may read answers into them, as no one else reads them.
IsSettled = Callable[[list[Candidate], int], bool]


class Settling:
    """One wave's candidates as they land, across the draw tasks that share it.

    Args:
        n: the candidates the run asks for; those not landed count as outstanding.
        is_settled: whether the landed candidates' decision is settled with that many still out.
    """

    def __init__(self, n: int, is_settled: IsSettled, landed: Iterable[Candidate] = ()) -> None:
        self.n, self._is_settled = n, is_settled
        self._landed: dict[int, Candidate] = {c.index: c for c in landed}  # an earlier wave's, then this one's
        self._checked = {i: c.model_copy() for i, c in self._landed.items()}  # what `is_settled` is given
        self._stamps = {i: c.landed_at for i, c in self._landed.items() if c.landed_at is not None}
        self._latest = max(self._stamps.values(), default=0.0)
        self._tasks: set[asyncio.Task] = set()
        self._lock = threading.Lock()  # sync draws land from worker threads
        self._settled = threading.Event()  # what a blocking retry's wait watches (`wait`)
        self._cancelling: asyncio.Task | None = None  # held: the loop keeps only a weak reference to a task
        self.settled = False

    def land(self, candidates: Iterable[Candidate]) -> None:
        """Take candidates that landed, in landing order; once that settles the decision, cancel the async
        requests still out."""
        with self._lock:
            candidates = list(candidates)
            for c in candidates:
                # the draw's time, never before the latest landed (a blocking run's worker threads stamp before they
                # land, a clock can step back): a candidate still out lands after every one landed, as a settled
                # tie needs (`wins_every_tie`)
                if c.index not in self._stamps:
                    stamped = c.landed_at if c.landed_at is not None else time.time()
                    self._latest = self._stamps[c.index] = max(stamped, self._latest)
                c.landed_at = self._stamps[c.index]
            if self.settled:
                return
            self._landed.update({c.index: c for c in candidates})
            self._checked.update({c.index: c.model_copy() for c in candidates})
            if not self._is_settled(list(self._checked.values()), self.n - len(self._landed)):
                return
            self.settled, tasks = True, [t for t in self._tasks if not t.done() and t is not _running_task()]
            self._settled.set()
        if tasks:  # not the task landing: cancelled, it would drop the result it is returning
            # async draws land on their tasks' loop, so the cancelling task starts there
            self._cancelling = tasks[0].get_loop().create_task(_cancel_once_read(tasks))

    def wait(self, seconds: float) -> bool:
        """Waits up to `seconds` for the decision to settle: whether it is settled."""
        return self._settled.wait(seconds)

    def stamp(self, candidates: Iterable[Candidate]) -> None:
        """Give candidates rebuilt from a reply (a streamed request's choices, once it ends) the times their
        indices landed at."""
        with self._lock:
            for c in candidates:
                c.landed_at = self._stamps.get(c.index, c.landed_at)

    def attach(self, tasks: Iterable[asyncio.Task]) -> None:
        """Async requests to cancel once settled (at once, when it already is)."""
        with self._lock:
            tasks = list(tasks)
            self._tasks.update(tasks)
            settled = self.settled
        if settled:
            for task in tasks:
                task.cancel()

    def detach(self, tasks: Iterable[asyncio.Task]) -> None:
        with self._lock:
            self._tasks.difference_update(tasks)

    def landed(self, indices: Iterable[int]) -> list[Candidate]:
        """The candidates landed at `indices`: what a draw returns, also for a task cancelled as it landed."""
        with self._lock:
            return [self._landed[i] for i in indices if i in self._landed]


def stopping_stream(
    graph: CompiledStateGraph, input: Any, config: RunnableConfig | None, **kwargs: Any
) -> Iterator[Any]:
    """`graph.stream(input, config, **kwargs)`, which, closed before its end (its reader stopped, or raised), first
    tells the run's draws to stop: requests not yet sent are not sent, streamed ones (`stream_candidates`) close at
    their next event and a retry's pause ends, as once the vote settles (`Drawer.not_needed`). Closing a blocking
    LangGraph stream waits for the nodes under way, so without this it would wait for every candidate."""
    stop = threading.Event()
    config = config or {}
    events = graph.stream(
        input, {**config, "configurable": {**config.get("configurable", {}), STOP_CONFIG_KEY: stop}}, **kwargs
    )
    with _stopped_by_interrupt(stop):
        try:
            for event in events:  # noqa: UP028 - `yield from` closes `events` before `finally` could stop the draws
                yield event
        finally:
            stop.set()
            events.close()


@contextlib.contextmanager
def _stopped_by_interrupt(stop: threading.Event) -> Iterator[None]:
    """Within the block, Ctrl-C (SIGINT) sets `stop` before it interrupts: it lands in LangGraph's own wait on the
    main thread, which waits for the nodes under way before the interrupt could reach `stopping_stream`. Only on
    the main thread, over a handler that raises (Python's own, or the program's, which is called after)."""
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if not callable(previous):
        yield
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        stop.set()
        previous(signum, frame)

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is interrupted:  # unless the program set its own meanwhile
            signal.signal(signal.SIGINT, previous)


class Settlings:
    """The `Settling` of each wave whose draws are under way, by the wave's key (`Draw.settle_key`: the run's key
    and the wave), shared by the draw tasks of a graph's runs until the run aggregates (`PerRun`).

    Args:
        n: the candidates a run asks for.
        check_for: the settle check of a wave's question (`IsSettled`), made once per wave: it may keep what it
            learns from one check to the next.
    """

    def __init__(self, n: int, check_for: Callable[[str], IsSettled]) -> None:
        self.n, self._check_for = n, check_for
        self._waves: PerRun[Settling] = PerRun()

    def of(self, key: str, question: str, landed: Iterable[Candidate] = ()) -> Settling:
        """The wave's `Settling` (made by the first that asks, with the candidates earlier waves `landed`)."""
        return self._waves.of(key, lambda: Settling(self.n, self._check_for(question), landed))

    def get(self, key: str) -> Settling | None:
        """The wave's `Settling`, if one was made."""
        return self._waves.get(key)

    def forget(self, run_key: str) -> None:
        """Drop the waves of a run that aggregates."""
        self._waves.forget(run_key)


# Turns of the event loop that the requests still out get once the decision settles, before they are cancelled: a
# reply already at the client (its tokens paid for) is read within a few — each await of the client's read takes
# one; ChatOpenAI's, which parses each reply in a worker thread, ~10 — where cancelling at once would drop it; a
# request still out upstream stays out over so few turns (~0.3 ms).
READ_TURNS = 32


async def _cancel_once_read(tasks: list[asyncio.Task]) -> None:
    """Cancel `tasks` but those that finish within `READ_TURNS` turns of the event loop."""
    for _ in range(READ_TURNS):
        if all(task.done() for task in tasks):
            return
        await asyncio.sleep(0)
    for task in tasks:
        task.cancel()


def _running_task() -> asyncio.Task | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # a worker thread of a blocking draw
        return None


def cancelled_by(settling: Settling | None, result: BaseException | list[Candidate]) -> list[Candidate]:
    """A draw task's candidates; none for a task that settling cancelled. Any other error is raised."""
    if isinstance(result, asyncio.CancelledError) and settling is not None and settling.settled:
        return []
    if isinstance(result, BaseException):
        raise result
    return result


async def settled_or_drawn(settling: Settling | None, draw: asyncio.Task[list[Candidate]]) -> list[Candidate]:
    """The candidates of an async draw task, or none when settling cancels it first; a cancellation of the
    caller itself propagates."""
    if settling is None:
        return await draw
    settling.attach([draw])
    try:
        return await draw
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not settling.settled or (current is not None and current.cancelling()):
            raise
        return []
    finally:
        settling.detach([draw])
