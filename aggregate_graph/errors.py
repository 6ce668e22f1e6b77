"""The package's exception tree, one place to catch from:

    AggregateGraphError            anything this package raises on purpose; `.sample_set` keeps what was drawn
    ├── AggregationError           the candidates were drawn, but no answer could be decided from them
    ├── AggregatorOptionError      an aggregator chosen by name lacks an option it needs, or got one it does not
    │                              take (also a ValueError)
    ├── QuorumError                fewer candidates succeeded than `min_candidates`
    │   └── openai_compat.QuorumAPIError   the same through `wrap_openai` / the proxy: also an `openai.APIError`,
    │                                      with a subclass per openai class (`QuorumRateLimitError`, …)
    └── RequestError               (openai_compat) a request that cannot be aggregated as given; also the
                                   `openai.BadRequestError` the API would answer

Through `wrap_openai`, a call whose every candidate failed raises the `openai` exception class the upstream's
failure maps to (`except openai.RateLimitError` works), which is also a `QuorumError` (`openai_compat.quorum_errors`).
"""

from __future__ import annotations

from typing import Any

import httpx
import openai

from aggregate_graph.sample_set import ErrorKind, SampleSet


class AggregateGraphError(Exception):
    """Base of every error this package raises on purpose. `sample_set`, when there is one, holds every
    candidate drawn (failed ones with their error), so nothing paid for is lost with the exception."""

    sample_set: SampleSet | None = None


class _DrawnError(AggregateGraphError, RuntimeError):
    """An error raised once candidates were drawn: constructed with them. (Not on the base class: `RequestError`
    is constructed as the `openai.BadRequestError` it also is.)"""

    def __init__(self, message: str, sample_set: SampleSet | None = None) -> None:
        super().__init__(message)
        self.sample_set = sample_set


class AggregationError(_DrawnError):
    """Aggregation could not produce an answer. `sample_set` keeps every candidate that was drawn."""


class AggregatorOptionError(AggregateGraphError, ValueError):
    """An aggregator built by name (`load_aggregator`, a surface's `aggregator=`) lacks an option it needs
    (`missing`), or was given one it does not take. `aggregator` and `option` name them, so that a surface can
    say it in its own terms (the CLI names its flag)."""

    def __init__(self, message: str, aggregator: str, option: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.aggregator, self.option, self.missing = aggregator, option, missing


class QuorumError(_DrawnError):
    """Fewer candidates succeeded than `min_candidates`. `sample_set` holds every candidate and its error."""


TRANSIENT_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))
# The classes a timeout or a failed / dropped connection comes as, from the openai SDK (which LangChain's OpenAI
# models use too), httpx beneath it, or the standard library.
_TIMEOUTS = (TimeoutError, openai.APITimeoutError, httpx.TimeoutException)
_CONNECTION = (ConnectionError, openai.APIConnectionError, httpx.TransportError)


def error_kind(exc: BaseException) -> ErrorKind:
    """What kind of failure `exc` is: an HTTP status answered, a timeout, a connection that failed or dropped,
    or something else. Recorded on a failed candidate (`Candidate.error_kind`)."""
    if isinstance(getattr(exc, "status_code", None), int):
        return "status"
    if isinstance(exc, _TIMEOUTS):  # before connection errors: openai's timeout is a kind of connection error
        return "timeout"
    if isinstance(exc, _CONNECTION):
        return "connection"
    return "other"


def error_body(exc: BaseException) -> dict[str, Any] | None:
    """The error object an API answered with (`body` of an openai / anthropic status error), when it is one."""
    body = getattr(exc, "body", None)
    return body if isinstance(body, dict) else None


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: rate limits, server errors, timeouts and dropped connections."""
    kind = error_kind(exc)
    return kind in ("timeout", "connection") or (kind == "status" and exc.status_code in TRANSIENT_STATUS)


def describe(exc: BaseException) -> str:
    """How a failure is recorded on a candidate: its class, then its message."""
    return f"{type(exc).__name__}: {exc}"[:2000]
