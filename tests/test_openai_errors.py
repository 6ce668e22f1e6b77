"""Total failure through wrap_openai raises the openai exception the upstream's failure maps to — also a
QuorumError with the sample set — and a stream raises it at create(), as the unwrapped client does.
The real openai client against real test servers on 127.0.0.1."""

from __future__ import annotations

import socket
import tarfile
import time
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from aggregate_graph import AggregateGraphError, QuorumError, wrap_openai
from aggregate_graph.drawing.settings import CandidatePolicy
from aggregate_graph.errors import error_kind, is_transient
from aggregate_graph.openai_compat.quorum_errors import QuorumAPIError, upstream_error
from aggregate_graph.sample_set import Candidate, SampleSet
from tests.test_wrap_openai import QUESTION, math_replies


def client(server: Any, cls: type = OpenAI, **kwargs: Any) -> Any:
    return cls(base_url=server.base_url, api_key="upstream-key", max_retries=0, **kwargs)


def _check(error: Any, cls: type[openai.APIError], calls: int, upstream: Any) -> None:
    assert type(error) is not cls and isinstance(error, cls)  # the openai class itself, through a subclass
    assert isinstance(error, QuorumError) and isinstance(error, AggregateGraphError)
    assert error.sample_set is not None and len(error.sample_set.failed) == len(error.sample_set.candidates) == 2
    assert str(error.request.url) == f"{upstream.base_url}/chat/completions"
    assert upstream.calls == calls


@pytest.mark.parametrize(
    ("status", "cls", "calls"),
    [
        (400, openai.BadRequestError, 2),  # the n request, and one single request telling it is not about n
        (401, openai.AuthenticationError, 1),
        (403, openai.PermissionDeniedError, 1),
        (404, openai.NotFoundError, 1),
        (409, openai.ConflictError, 3),  # transient: each sample on its own
        (422, openai.UnprocessableEntityError, 2),
        (429, openai.RateLimitError, 3),
        (500, openai.InternalServerError, 3),
        (503, openai.InternalServerError, 3),
        (418, openai.APIStatusError, 2),
    ],
)
def test_every_candidate_failing_with_a_status_raises_its_openai_class(serve, status, cls, calls) -> None:
    upstream = serve(
        failure_rate=1.0, failure_status=status, failure_message=f"refused with {status}", failure_code=f"code_{status}"
    )
    wrapped = wrap_openai(client(upstream), n=2)
    with pytest.raises(cls) as caught:
        wrapped.chat.completions.create(model="m", messages=QUESTION)
    error = caught.value
    _check(error, cls, calls, upstream)
    # what the unwrapped client carries: the status, a real response, the upstream's error object and message
    with pytest.raises(cls) as unwrapped:
        client(upstream).chat.completions.create(model="m", messages=QUESTION)
    assert error.status_code == error.response.status_code == status
    assert error.body == unwrapped.value.body and error.response.json()["error"] == error.body
    assert (
        (error.code, error.type) == (unwrapped.value.code, unwrapped.value.type) == (f"code_{status}", "server_error")
    )
    assert error.message.startswith(f"Error code: {status} - ")
    assert f"refused with {status}" in error.message
    assert {c.error_status for c in error.sample_set.failed} == {status}
    assert {c.error_kind for c in error.sample_set.failed} == {"status"}


async def test_the_async_client_raises_the_same_classes(serve) -> None:
    upstream = serve(failure_rate=1.0, failure_status=429)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=2)
    with pytest.raises(openai.RateLimitError) as caught:
        await wrapped.chat.completions.create(model="m", messages=QUESTION)
    _check(caught.value, openai.RateLimitError, 3, upstream)


def test_timeouts_raise_api_timeout_error_the_clients_and_the_graphs_alike(serve) -> None:
    upstream = serve(math_replies, latency_s=1.0)
    wrapped = wrap_openai(client(upstream), n=2)
    with pytest.raises(openai.APITimeoutError) as caught:
        wrapped.chat.completions.create(model="m", messages=QUESTION, timeout=0.2)  # the client's own timeout
    _check(caught.value, openai.APITimeoutError, 3, upstream)
    assert caught.value.message.startswith("Request timed out.")

    bounded = wrap_openai(client(upstream), n=2, policy=CandidatePolicy(timeout_s=0.2, max_attempts=1))
    with pytest.raises(openai.APITimeoutError) as caught:
        bounded.chat.completions.create(model="m", messages=QUESTION)  # the graph's bound on each candidate
    assert all(c.error.startswith("TimeoutError") for c in caught.value.sample_set.failed)
    assert {c.error_kind for c in caught.value.sample_set.failed} == {"timeout"}


