"""Drawing candidates: one request with `n` where the model takes it, parallel single requests otherwise,
with retries on transient errors, a per-attempt timeout, and failures recorded instead of raised.

A failure is returned as a `Candidate` with `error` set because LangGraph discards the writes of a whole
superstep when one branch raises, which would throw away every candidate that did succeed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ContextThreadPoolExecutor, merge_configs
from langgraph.constants import TAG_NOSTREAM
from tenacity import AsyncRetrying, Retrying

from aggregate_graph.drawing.course import (
    Attempt,
    CutShort,
    Done,
    Draw,
    NotNeeded,
    Outcome,
    Retried,
    Step,
    Subdraw,
    Wait,
    candidates_of,
    capture,
    course,
    resume,
    subdraw,
)
from aggregate_graph.drawing.n_support import is_stream_refusal, learn_stream_refused, refuses_stream
from aggregate_graph.drawing.replies import (
    RepliesDirectly,
    Reply,
    ReplyChoice,
    StreamsChoices,
    answers_from_cache,
    reply_of,
    streamed_reply,
)
from aggregate_graph.drawing.retries import retrying, with_timeout
from aggregate_graph.drawing.settings import CandidatePolicy, Sampler
from aggregate_graph.drawing.settling import STOP_CONFIG_KEY, Settling, cancelled_by
from aggregate_graph.sample_set import Candidate

OnDrawn = Callable[[list[Candidate]], None]  # told of candidates as they land
STOP_POLL_S = 0.05  # how often a blocking retry's pause reads the vote while it waits for the run's stop


def _request_kwargs(sampler: Sampler, k: int) -> dict[str, Any]:
    """What a candidate request sends besides the messages: the bound options, `n`, the temperature."""
    kwargs: dict[str, Any] = {**sampler.bound}
    if k > 1:
        kwargs["n"] = k
    if sampler.temperature is not None:
        kwargs["temperature"] = sampler.temperature
    return kwargs


def _call_kwargs(sampler: Sampler, k: int, config: RunnableConfig | None) -> dict[str, Any]:
    """LangChain generate's keywords for a candidate request: the request's own, and the run's callbacks, tags,
    metadata and name."""
    # "nostream": candidates are not the answer, so a parent streaming messages must not show their tokens;
    # stream=False: LangChain would otherwise stream whenever a streaming callback is attached, which costs
    # more per call and yields one choice, not k.
    callbacks = (config or {}).get("callbacks")
    if own := sampler.config.get("callbacks"):  # `with_config(callbacks=...)`: joins the run's, as a binding's do
        callbacks = merge_configs({"callbacks": own}, {"callbacks": callbacks}).get("callbacks")
    kwargs = {**_request_kwargs(sampler, k), "callbacks": callbacks, "stream": False}
    kwargs["tags"] = [*(sampler.config.get("tags") or []), TAG_NOSTREAM]
    if metadata := sampler.config.get("metadata"):
        kwargs["metadata"] = metadata
    if run_name := sampler.config.get("run_name"):
        kwargs["run_name"] = run_name
    return kwargs


def replies_directly(sampler: Sampler, config: RunnableConfig | None) -> bool:
    """Whether the draw's requests may skip LangChain's path (`RepliesDirectly`): decided once a draw."""
    if not isinstance(sampler.model, RepliesDirectly):
        return False
    kwargs = _call_kwargs(sampler, 1, config)
    return not sampler.model.observed(kwargs.pop("callbacks"), kwargs)


@dataclass(frozen=True)
class Drawer:
    """What every request of a node's draw shares: the sampler, the run's `config`, the wave's `settling` (when
    it settles early), and whether the requests skip LangChain's path (`replies_directly`, decided once here)."""

    sampler: Sampler
    config: RunnableConfig | None = None
    settling: Settling | None = None
    stream_candidates: bool = False  # its requests are streamed, so that settling can close them (`streams_choices`)
    direct: bool = field(init=False)
    stop: threading.Event | None = field(init=False)  # set once nobody reads the run (`stopping_stream`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "direct", replies_directly(self.sampler, self.config))
        object.__setattr__(self, "stop", ((self.config or {}).get("configurable") or {}).get(STOP_CONFIG_KEY))

    def request(self, draw: Draw) -> tuple[list[BaseMessage], dict[str, Any]]:
        """The messages and keywords of the one request for `draw`'s candidates (`n` when there are several)."""
        k, messages = len(draw.indices), self.sampler.prompt(draw.messages)
        if self.direct:
            return messages, _request_kwargs(self.sampler, k)
        return messages, _call_kwargs(self.sampler, k, self.config)

    def not_needed(self) -> bool:
        """Whether the wave is settled or the run stopped, so that a request not yet sent is not sent."""
        return (self.settling is not None and self.settling.settled) or (self.stop is not None and self.stop.is_set())

    def settled_within(self, seconds: float) -> bool:
        """Waits `seconds` (a blocking retry's pause), or less: True, at once, when the wave is or becomes settled
        or the run stops."""
        if self.stop is None:
            if self.settling is None:
                time.sleep(seconds)
                return False
            return self.settling.wait(seconds)
        deadline = time.monotonic() + seconds
        while not self.not_needed():  # two signals: the stop's waited on a slice at a time, the vote's read between
            if (left := deadline - time.monotonic()) <= 0:
                return False
            self.stop.wait(min(left, STOP_POLL_S))
        return True

    def streams_choices(self, draw: Draw, blocking: bool) -> bool:
        """Whether `draw`'s request is streamed, so that settling early can close it once the vote is settled
        (`stream_candidates`): a request with `n` (`StreamsChoices`: the client's own `create`, nothing observing
        the call), and a blocking run's single request, which a settled vote could not interrupt otherwise (an
        async run cancels its task) — through the client's `create`, or else the chat model's own `stream`
        (`streamed_reply`) unless the model caches replies or batches concurrent calls itself (the local engine).
        Not where the endpoint refused to stream (`n_support`)."""
        if not self.stream_candidates or self.settling is None or refuses_stream(self.sampler.endpoint):
            return False
        model = self.sampler.model
        if self.direct:
            return isinstance(model, StreamsChoices) and (len(draw.indices) > 1 or blocking)
        single = blocking and len(draw.indices) == 1
        return single and not answers_from_cache(model) and not hasattr(model, "batches_calls")


