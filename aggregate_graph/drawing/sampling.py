"""Drawing candidates: one request with `n` where the model takes it, parallel single requests otherwise,
with retries on transient errors, a per-attempt timeout, and failures recorded instead of raised.

A failure is returned as a `Candidate` with `error` set because LangGraph discards the writes of a whole
superstep when one branch raises, which would throw away every candidate that did succeed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ContextThreadPoolExecutor, merge_configs
from langgraph.constants import TAG_NOSTREAM
from tenacity import AsyncRetrying, Retrying

from aggregate_graph.drawing.n_support import after_failed_n, learn, n_was_refused
from aggregate_graph.drawing.replies import OnChoice, RepliesDirectly, Reply, ReplyChoice, StreamsChoices, reply_of
from aggregate_graph.drawing.retries import one_attempt, remaining, retry_after, retrying, with_timeout
from aggregate_graph.drawing.settings import CandidatePolicy, Sampler
from aggregate_graph.drawing.settling import Settling, cancelled_by
from aggregate_graph.errors import describe, error_body, error_kind
from aggregate_graph.sample_set import Candidate

OnDrawn = Callable[[list[Candidate]], None]  # told of candidates as they land
T = TypeVar("T")


def _deadline_passed(policy: CandidatePolicy) -> TimeoutError:
    return TimeoutError(f"the {policy.deadline_s:g}s deadline passed before this sample could be asked for")


@dataclass(frozen=True)
class Draw:
    """A request for the candidates at `indices`, all from the pool's sampler at `sampler_index`: the payload of
    one LangGraph `Send` (an index, not the sampler itself, so that the payload checkpoints as plain data)."""

    sampler_index: int
    indices: tuple[int, ...]
    messages: tuple[BaseMessage, ...]
    wave: int = 0
    concurrency: int | None = None  # set by `route` on a wave's single requests drawn in one task: its share
    settle_key: str | None = None  # the wave's, when it settles early: its draws share one `Settling`


def _candidates(
    reply: Reply, draw: Draw, sampler: Sampler, latency: float, policy: CandidatePolicy
) -> tuple[list[Candidate], tuple[int, ...]]:
    """Candidates for the samples returned, and the indices a server that ignores `n` left unfilled."""
    choices, request_id = reply.choices[: len(draw.indices)], uuid.uuid4().hex
    out = []
    for index, choice in zip(draw.indices, choices, strict=False):
        candidate = Candidate(
            index=index,
            text=choice.text,
            tool_calls=choice.tool_calls,
            model=str(choice.model or sampler.model_name),
            params=sampler.params,
            usage=reply.usage,
            request_id=request_id,
            latency_s=latency,
            finish_reason=choice.finish_reason,
            wave=draw.wave,
        )
        out.append(candidate)  # its answer is read by the graph, under the set's answer type (`answer_types`)
    return out, draw.indices[len(choices) :]


def _failed(draw: Draw, sampler: Sampler, exc: BaseException, latency: float) -> list[Candidate]:
    status = getattr(exc, "status_code", None)
    return [
        Candidate(
            index=i,
            model=sampler.model_name,
            params=sampler.params,
            latency_s=latency,
            error=describe(exc),
            error_status=status if isinstance(status, int) else None,
            error_kind=error_kind(exc),
            error_body=error_body(exc),
            wave=draw.wave,
        )
        for i in draw.indices
    ]


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
    stream_n: bool = False  # a request with `n` is streamed, so that settling can close it (`streams_choices`)
    direct: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "direct", replies_directly(self.sampler, self.config))

    def request(self, draw: Draw) -> tuple[list[BaseMessage], dict[str, Any]]:
        """The messages and keywords of the one request for `draw`'s candidates (`n` when there are several)."""
        k, messages = len(draw.indices), self.sampler.prompt(draw.messages)
        if self.direct:
            return messages, _request_kwargs(self.sampler, k)
        return messages, _call_kwargs(self.sampler, k, self.config)

    def not_needed(self) -> bool:
        """Whether the wave is settled, so that a request not yet sent is not sent."""
        return self.settling is not None and self.settling.settled

    def streams_choices(self, draw: Draw) -> bool:
        """Whether `draw`'s request with `n` is streamed, so that settling early can close it once the vote is
        settled (`StreamsChoices`: the client's own `create`, nothing observing the call)."""
        if not self.stream_n or self.settling is None or len(draw.indices) == 1:
            return False
        return self.direct and isinstance(self.sampler.model, StreamsChoices)


def _choice_reporter(draw: Draw, policy: CandidatePolicy, drawer: Drawer, report: OnDrawn) -> OnChoice:
    """Reports each choice of a streamed `n` request as it finishes, as the candidate at the next of the draw's
    indices (`_candidates` numbers the reply's choices in the same order: the order they finished); says whether
    the rest are no longer needed."""
    started, indices = time.perf_counter(), iter(draw.indices)

    def on_choice(choice: ReplyChoice) -> bool:
        single = _subdraw(draw, (next(indices),))
        report(_candidates(Reply([choice], None), single, drawer.sampler, time.perf_counter() - started, policy)[0])
        return drawer.not_needed()

    return on_choice