def test_an_unreachable_upstream_raises_api_connection_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    wrapped = wrap_openai(OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0), n=2)
    with pytest.raises(openai.APIConnectionError) as caught:
        wrapped.chat.completions.create(model="m", messages=QUESTION)
    error = caught.value
    assert not isinstance(error, openai.APITimeoutError) and isinstance(error, QuorumError)
    assert all(c.error.startswith("APIConnectionError") for c in error.sample_set.failed)
    assert {c.error_kind for c in error.sample_set.failed} == {"connection"}


def _failed(index: int, error: str, status: int | None = None, kind: str = "status") -> Candidate:
    return Candidate(index=index, model="m", error=error, error_status=status, error_kind=kind)


def test_mixed_causes_raise_a_plain_api_error_with_the_quorum_message() -> None:
    sample_set = SampleSet(
        question="q",
        candidates=[
            _failed(0, "RateLimitError: Error code: 429 - slow down", 429),
            _failed(1, "APITimeoutError: Request timed out.", kind="timeout"),
        ],
    )
    quorum = QuorumError("only 0 of 2 candidates succeeded, below min_candidates=1; errors: …", sample_set)
    error = upstream_error(quorum, "http://upstream.test/v1/chat/completions")
    assert type(error) is QuorumAPIError
    assert isinstance(error, openai.APIError) and not isinstance(
        error, openai.APIStatusError | openai.APIConnectionError
    )
    assert isinstance(error, QuorumError) and error.sample_set is sample_set
    assert str(error) == str(quorum) and str(error.request.url) == "http://upstream.test/v1/chat/completions"
    # a quorum missed with no failed candidate has no upstream cause: it stays as it is
    nothing_failed = QuorumError("no failures", SampleSet(question="q"))
    assert upstream_error(nothing_failed, "http://x") is nothing_failed


def test_a_stream_that_fails_before_its_first_candidate_raises_at_create(serve) -> None:
    upstream = serve(failure_rate=1.0, failure_status=429, latency_s=0.1)
    wrapped = wrap_openai(client(upstream), n=2)
    with pytest.raises(openai.RateLimitError) as caught:
        wrapped.chat.completions.create(model="m", messages=QUESTION, stream=True)  # no chunk read
    assert isinstance(caught.value, QuorumError) and len(caught.value.sample_set.failed) == 2


async def test_an_async_stream_that_fails_raises_at_create_too(serve) -> None:
    upstream = serve(failure_rate=1.0, failure_status=404)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=2)
    with pytest.raises(openai.NotFoundError):
        await wrapped.chat.completions.create(model="m", messages=QUESTION, stream=True)
    assert upstream.calls == 1


def test_a_stream_is_handed_over_once_the_quorum_is_in_and_then_streams_the_rest(serve) -> None:
    upstream = serve(math_replies, n_mode="ignore", latency_s=0.3)
    wrapped = wrap_openai(client(upstream), n=3, min_candidates=2)
    started = time.perf_counter()
    stream = wrapped.chat.completions.create(model="m", messages=QUESTION, stream=True)
    handed_over = time.perf_counter() - started
    chunks = list(stream)
    candidates = [c for c in chunks if getattr(c, "candidate", None) is not None]
    assert len(candidates) == 3 and handed_over >= 0.3  # not before two candidates had succeeded
    assert chunks[-1].choices[0].finish_reason == "stop"


def _status_error(status: int) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://upstream.test/v1/chat/completions")
    return openai.RateLimitError("slow down", response=httpx.Response(status, request=request), body=None)


@pytest.mark.parametrize(
    ("exc", "kind", "transient"),
    [
        (_status_error(429), "status", True),
        (openai.APITimeoutError(httpx.Request("POST", "http://x")), "timeout", True),
        (TimeoutError("the graph's bound"), "timeout", True),
        (httpx.ReadTimeout("slow"), "timeout", True),
        (openai.APIConnectionError(request=httpx.Request("POST", "http://x")), "connection", True),
        (httpx.ConnectError("refused"), "connection", True),
        (ConnectionResetError("reset"), "connection", True),
        (tarfile.ReadError("a tar file, not a network"), "other", False),
        (ValueError("a bug"), "other", False),
    ],
)
def test_each_failure_is_recorded_with_its_kind(exc: BaseException, kind: str, transient: bool) -> None:
    assert error_kind(exc) == kind and is_transient(exc) is transient
