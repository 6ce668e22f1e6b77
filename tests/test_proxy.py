"""The proxy: the real openai client (sync, async, streaming) → the real proxy → a real upstream, all on
127.0.0.1; and the abuse cases a shared server must answer in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI, OpenAI
from pydantic import SecretStr

from aggregate_graph import sample_sets_from
from aggregate_graph.openai_compat.proxy import create_proxy_app, serve_proxy
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from aggregate_graph.testing import OpenAITestServer
from aggregate_graph.testing.threaded import running
from tests.test_openai_tools import CALL_6_7, CALL_6_8, MULTIPLY_TOOL, streamed_answer
from tests.test_wrap_openai import QUESTION, SSA_OUTPUT, math_replies

UPSTREAM_KEY = "UPSTREAMsecret0123456789"  # not shaped like an OpenAI key: only the exact match can scrub it
CLIENT_KEY = "client-key-1"


@contextmanager
def proxy_for(upstream: OpenAITestServer, **settings: Any) -> Iterator[str]:
    settings.setdefault("api_key", CLIENT_KEY)
    config = ProxyConfig(upstream=upstream.base_url, upstream_api_key=UPSTREAM_KEY, **settings)
    with running(create_proxy_app(config)) as base_url:
        yield base_url


def test_sync_client_gets_an_aggregation_and_the_upstream_gets_only_the_proxys_key(serve) -> None:
    upstream = serve(math_replies)
    with proxy_for(upstream, n=5) as url:
        response = OpenAI(base_url=url, api_key=CLIENT_KEY).chat.completions.create(
            model="gpt-test", messages=QUESTION, temperature=0.5
        )
    assert response.choices[0].message.content == "Six sevens: 42. The answer is 42."
    [sample_set] = sample_sets_from(response)
    assert sample_set.aggregation.votes == {"42": 4.0, "41": 1.0}
    assert response.usage.total_tokens == sample_set.usage.total_tokens
    assert upstream.requests[0]["n"] == 5 and upstream.requests[0]["temperature"] == 0.5
    assert upstream.authorizations == [f"Bearer {UPSTREAM_KEY}"]  # never the client's key


async def test_async_streaming_through_the_proxy_is_live(serve) -> None:
    upstream = serve(math_replies, token_latency_s=0.05)
    with proxy_for(upstream, n=3) as url:
        client = AsyncOpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        stream = await client.chat.completions.create(
            model="ssa/m", messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        started, seen = time.perf_counter(), []
        async for chunk in stream:
            seen.append((time.perf_counter() - started, chunk))
    candidates = [c for _, c in seen if getattr(c, "candidate", None) is not None]
    reasoning = [(t, c) for t, c in seen if c.choices and c.choices[0].delta.model_extra.get("reasoning_content")]
    assert len(candidates) == 3
    assert "".join(c.choices[0].delta.model_extra["reasoning_content"] for _, c in reasoning) == SSA_OUTPUT
    assert reasoning[-1][0] - reasoning[0][0] >= 0.7 * 0.05 * (len(SSA_OUTPUT.split()) - 1)
    finish = next(c for _, c in seen if c.choices and c.choices[0].finish_reason == "stop")
    aggregation = sample_sets_from(finish)[0].aggregation
    assert aggregation.answer == "42" and aggregation.details["parse_status"] == "parsed"
    # usage: the upstream's own count of prompt tokens billed (3 candidates in one request, then the aggregator)
    assert seen[-1][1].usage.prompt_tokens == upstream.prompt_tokens_billed and upstream.calls == 2


def test_langchain_chat_openai_works_by_changing_base_url(serve) -> None:
    upstream = serve(math_replies)
    with proxy_for(upstream) as url:
        model = ChatOpenAI(base_url=url, api_key=CLIENT_KEY, model="m", max_retries=0)
        answer = model.invoke([HumanMessage("What is 6 times 7?")])
        streamed = "".join(chunk.text for chunk in model.stream([HumanMessage("What is 6 times 7?")]))
    assert answer.content == "Six sevens: 42. The answer is 42." and "42" in streamed


def test_an_unmodified_client_gets_aggregated_tool_calls_and_json(serve) -> None:
    upstream = serve([CALL_6_7, CALL_6_8, CALL_6_7])
    with proxy_for(upstream, n=3) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        response = client.chat.completions.create(model="m", messages=QUESTION, tools=[MULTIPLY_TOOL])
        streamed = streamed_answer(
            client.chat.completions.create(model="m", messages=QUESTION, tools=[MULTIPLY_TOOL], stream=True)
        )
        upstream.replies = ['{"a": 1, "b": 2}', '{"a": 3}', '{"b": 2, "a": 1}']
        structured = client.chat.completions.create(
            model="m", messages=QUESTION, response_format={"type": "json_object"}
        )
    [choice] = response.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("multiply", {"a": 6, "b": 7})
    assert sample_sets_from(response)[0].aggregation.method == "tool_call_vote"
    content, calls, finish = streamed
    assert (content, finish) == ("", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls] == [("multiply", {"a": 6, "b": 7})]
    assert json.loads(structured.choices[0].message.content) == {"a": 1, "b": 2}
    assert sample_sets_from(structured)[0].aggregation.votes == {'{"a":1,"b":2}': 2.0, '{"a":3}': 1.0}
    assert [r.get("tools") for r in upstream.requests] == [[MULTIPLY_TOOL]] * 2 + [None]
    assert upstream.requests[-1]["response_format"] == {"type": "json_object"}


def test_models_lists_the_upstreams_and_each_method_prefix(serve) -> None:
    with proxy_for(serve()) as url:
        ids = [m.id for m in OpenAI(base_url=url, api_key=CLIENT_KEY).models.list()]
    methods = ["gsr", "majority", "medoid", "recursive", "ssa", "structured_vote", "usc", "weighted"]  # no scorer
    assert ids == ["test-model", *(f"{method}/test-model" for method in methods)]


def test_aggregation_off_passes_through_streams_included(serve) -> None:
    upstream = serve(math_replies, token_latency_s=0.01)
    with proxy_for(upstream) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY)
        off = {"aggregation": {"enabled": False}}
        response = client.chat.completions.create(model="m", messages=QUESTION, extra_body=off)
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(model="m", messages=QUESTION, stream=True, extra_body=off)
            if c.choices
        )
    assert sample_sets_from(response) == [] and upstream.requests[0].get("n") is None
    assert response.choices[0].message.content == "Six sevens: 42. The answer is 42."
    assert text == "The answer is 42."


def _tool_call(arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}


def _error(call: Callable[[], Any]) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def test_keys_are_required_and_checked(serve) -> None:
    upstream = serve()
    with proxy_for(upstream) as url:
        for key in ("wrong-key", None):
            client = OpenAI(base_url=url, api_key="unused", max_retries=0)
            headers = {"Authorization": f"Bearer {key}"} if key else {"Authorization": ""}
            error = _error(
                lambda c=client, h=headers: c.chat.completions.create(model="m", messages=QUESTION, extra_headers=h)
            )
            assert error.status_code == 401 and error.body["code"] == "invalid_api_key"
        assert httpx.get(f"{url}/models").status_code == 401
    assert upstream.calls == 0
    with pytest.raises(ValueError, match=r"refusing to serve on '0\.0\.0\.0' without an API key"):
        serve_proxy(ProxyConfig(upstream=upstream.base_url), host="0.0.0.0", port=0)


@pytest.mark.parametrize(
    ("request_options", "status", "match"),
    [
        ({"n": 10**6}, 400, r"1000000 answer\(s\) × 5 candidates"),
        ({"extra_body": {"aggregation": {"n": 100}}}, 400, "over the cap of 64"),
        ({"extra_body": {"aggregation": {"method": "median"}}}, 400, "unknown aggregation method 'median'"),
        ({"messages": [{"role": "user", "content": "x" * 300_000}]}, 400, "300033 characters"),
        (  # the limit counts the whole message, not only its content
            {"messages": [*QUESTION, {"role": "assistant", "tool_calls": [_tool_call("y" * 300_000)]}, *QUESTION]},
            400,
            "this server takes at most 200000",
        ),
        ({"n": 100, "extra_body": {"aggregation": {"enabled": False}}}, 400, "n=100 is over the cap of 64"),
        ({"stream": "false"}, 400, "stream must be a boolean"),
        ({"messages": []}, 400, "messages must be a non-empty list"),
        ({"messages": [{"content": "hi"}]}, 400, "each message must be an object with a 'role'"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            400,
            "no text",
        ),
        ({"functions": [{"name": "f"}]}, 400, "'functions' is the deprecated form of 'tools'"),
        (
            {"response_format": {"type": "json_schema"}, "extra_body": {"aggregation": {"method": "usc"}}},
            400,
            "structured output .* is aggregated by vote",
        ),
    ],
)
def test_bad_requests_get_openai_errors(serve, request_options, status, match) -> None:
    upstream = serve()
    with proxy_for(upstream) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        request = {"model": "m", "messages": QUESTION, **request_options}
        error = _error(lambda: client.chat.completions.create(**request))
    assert error.status_code == status and upstream.calls == 0
    assert error.body["type"] == "invalid_request_error"
    assert re.search(match, error.body["message"])


def test_a_100_mb_body_is_refused_with_413_and_malformed_json_with_400(serve) -> None:
    with proxy_for(serve()) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        huge = [{"role": "user", "content": "x" * (100 * 1024 * 1024)}]
        error = _error(lambda: client.chat.completions.create(model="m", messages=huge))
        assert error.status_code == 413 and "at most 1000000" in error.body["message"]
        auth = {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"}
        # the same without a Content-Length: a chunked upload is counted as it arrives
        chunked = httpx.post(f"{url}/chat/completions", content=(b"x" * 65536 for _ in range(40)), headers=auth)
        assert chunked.status_code == 413 and "2621440 bytes" in chunked.json()["error"]["message"]
        for body in (b"{not json", b"[1, 2]", b"\xff\xfe"):
            response = httpx.post(f"{url}/chat/completions", content=body, headers=auth)
            assert response.status_code == 400
            assert response.json()["error"]["type"] == "invalid_request_error"


def test_requests_over_the_concurrency_limit_get_429(serve) -> None:
    upstream = serve(math_replies, latency_s=0.5)
    with proxy_for(upstream, max_concurrency=1) as url:

        async def both() -> list[Any]:
            client = AsyncOpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
            calls = [client.chat.completions.create(model="m", messages=QUESTION) for _ in range(2)]
            return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio.run(both())
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], openai.RateLimitError)
    assert errors[0].body["code"] == "rate_limit_exceeded"


def test_slots_are_freed_after_streams_errors_and_refusals(serve) -> None:
    upstream = serve(math_replies)
    with proxy_for(upstream, max_concurrency=1) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        for _ in range(2):
            list(client.chat.completions.create(model="m", messages=QUESTION, stream=True))
            with client.chat.completions.create(model="m", messages=QUESTION, stream=True) as stream:
                next(iter(stream))  # the client hangs up after one chunk
            _error(lambda: client.chat.completions.create(model="m", messages=QUESTION, logprobs=True))
            _error(lambda: client.chat.completions.create(model="m", messages=QUESTION, n=10**6))
        time.sleep(0.5)  # the abandoned stream's slot is freed when the server notices
        response = client.chat.completions.create(model="m", messages=QUESTION)  # not 429: every slot came back
    assert response.choices[0].message.content


@pytest.mark.parametrize("settle", [True, False])
def test_a_client_hanging_up_midstream_cancels_the_candidate_requests_still_out(serve, settle: bool) -> None:
    # the upstream refuses n at once, then the probe's single answers at once and the other four would take 8 s;
    # the client reads the first chunk and hangs up: the proxy closes their requests, as it does once a vote settles
    upstream = serve(["The answer is 42."], latency_s=lambda body, k: 0.05 if k < 2 else 8.0, n_mode="reject")
    with proxy_for(upstream, n=5, settle=settle) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        with client.chat.completions.create(model="m", messages=QUESTION, stream=True) as stream:
            next(iter(stream))
            deadline = time.monotonic() + 3.0  # the four slow singles sent (they follow the probe) before hanging up
            while upstream.calls < 6 and time.monotonic() < deadline:
                time.sleep(0.01)
        deadline = time.monotonic() + 3.0
        while (upstream.in_flight or upstream.aborted < 4) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert upstream.in_flight == 0 and upstream.aborted == 4 and upstream.samples_served == 1


def test_a_stream_every_candidate_fails_is_answered_with_its_status_not_a_200(serve) -> None:
    upstream = serve(failure_rate=1.0, failure_status=404, failure_message="The model 'nope' does not exist")
    with proxy_for(upstream, upstream_retries=0) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(openai.NotFoundError, match="does not exist"):
            client.chat.completions.create(model="nope", messages=QUESTION, stream=True)
    assert upstream.calls == 1  # a refused model is not asked again one sample at a time


def test_a_request_over_the_wall_time_or_a_slow_upstream_gets_504(serve) -> None:
    upstream = serve(math_replies, latency_s=3)
    with proxy_for(upstream, max_request_s=0.5) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        started = time.perf_counter()
        error = _error(lambda: client.chat.completions.create(model="m", messages=QUESTION))
    assert error.status_code == 504 and time.perf_counter() - started < 2.5
    with proxy_for(upstream, upstream_timeout_s=0.3, upstream_retries=0) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        error = _error(lambda: client.chat.completions.create(model="m", messages=QUESTION))
    assert error.status_code == 504 and error.body["code"] == "upstream_timeout"
    assert all(c["error"].startswith("APITimeoutError") for c in error.body["sample_set"]["candidates"])


def test_upstream_key_is_scrubbed_from_errors_sample_sets_and_logs(serve, caplog) -> None:
    # An upstream that quotes the key it was sent, as OpenAI's own 401 message does.
    upstream = serve(failure_rate=1.0, failure_status=401, failure_message=f"Incorrect API key: {UPSTREAM_KEY}")
    caplog.set_level(logging.DEBUG)
    with proxy_for(upstream, upstream_retries=0) as url:
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        error = _error(lambda: client.chat.completions.create(model="m", messages=QUESTION))
        raw = httpx.post(
            f"{url}/chat/completions",
            json={"model": "m", "messages": QUESTION},
            headers={"Authorization": f"Bearer {CLIENT_KEY}"},
        ).text
    assert error.status_code == 502  # the proxy's credentials were refused: not the client's fault
    assert UPSTREAM_KEY not in raw
    assert UPSTREAM_KEY not in caplog.text
    # what was drawn comes back with the error, scrubbed
    candidates = error.body["sample_set"]["candidates"]
    assert len(candidates) == 5 and all("Incorrect API key: ***" in c["error"] for c in candidates)


def test_upstream_errors_map_to_openai_statuses(serve) -> None:
    for upstream_status, expected, calls in ((404, 404, 1), (401, 502, 1), (429, 429, 6), (500, 502, 6), (400, 400, 2)):
        upstream = serve(failure_rate=1.0, failure_status=upstream_status)
        with proxy_for(upstream, upstream_retries=0) as url:
            client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
            error = _error(lambda c=client: c.chat.completions.create(model="m", messages=QUESTION))
        assert error.status_code == expected, upstream_status
        # After the n request: a transient failure asks the five samples one by one; a 400 may be about `n`, so one
        # single request tells (refused the same way: the request itself is refused); a refused key or model: none.
        assert upstream.calls == calls, upstream_status


def test_partial_failure_answers_from_the_survivors(serve) -> None:
    # Single requests (the upstream rejects n), a third of them failing, no retries: the survivors vote.
    upstream = serve(math_replies, n_mode="reject", failure_rate=0.35, seed=7)
    with proxy_for(upstream, n=6, upstream_retries=0) as url:
        response = OpenAI(base_url=url, api_key=CLIENT_KEY).chat.completions.create(model="m", messages=QUESTION)
    [sample_set] = sample_sets_from(response)
    assert sample_set.failed and len(sample_set.succeeded) >= 2
    assert {c.error_status for c in sample_set.failed} == {500}
    assert sample_set.aggregation.answer in ("42", "41")


def test_cli_proxy_serves_a_real_client(serve, tmp_path) -> None:
    upstream = serve(math_replies)
    env = {**os.environ, "OPENAI_API_KEY": UPSTREAM_KEY, "AGGREGATE_GRAPH_PROXY_KEY": CLIENT_KEY}
    port = _free_port()
    command = [sys.executable, "-m", "aggregate_graph.cli", "proxy", "--upstream", upstream.base_url]
    process = subprocess.Popen([*command, "--port", str(port), "--n", "3"], env=env, stderr=subprocess.PIPE)
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=CLIENT_KEY, max_retries=0)
        deadline = time.monotonic() + 60
        while True:
            try:
                response = client.chat.completions.create(model="m", messages=QUESTION)
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        assert len(sample_sets_from(response)[0].candidates) == 3
        assert upstream.authorizations[-1] == f"Bearer {UPSTREAM_KEY}"
    finally:
        process.terminate()
        stderr = process.communicate(timeout=20)[1].decode()
    assert UPSTREAM_KEY not in stderr and "client key required" in stderr

    refused = subprocess.run(
        [*command, "--host", "0.0.0.0"], env={**env, "AGGREGATE_GRAPH_PROXY_KEY": ""}, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "without an API key" in refused.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the proxy's pieces, each by itself --------------------------------------------------------------


def test_failures_map_to_scrubbed_openai_errors() -> None:
    from aggregate_graph.openai_compat.proxy import proxy_error
    from aggregate_graph.openai_compat.proxy_config import Scrubber
    from aggregate_graph.openai_compat.request import RequestError
    from aggregate_graph.serve.http import OpenAIError

    scrub = Scrubber(SecretStr(UPSTREAM_KEY))
    own = OpenAIError(429, "busy")
    assert proxy_error(own, scrub, max_request_s=1) is own
    bad = proxy_error(RequestError("n must be positive", param="n"), scrub, max_request_s=1)
    assert (bad.status, bad.param) == (400, "n")
    late = proxy_error(TimeoutError(), scrub, max_request_s=2.5)
    assert (late.status, late.code, late.message) == (504, "upstream_timeout", "the request took longer than 2.5s")
    crash = proxy_error(RuntimeError(f"boom with {UPSTREAM_KEY}"), scrub, max_request_s=1)
    assert (crash.status, crash.kind) == (500, "server_error") and UPSTREAM_KEY not in crash.message


def test_request_slots_refuse_past_the_limit_and_release_once() -> None:
    from aggregate_graph.openai_compat.proxy import RequestSlots
    from aggregate_graph.serve.http import OpenAIError

    slots = RequestSlots(1)
    release = slots.take()
    with pytest.raises(OpenAIError) as refused:
        slots.take()
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    release()
    release()  # a second release of the same slot frees nothing more
    assert slots.used == 0
    slots.take()
    assert slots.used == 1


def test_request_arguments_and_the_prompt_limit() -> None:
    from aggregate_graph.openai_compat.proxy_wire import check_prompt_size, create_arguments
    from aggregate_graph.serve.http import OpenAIError

    body = {"model": "m", "messages": QUESTION, "top_k": 5, "aggregation": {"n": 3}}
    assert create_arguments(body) == {
        "model": "m",
        "messages": QUESTION,
        "extra_body": {"top_k": 5, "aggregation": {"n": 3}},
    }
    check_prompt_size(body, 1000)
    with pytest.raises(OpenAIError) as too_long:
        check_prompt_size(body, 10)
    assert too_long.value.code == "context_length_exceeded" and too_long.value.param == "messages"


async def test_a_stream_that_fails_midway_ends_with_the_error_then_done() -> None:
    from aggregate_graph.openai_compat.proxy import proxy_error
    from aggregate_graph.openai_compat.proxy_config import Scrubber
    from aggregate_graph.openai_compat.proxy_wire import sse_events

    class Chunk:
        def model_dump(self, **_: Any) -> dict[str, Any]:
            return {"choices": [{"delta": {"content": f"key {UPSTREAM_KEY}"}}]}

    class Stream:
        closed = False

        async def __aiter__(self) -> Any:
            yield Chunk()
            raise RuntimeError(f"upstream gone ({UPSTREAM_KEY})")

        async def close(self) -> None:
            self.closed = True

    scrub, stream, released = Scrubber(SecretStr(UPSTREAM_KEY)), Stream(), []
    events = [
        event
        async for event in sse_events(
            stream,
            scrub=scrub,
            to_error=lambda exc: proxy_error(exc, scrub, max_request_s=1),
            release=lambda: released.append(True),
            deadline=asyncio.get_running_loop().time() + 10,
        )
    ]
    assert events[-1] == "data: [DONE]\n\n" and all(e.startswith("data: ") for e in events)
    assert json.loads(events[0][6:])["choices"][0]["delta"]["content"] == "key ***"
    assert json.loads(events[1][6:])["error"]["type"] == "server_error"
    assert UPSTREAM_KEY not in "".join(events) and released == [True] and stream.closed
