"""One candidate request's attempts: a timeout on each, and tenacity's retries of transient errors."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from aggregate_graph.drawing.settings import CandidatePolicy
from aggregate_graph.errors import is_transient

T = TypeVar("T")


def remaining(policy: CandidatePolicy, started: float) -> CandidatePolicy | None:
    """The policy for requests that continue a draw begun at `started`: the same deadline, now nearer; None
    once it has passed."""
    if policy.deadline_s is None:
        return policy
    left = policy.deadline_s - (time.perf_counter() - started)
    return policy.model_copy(update={"deadline_s": left}) if left > 0 else None


def with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """Run a blocking call, giving up after `timeout_s`; the call itself finishes in a daemon thread."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    # The copied context keeps tracing and LangGraph's config visible to the model inside the thread.
    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(run,), daemon=True, name="aggregate-graph-candidate")
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise TimeoutError(f"candidate request exceeded the {timeout_s:g}s timeout")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _wait(policy: CandidatePolicy) -> wait_exponential_jitter:
    return wait_exponential_jitter(multiplier=policy.backoff_initial_s, max=policy.backoff_max_s)


def retrying(
    policy: CandidatePolicy, cls: type[Retrying] | type[AsyncRetrying], sleep: Callable[[float], None] | None = None
) -> Any:
    """tenacity's retrying of transient errors under `policy`; `sleep`, a blocking one's waits (tenacity's own
    `time.sleep` by default)."""
    stop = stop_after_attempt(policy.max_attempts)
    if policy.deadline_s is not None:
        stop |= stop_after_delay(policy.deadline_s)
    options = {"sleep": sleep} if sleep is not None else {}
    return cls(stop=stop, wait=_wait(policy), retry=retry_if_exception(is_transient), reraise=True, **options)


def one_attempt(policy: CandidatePolicy, k: int) -> bool:
    """Whether the request gets a single attempt: the policy allows one, or it asks for `n` samples — retrying
    an all-or-nothing request risks all n again, while the single requests it falls back to each get the
    policy's attempts."""
    return k > 1 or policy.max_attempts == 1


class _Retry(NamedTuple):
    """After a request's first attempt failed: the wait before the second, and the policy of the attempts left."""

    wait_s: float
    policy: CandidatePolicy

    def rest(self, started: float) -> CandidatePolicy:
        """The attempts left once waited, the deadline nearer; if it passed during the wait, the one attempt
        tenacity would still make (it checks its stop conditions after an attempt, not after a wait)."""
        return remaining(self.policy, started) or self.policy.model_copy(update={"max_attempts": 1, "deadline_s": None})


def retry_after(policy: CandidatePolicy, exc: Exception, started: float) -> _Retry | None:
    """What follows a first attempt begun at `started` that failed with `exc`, as `retrying` would go on: None
    if `exc` is not transient or the deadline has passed; else tenacity's wait after attempt 1, then the later
    attempts, whose waits are the schedule's from its second step (twice the multiplier).

    The first attempt runs without tenacity because most requests succeed at once and tenacity's bookkeeping
    costs ~0.07 ms a request (a tenth of a ChatOpenAI call's own client work); it is set up only for a retry."""
    if not is_transient(exc) or remaining(policy, started) is None:
        return None
    rest = {"max_attempts": policy.max_attempts - 1, "backoff_initial_s": 2 * policy.backoff_initial_s}
    return _Retry(_wait(policy)(RetryCallState(None, None, (), {})), policy.model_copy(update=rest))
