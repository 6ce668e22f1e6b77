"""Total failure through `wrap_openai` as the `openai` exception the caller would get from the upstream.

When too few candidates succeed, the graph raises `QuorumError`. Through a wrapped client that error is raised
as a class that is both a `QuorumError` (with `.sample_set`: every candidate and its error) and the `openai`
exception the upstream's failure maps to, so `except openai.RateLimitError`, `except openai.APIError`, retry
rules keyed on openai's classes, and `except aggregate_graph.QuorumError` all catch it:

    the failed candidates' cause             raised
    ───────────────────────────────────────  ─────────────────────────────────────────────────────────────
    one HTTP status (e.g. all 429)           that status's `openai.APIStatusError` subclass (`RateLimitError`,
                                             `AuthenticationError`, `NotFoundError`, `InternalServerError`, …),
                                             with the status, a real response and the upstream's error body
    all timed out (the client's or the       `openai.APITimeoutError`
    graph's bound)
    all failed to connect                    `openai.APIConnectionError`
    mixed causes, or no API cause            `QuorumAPIError`: a plain `openai.APIError` (no status), the
                                             quorum message listing every distinct error

The message is the upstream's own (e.g. "Error code: 429 - {...}"), followed by how many candidates failed.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
from openai import _exceptions as _openai_exceptions

from aggregate_graph.errors import QuorumError
from aggregate_graph.sample_set import Candidate, ErrorKind, SampleSet

# The HTTP library openai builds its requests and exceptions on (httpx, or httpx2 in openai ≥ 3): a response
# attached to an openai exception is one of its own.
http: Any = getattr(_openai_exceptions, "httpx2", None) or httpx


class QuorumAPIError(QuorumError, openai.APIError):
    """Too few candidates succeeded through `wrap_openai`: a `QuorumError` that is also an `openai.APIError`.

    Raised as is when the failures had mixed causes (say 429s and timeouts) or no API cause; otherwise one of
    its subclasses, which are also the `openai` class of the one cause (`QuorumRateLimitError` is an
    `openai.RateLimitError`, …). `sample_set` holds every candidate, failed ones with `error` and
    `error_status`."""

    def __init__(
        self,
        message: str,
        *,
        request: Any,
        sample_set: SampleSet | None,
        response: Any = None,
        body: object | None = None,
    ) -> None:
        if response is not None:
            openai.APIStatusError.__init__(self, message, response=response, body=body)  # type: ignore[arg-type]
        elif isinstance(self, openai.APIConnectionError):
            openai.APIConnectionError.__init__(self, message=message, request=request)
        else:
            openai.APIError.__init__(self, message, request, body=body)
        self.sample_set = sample_set


class QuorumAPIStatusError(QuorumAPIError, openai.APIStatusError):
    """Every failure had this HTTP status, one openai has no class of its own for."""


class QuorumBadRequestError(QuorumAPIError, openai.BadRequestError):
    """Every failure was a 400."""


class QuorumAuthenticationError(QuorumAPIError, openai.AuthenticationError):
    """Every failure was a 401."""


class QuorumPermissionDeniedError(QuorumAPIError, openai.PermissionDeniedError):
    """Every failure was a 403."""


class QuorumNotFoundError(QuorumAPIError, openai.NotFoundError):
    """Every failure was a 404."""


class QuorumConflictError(QuorumAPIError, openai.ConflictError):
    """Every failure was a 409."""


class QuorumUnprocessableEntityError(QuorumAPIError, openai.UnprocessableEntityError):
    """Every failure was a 422."""


class QuorumRateLimitError(QuorumAPIError, openai.RateLimitError):
    """Every failure was a 429."""


class QuorumInternalServerError(QuorumAPIError, openai.InternalServerError):
    """Every failure had the same 5xx status."""


class QuorumAPIConnectionError(QuorumAPIError, openai.APIConnectionError):
    """Every failure was a connection error."""


class QuorumAPITimeoutError(QuorumAPIError, openai.APITimeoutError):
    """Every failure timed out."""


_BY_STATUS: dict[int, type[QuorumAPIError]] = {
    400: QuorumBadRequestError,
    401: QuorumAuthenticationError,
    403: QuorumPermissionDeniedError,
    404: QuorumNotFoundError,
    409: QuorumConflictError,
    422: QuorumUnprocessableEntityError,
    429: QuorumRateLimitError,
}


def _class_name(error: str) -> str:
    """`describe` records an error as "ClassName: message"."""
    head, sep, _ = error.partition(": ")
    return head if sep and head.isidentifier() else ""


def cause(candidate: Candidate) -> tuple[ErrorKind, int | None]:
    """A failed candidate's cause: ("status", code), ("timeout", None), ("connection", None) or ("other", None),
    as `sampling` recorded it (`errors.error_kind`)."""
    if candidate.error_status is not None:
        return "status", candidate.error_status
    kind = candidate.error_kind
    return (kind if kind == "timeout" or kind == "connection" else "other"), None


def _message(error: str) -> str:
    """The upstream's message: the recorded error without its class name."""
    return error.partition(": ")[2] if _class_name(error) else error


def upstream_error(exc: QuorumError, url: str) -> QuorumError:
    """The exception to raise for `exc` through a wrapped client whose requests go to `url` (see the module's
    table); `exc` itself when no candidate failed (nothing to map)."""
    if isinstance(exc, QuorumAPIError):
        return exc
    sample_set = exc.sample_set
    failed = sample_set.failed if sample_set is not None else []
    if not failed:
        return exc
    request = http.Request("POST", url)
    causes = {cause(c) for c in failed}
    kind, status = next(iter(causes))
    if len(causes) > 1 or kind == "other":
        return QuorumAPIError(str(exc), request=request, sample_set=sample_set)
    assert sample_set is not None
    note = f" ({len(failed)} of {len(sample_set.candidates)} candidates failed: too few succeeded to aggregate)"
    message = _message(failed[0].error or "") + note
    if kind == "timeout":
        return QuorumAPITimeoutError(message, request=request, sample_set=sample_set)
    if kind == "connection":
        return QuorumAPIConnectionError(message, request=request, sample_set=sample_set)
    assert status is not None
    body = failed[0].error_body  # the upstream's error object, as the unwrapped client would carry it
    response = http.Response(status, request=request, json={"error": body or {"message": message}})
    cls = _BY_STATUS.get(status) or (QuorumInternalServerError if status >= 500 else QuorumAPIStatusError)
    return cls(message, request=request, response=response, body=body, sample_set=sample_set)


__all__ = [
    "QuorumAPIConnectionError",
    "QuorumAPIError",
    "QuorumAPIStatusError",
    "QuorumAPITimeoutError",
    "QuorumAuthenticationError",
    "QuorumBadRequestError",
    "QuorumConflictError",
    "QuorumInternalServerError",
    "QuorumNotFoundError",
    "QuorumPermissionDeniedError",
    "QuorumRateLimitError",
    "QuorumUnprocessableEntityError",
    "upstream_error",
]