class _Attempt(NamedTuple):
    """One attempt at the draw's request, under the policy's timeout."""


class _Wait(NamedTuple):
    """The pause before a request's retries."""

    seconds: float


class _Retried(NamedTuple):
    """The request's attempts after the first, under tenacity's retrying with `policy`."""

    policy: CandidatePolicy


class _Subdraw(NamedTuple):
    """Candidates of `draw` under `policy`: one request for them all (`draw_candidates`) or one each
    (`draw_singles`)."""

    draw: Draw
    policy: CandidatePolicy
    singles: bool


_Step = _Attempt | _Wait | _Retried | _Subdraw
# A draw's course, the same blocking and async: it yields each step for a driver to take (`draw_candidates` and
# `adraw_candidates` each take them their way) and is sent the step's outcome, or thrown the error it raised.
_Plan = Generator[_Step, Any, T]


class _Outcome(NamedTuple):
    """What a step came to: its value, or the error it raised."""

    value: Any = None
    error: Exception | None = None


class _Done(NamedTuple, Generic[T]):
    """What a plan returned."""

    value: T


def _resume(plan: _Plan[T], outcome: _Outcome) -> _Step | _Done[T]:
    """The plan's next step once told `outcome` (an error is raised where the plan yielded the step), or what it
    returned."""
    try:
        return plan.send(outcome.value) if outcome.error is None else plan.throw(outcome.error)
    except StopIteration as finished:
        return _Done(finished.value)


def _capture(take: Callable[[_Step], Any], step: _Step) -> _Outcome:
    try:
        return _Outcome(take(step))
    except Exception as exc:  # the plan decides what a failure means
        return _Outcome(error=exc)


async def _acapture(take: Callable[[_Step], Awaitable[Any]], step: _Step) -> _Outcome:
    try:
        return _Outcome(await take(step))
    except Exception as exc:
        return _Outcome(error=exc)


def _attempts(policy: CandidatePolicy, k: int) -> _Plan[Reply]:
    """A request's attempts: one (`one_attempt`), or a first without tenacity and, after a transient failure, the
    rest under it (`retry_after`)."""
    if one_attempt(policy, k):
        return (yield _Attempt())
    started = time.perf_counter()
    try:
        return (yield _Attempt())
    except Exception as exc:
        if (retry := retry_after(policy, exc, started)) is None:
            raise
        yield _Wait(retry.wait_s)
    return (yield _Retried(retry.rest(started)))


def _plan(draw: Draw, sampler: Sampler, policy: CandidatePolicy) -> _Plan[list[Candidate]]:
    """`draw_candidates`' course: the request, what its reply or failure leaves to ask for, and the bookkeeping."""
    k = len(draw.indices)
    if k > 1 and not sampler.supports_n(policy):
        return (yield _Subdraw(draw, policy, singles=True))
    started = time.perf_counter()
    try:
        reply = yield from _attempts(policy, k)
    except Exception as exc:
        if k > 1:
            return (yield from _after_failed_n(draw, sampler, policy, exc, started))
        return _failed(draw, sampler, exc, time.perf_counter() - started)
    done, missing = _candidates(reply, draw, sampler, time.perf_counter() - started, policy)
    if reply.closed:  # settled early: the choices that had not finished were never generated
        return done
    if k > 1:
        learn(sampler.endpoint, "ignored" if missing else "honoured")
    if missing:  # a server that ignored `n`: the rest one by one, within the deadline
        if (left := remaining(policy, started)) is None:
            return done + _failed(_subdraw(draw, missing), sampler, _deadline_passed(policy), 0.0)
        done += yield _Subdraw(_subdraw(draw, missing), left, singles=True)
    return done


def _after_failed_n(
    draw: Draw, sampler: Sampler, policy: CandidatePolicy, exc: Exception, started: float
) -> _Plan[list[Candidate]]:
    """What follows a failed `n` request (`after_failed_n`): give up, ask for all one by one, or probe with one
    sample whose answer (`n_was_refused`, remembered) decides what happens to the rest."""
    action, left = after_failed_n(exc), remaining(policy, started)
    if action == "fail" or left is None:  # the deadline passed: the n request's own error says why
        return _failed(draw, sampler, exc, time.perf_counter() - started)
    if action == "singles":
        return (yield _Subdraw(draw, left, singles=True))
    probe = yield _Subdraw(_subdraw(draw, draw.indices[:1]), left, singles=False)
    rest, verdict = _subdraw(draw, draw.indices[1:]), n_was_refused(probe[0], exc)
    if verdict is True:
        learn(sampler.endpoint, "refused")
    if verdict is False or (left := remaining(policy, started)) is None:
        return probe + _failed(rest, sampler, exc, time.perf_counter() - started)
    return probe + (yield _Subdraw(rest, left, singles=True))