def _unless_stream_refused(exc: Exception, sampler: Sampler) -> None:
    """After a streamed request failed with `exc`: raise it, unless the endpoint refused to stream (`n_support`),
    which is remembered; the caller then asks again at once unstreamed, as every later request of the endpoint."""
    if not is_stream_refusal(exc):
        raise exc
    learn_stream_refused(sampler.endpoint)


class _ChoiceReporter:
    """Reports each choice of a streamed request with `n` as it finishes, as the candidate at the next of the draw's
    indices (`candidates_of` numbers the reply's choices in the same order: the order they finished), and keeps
    them: a request that fails afterwards keeps those that landed (`CutShort`). A single request's one choice is
    not reported early: it lands when its stream ends, a chunk later, and a retry's choice would have no index
    left."""

    def __init__(self, draw: Draw, policy: CandidatePolicy, drawer: Drawer, report: OnDrawn) -> None:
        self.draw, self.policy, self.drawer, self.report = draw, policy, drawer, report
        self.started, self._indices = time.perf_counter(), iter(draw.indices if len(draw.indices) > 1 else ())
        self._landed: list[Candidate] = []
        self._lock = threading.Lock()  # a blocking attempt given up on may still stream in its thread

    def __call__(self, choice: ReplyChoice) -> None:
        with self._lock:
            if (index := next(self._indices, None)) is None:  # a single request, or an attempt that failed
                return
            single = subdraw(self.draw, (index,))
            latency = time.perf_counter() - self.started
            landed = candidates_of(Reply([choice], None), single, self.drawer.sampler, latency, self.policy)[0]
            self._landed += landed
        self.report(landed)

    def failed(self, exc: Exception) -> None:
        """Once the request failed with `exc`: raises `CutShort` with the candidates reported, if any (the caller
        raises `exc` otherwise). None is reported after this."""
        with self._lock:
            self._indices, landed = iter(()), list(self._landed)
        if landed:
            raise CutShort(landed) from exc


def _once(on_drawn: OnDrawn | None) -> OnDrawn:
    """`on_drawn`, told of each candidate index once: a draw reports what its sub-draws did not."""
    told: set[int] = set()

    def report(candidates: list[Candidate]) -> None:
        new = [c for c in candidates if c.index not in told]
        told.update(c.index for c in new)
        if new and on_drawn is not None:
            on_drawn(new)

    return report


