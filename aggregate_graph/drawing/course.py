"""A draw's course: what it asks for next — the request, its retries, and what a failed or partly answered
`n` request leaves to ask for — as steps that a driver takes (`sampling`: blocking or async), and the candidate
records its replies and failures become. No I/O here: the same course serves both drivers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from langchain_core.messages import BaseMessage

from aggregate_graph.drawing.n_support import after_failed_n, learn, n_was_refused
from aggregate_graph.drawing.replies import Reply
from aggregate_graph.drawing.retries import one_attempt, remaining, retry_after
from aggregate_graph.drawing.settings import CandidatePolicy, Sampler
from aggregate_graph.errors import describe, error_body, error_kind
from aggregate_graph.sample_set import Candidate

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
    concurrency: int | None = None  # how many of its single requests may be in flight at once (None: all)
    settle_key: str | None = None  # the wave's, when it settles early: its draws share one `Settling`
    gate: tuple[str, int] | None = None  # a checkpointed run's request, its own task: (run key, limit) (`Gates`)


def candidates_of(
    reply: Reply, draw: Draw, sampler: Sampler, latency: float, policy: CandidatePolicy
) -> tuple[list[Candidate], tuple[int, ...]]:
    """Candidates for the samples returned, and the indices a server that ignores `n` left unfilled."""
    choices, request_id, landed_at = reply.choices[: len(draw.indices)], uuid.uuid4().hex, time.time()
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
            landed_at=landed_at,
            finish_reason=choice.finish_reason,
            wave=draw.wave,
        )
        out.append(candidate)  # its answer is read by the graph, under the set's answer type (`answer_types`)
    return out, draw.indices[len(choices) :]


def failed(draw: Draw, sampler: Sampler, exc: BaseException, latency: float) -> list[Candidate]:
    status, landed_at = getattr(exc, "status_code", None), time.time()
    return [
        Candidate(
            index=i,
            model=sampler.model_name,
            params=sampler.params,
            latency_s=latency,
            landed_at=landed_at,
            error=describe(exc),
            error_status=status if isinstance(status, int) else None,
            error_kind=error_kind(exc),
            error_body=error_body(exc),
            wave=draw.wave,
        )
        for i in draw.indices
    ]


class Attempt(NamedTuple):
    """One attempt at the draw's request, under the policy's timeout."""


class Wait(NamedTuple):
    """The pause before a request's retries."""

    seconds: float


class Retried(NamedTuple):
    """The request's attempts after the first, under tenacity's retrying with `policy`."""

    policy: CandidatePolicy


class Subdraw(NamedTuple):
    """Candidates of `draw` under `policy`: one request for them all (`draw_candidates`) or one each
    (`draw_singles`). `landed`: the candidates the draw already has, reported first, so that settling counts them
    while the sub-draw's are out."""

    draw: Draw
    policy: CandidatePolicy
    singles: bool
    landed: tuple[Candidate, ...] = ()


class CutShort(Exception):
    """A streamed request with `n` that failed after some of its choices landed, each reported as it finished:
    `landed` holds their candidates, which the draw keeps; the failure is the `__cause__`."""

    def __init__(self, landed: list[Candidate]) -> None:
        super().__init__(f"the request failed after {len(landed)} of its choices landed")
        self.landed = landed


class NotNeeded(Exception):
    """Raised by a blocking driver's step once the draw's wave is settled before its request was sent (during a
    retry's wait): the draw ends with no candidate, as an async draw's cancelled task does."""


Step = Attempt | Wait | Retried | Subdraw
# A draw's course, the same blocking and async: it yields each step for a driver to take (`draw_candidates` and
# `adraw_candidates` each take them their way) and is sent the step's outcome, or thrown the error it raised.
Course = Generator[Step, Any, T]


class Outcome(NamedTuple):
    """What a step came to: its value, or the error it raised."""

    value: Any = None
    error: Exception | None = None


class Done(NamedTuple, Generic[T]):
    """What a plan returned."""

    value: T


def resume(plan: Course[T], outcome: Outcome) -> Step | Done[T]:
    """The plan's next step once told `outcome` (an error is raised where the plan yielded the step), or what it
    returned."""
    try:
        return plan.send(outcome.value) if outcome.error is None else plan.throw(outcome.error)
    except StopIteration as finished:
        return Done(finished.value)