def _once(on_drawn: OnDrawn | None) -> OnDrawn:
    """`on_drawn`, told of each candidate index once: a draw reports what its sub-draws did not."""
    told: set[int] = set()

    def report(candidates: list[Candidate]) -> None:
        new = [c for c in candidates if c.index not in told]
        told.update(c.index for c in new)
        if new and on_drawn is not None:
            on_drawn(new)

    return report


def _subdraw(draw: Draw, indices: tuple[int, ...]) -> Draw:
    return Draw(draw.sampler_index, indices, draw.messages, draw.wave, settle_key=draw.settle_key)


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
    streamed = _choice_reporter(draw, policy, drawer, report) if drawer.streams_choices(draw) else None

    def call() -> Reply:
        if streamed is not None:
            return cast(StreamsChoices, sampler.model).stream_choices(messages, streamed, **kwargs)
        if drawer.direct:
            return cast(RepliesDirectly, sampler.model).reply(messages, **kwargs)
        return reply_of(sampler.model.generate([messages], **kwargs))

    def attempt() -> Reply:
        return with_timeout(call, policy.timeout_s)

    def take(step: _Step) -> Any:
        match step:
            case _Attempt():
                return attempt()
            case _Wait(seconds):
                return time.sleep(seconds)
            case _Retried(rest):
                return retrying(rest, Retrying)(attempt)
            case _Subdraw(sub, left, singles):
                return (draw_singles if singles else draw_candidates)(sub, left, drawer, report)

    plan = _plan(draw, sampler, policy)
    step = _resume(plan, _Outcome())
    while not isinstance(step, _Done):
        step = _resume(plan, _capture(take, step))
    report(step.value)
    return step.value


def draw_singles(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """The candidates of `draw` one request each (`draw_candidates`), at most `policy.max_concurrency` at a time;
    `on_drawn` is called with each one's record as it lands. Once the drawer's settling is settled, the requests
    not yet sent are not sent (their candidates are missing from the result)."""

    def one(single: Draw) -> list[Candidate]:
        if drawer.not_needed():
            return []
        drawn = draw_candidates(single, policy, drawer)
        if on_drawn is not None:
            on_drawn(drawn)
        return drawn

    singles = [_subdraw(draw, (i,)) for i in draw.indices]
    # ContextThreadPoolExecutor: each request sees the node's config and tracing context, as the node does
    with ContextThreadPoolExecutor(max_workers=min(len(singles), policy.max_concurrency)) as pool:
        return [c for batch in pool.map(one, singles) for c in batch]


async def adraw_candidates(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """Async `draw_candidates`."""
    sampler, report = drawer.sampler, _once(on_drawn)
    messages, kwargs = drawer.request(draw)
    streamed = _choice_reporter(draw, policy, drawer, report) if drawer.streams_choices(draw) else None

    async def call() -> Reply:
        if streamed is not None:
            return await cast(StreamsChoices, sampler.model).astream_choices(messages, streamed, **kwargs)
        if drawer.direct:
            return await cast(RepliesDirectly, sampler.model).areply(messages, **kwargs)
        return reply_of(await sampler.model.agenerate([messages], **kwargs))

    async def attempt() -> Reply:
        timeout = asyncio.timeout(policy.timeout_s)  # unlike wait_for, no task per request
        try:
            async with timeout:
                return await call()
        except TimeoutError:
            if not timeout.expired():  # the model's own
                raise
            raise TimeoutError(f"candidate request exceeded the {policy.timeout_s:g}s timeout") from None

    async def take(step: _Step) -> Any:
        match step:
            case _Attempt():
                return await attempt()
            case _Wait(seconds):
                return await asyncio.sleep(seconds)
            case _Retried(rest):
                return await retrying(rest, AsyncRetrying)(attempt)
            case _Subdraw(sub, left, singles):
                return await (adraw_singles if singles else adraw_candidates)(sub, left, drawer, report)

    plan = _plan(draw, sampler, policy)
    step = _resume(plan, _Outcome())
    while not isinstance(step, _Done):
        step = _resume(plan, await _acapture(take, step))
    report(step.value)
    return step.value


async def adraw_singles(
    draw: Draw, policy: CandidatePolicy, drawer: Drawer, on_drawn: OnDrawn | None = None
) -> list[Candidate]:
    """Async `draw_singles`; once the drawer's settling is settled, the requests still out are cancelled too."""
    gate, settling = asyncio.Semaphore(policy.max_concurrency), drawer.settling

    async def one(index: int) -> list[Candidate]:
        async with gate:
            if drawer.not_needed():
                return []
            drawn = await adraw_candidates(_subdraw(draw, (index,)), policy, drawer)
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