def draw_candidates(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """Draw the candidates of `draw` (blocking). Never raises for a model failure: it records it.

    One sample gets the policy's attempts. Several in one `n` request get one attempt — the request is
    all-or-nothing — and, when it fails, the samples are asked for one by one (`after_failed_n`) within the same
    deadline; what the endpoint did with `n` is remembered (`n_support`). `on_drawn` is told of each candidate
    once, as it lands (those asked for one by one, each on its own; the drawer's settling sees them and stops the
    rest once settled)."""
    sampler, report = drawer.sampler, _once(on_drawn)
    messages, kwargs = drawer.request(draw)
    streamed = _ChoiceReporter(draw, policy, drawer, report) if drawer.streams_choices(draw, blocking=True) else None

    def call(given_up: Callable[[], bool]) -> Reply:
        if streamed is not None:

            def stop() -> bool:  # the vote is settled, or this attempt was given up on: nobody reads the rest
                return drawer.not_needed() or given_up()

            try:
                if not drawer.direct:
                    return streamed_reply(sampler.model, messages, stop, dict(kwargs))
                return cast(StreamsChoices, sampler.model).stream_choices(messages, streamed, stop, **kwargs)
            except Exception as exc:
                _unless_stream_refused(exc, sampler)
        if drawer.direct:
            return cast(RepliesDirectly, sampler.model).reply(messages, **kwargs)
        return reply_of(sampler.model.generate([messages], **kwargs))

    def attempt() -> Reply:
        given_up = threading.Event()
        try:
            return with_timeout(lambda: call(given_up.is_set), policy.timeout_s)
        except Exception as exc:
            if streamed is not None:
                streamed.failed(exc)
            raise
        finally:
            given_up.set()  # an attempt that timed out and still streams is closed at its next event

    def pause(seconds: float) -> None:  # a retry's wait, ended once the wave is settled: the retry is not needed
        if drawer.settled_within(seconds):
            raise NotNeeded

    def take(step: Step) -> Any:
        match step:
            case Attempt():
                return attempt()
            case Wait(seconds):
                return pause(seconds)
            case Retried(rest):
                return retrying(rest, Retrying, sleep=pause)(attempt)
            case Subdraw(sub, left, singles, landed):
                report(list(landed))
                return (draw_singles if singles else draw_candidates)(sub, left, drawer, report)

    plan = course(draw, sampler, policy)
    try:
        step = resume(plan, Outcome())
        while not isinstance(step, Done):
            step = resume(plan, capture(take, step))
    except NotNeeded:  # settled before this draw's retry was sent: nothing of it landed
        plan.close()
        return []
    report(step.value)
    return step.value


def draw_singles(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """The candidates of `draw` one request each (`draw_candidates`), at most `draw.concurrency` at a time;
    `on_drawn` is called with each one's record as it lands. Once the drawer's settling is settled, the requests
    not yet sent are not sent and the streamed ones are closed (`Drawer.streams_choices`; their candidates are
    missing from the result)."""

    def one(single: Draw) -> list[Candidate]:
        if drawer.not_needed():
            return []
        drawn = draw_candidates(single, policy, drawer)
        if on_drawn is not None:
            on_drawn(drawn)
        return drawn

    singles = [subdraw(draw, (i,)) for i in draw.indices]
    # ContextThreadPoolExecutor: each request sees the node's config and tracing context, as the node does
    with ContextThreadPoolExecutor(max_workers=min(len(singles), draw.concurrency or len(singles))) as pool:
        return [c for batch in pool.map(one, singles) for c in batch]


async def adraw_candidates(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """Async `draw_candidates`."""
    sampler, report = drawer.sampler, _once(on_drawn)
    messages, kwargs = drawer.request(draw)
    streamed = _ChoiceReporter(draw, policy, drawer, report) if drawer.streams_choices(draw, blocking=False) else None

    async def attempt() -> Reply:
        """One attempt, under the policy's timeout (unlike wait_for, no task per request). One coroutine: each await
        of a request passes through every frame of its chain, and 64 requests are under way at once."""
        timeout = asyncio.timeout(policy.timeout_s)
        try:
            try:
                async with timeout:
                    if streamed is not None:
                        try:
                            model = cast(StreamsChoices, sampler.model)
                            return await model.astream_choices(messages, streamed, drawer.not_needed, **kwargs)
                        except Exception as exc:
                            _unless_stream_refused(exc, sampler)
                    if drawer.direct:
                        return await cast(RepliesDirectly, sampler.model).areply(messages, **kwargs)
                    return reply_of(await sampler.model.agenerate([messages], **kwargs))
            except TimeoutError:
                if not timeout.expired():  # the model's own
                    raise
                raise TimeoutError(f"candidate request exceeded the {policy.timeout_s:g}s timeout") from None
        except Exception as exc:
            if streamed is not None:
                streamed.failed(exc)
            raise

    async def take(step: Step) -> Any:  # a step other than an attempt
        match step:
            case Wait(seconds):
                return await asyncio.sleep(seconds)
            case Retried(rest):
                return await retrying(rest, AsyncRetrying)(attempt)
            case Subdraw(sub, left, singles, landed):
                report(list(landed))
                return await (adraw_singles if singles else adraw_candidates)(sub, left, drawer, report)

    plan = course(draw, sampler, policy)
    step = resume(plan, Outcome())
    while not isinstance(step, Done):
        try:  # an attempt, the usual step, is awaited here: a frame less on each of its awaits
            outcome = Outcome(await (attempt() if isinstance(step, Attempt) else take(step)))
        except Exception as exc:  # the plan decides what a failure means
            outcome = Outcome(error=exc)
        step = resume(plan, outcome)
    report(step.value)
    return step.value


async def adraw_singles(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """Async `draw_singles`; once the drawer's settling is settled, the requests still out are cancelled too."""
    gate, settling = asyncio.Semaphore(draw.concurrency or len(draw.indices)), drawer.settling

    async def one(index: int) -> list[Candidate]:
        async with gate:
            if drawer.not_needed():
                return []
            drawn = await adraw_candidates(subdraw(draw, (index,)), policy, drawer)
        if on_drawn is not None:
            on_drawn(drawn)
        return drawn

    if settling is None:
        batches = await asyncio.gather(*(one(i) for i in draw.indices))
        return [c for batch in batches for c in batch]
    tasks = [asyncio.create_task(one(i)) for i in draw.indices]
    settling.attach(tasks)
    try:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        settling.detach(tasks)
    return [c for result in results for c in cancelled_by(settling, result)]