def capture(take: Callable[[Step], Any], step: Step) -> Outcome:
    try:
        return Outcome(take(step))
    except NotNeeded:  # no failure: the driver ends the draw
        raise
    except Exception as exc:  # the plan decides what a failure means
        return Outcome(error=exc)


def _attempts(policy: CandidatePolicy, k: int) -> Course[Reply]:
    """A request's attempts: one (`one_attempt`), or a first without tenacity and, after a transient failure, the
    rest under it (`retry_after`)."""
    if one_attempt(policy, k):
        return (yield Attempt())
    started = time.perf_counter()
    try:
        return (yield Attempt())
    except Exception as exc:
        if (retry := retry_after(policy, exc, started)) is None:
            raise
        yield Wait(retry.wait_s)
    return (yield Retried(retry.rest(started)))


def course(draw: Draw, sampler: Sampler, policy: CandidatePolicy) -> Course[list[Candidate]]:
    """`draw_candidates`' course: the request, what its reply or failure leaves to ask for, and the bookkeeping."""
    k = len(draw.indices)
    if k > 1 and not sampler.supports_n(policy):
        return (yield Subdraw(draw, policy, singles=True))
    started = time.perf_counter()
    try:
        reply = yield from _attempts(policy, k)
    except CutShort as cut:  # the choices that landed stay; the rest are asked for one by one, within the deadline
        cause = cut.__cause__ if isinstance(cut.__cause__, Exception) else cut
        rest = subdraw(draw, tuple(i for i in draw.indices if i not in {c.index for c in cut.landed}))
        if not rest.indices:  # every choice had finished
            return cut.landed
        if (left := remaining(policy, started)) is None:
            return cut.landed + failed(rest, sampler, cause, time.perf_counter() - started)
        return cut.landed + (yield Subdraw(rest, left, singles=True))
    except Exception as exc:
        if k > 1:
            return (yield from _after_failed_n(draw, sampler, policy, exc, started))
        return failed(draw, sampler, exc, time.perf_counter() - started)
    done, missing = candidates_of(reply, draw, sampler, time.perf_counter() - started, policy)
    if reply.closed:  # settled early: the choices that had not finished were never generated
        return done
    if k > 1:
        learn(sampler.endpoint, "ignored" if missing else "honoured")
    if missing and k == 1:  # a reply without a choice: asking again would loop
        return failed(draw, sampler, ValueError("the response has no choices"), time.perf_counter() - started)
    if missing:  # a server that ignored `n`: the rest one by one, within the deadline
        if (left := remaining(policy, started)) is None:
            return done + failed(subdraw(draw, missing), sampler, _deadline_passed(policy), 0.0)
        done += yield Subdraw(subdraw(draw, missing), left, singles=True, landed=tuple(done))
    return done


def _after_failed_n(
    draw: Draw, sampler: Sampler, policy: CandidatePolicy, exc: Exception, started: float
) -> Course[list[Candidate]]:
    """What follows a failed `n` request (`after_failed_n`): give up, ask for all one by one, or probe with one
    sample whose answer (`n_was_refused`, remembered) decides what happens to the rest."""
    action, left = after_failed_n(exc), remaining(policy, started)
    if action == "fail" or left is None:  # the deadline passed: the n request's own error says why
        return failed(draw, sampler, exc, time.perf_counter() - started)
    if action == "singles":
        return (yield Subdraw(draw, left, singles=True))
    probe = yield Subdraw(subdraw(draw, draw.indices[:1]), left, singles=False)
    if not probe:  # closed once the vote settled: the rest are not needed either
        return probe
    rest, verdict = subdraw(draw, draw.indices[1:]), n_was_refused(probe[0], exc)
    if verdict is True:
        learn(sampler.endpoint, "refused")
    if verdict is False or (left := remaining(policy, started)) is None:
        return probe + failed(rest, sampler, exc, time.perf_counter() - started)
    return probe + (yield Subdraw(rest, left, singles=True))


def subdraw(draw: Draw, indices: tuple[int, ...]) -> Draw:
    # built directly: `dataclasses.replace` takes twice as long (~2 µs here), and this runs once per candidate
    return Draw(draw.sampler_index, indices, draw.messages, draw.wave, draw.concurrency, draw.settle_key, draw.gate)
