"""The proxy's `POST /v1/responses`: the real OpenAI Agents SDK and the real openai client → the real proxy → an
upstream that speaks only the Responses API, all on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from agents import Runner
from openai import AsyncOpenAI, OpenAI

from aggregate_graph import sample_sets_from
from tests.test_proxy import CLIENT_KEY, UPSTREAM_KEY, proxy_for
from tests.test_responses_api import MULTIPLY, agent_with_multiply, math_replies, tool_replies


def proxy_client(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)


async def test_an_agents_sdk_agent_gets_the_voted_tool_call_and_answers_with_its_result(serve) -> None:
    upstream = serve(tool_replies, apis=("responses",))
    ran: list[tuple[int, int]] = []
    with proxy_for(upstream, n=3, settle=False) as url:  # every candidate, to count the calls
        result = await Runner.run(agent_with_multiply(proxy_client(url), ran), "What is 6 times 7?")
    assert ran == [(6, 7)]  # the plan two of three candidates chose, run once
    assert result.final_output == "6 times 7 is 42. The answer is 42."
    assert upstream.calls == 6  # 3 upstream calls for each of the agent's two model calls
    first, last = upstream.requests[0], upstream.requests[-1]
    assert first["instructions"] == "Use the tool." and first["tools"][0]["name"] == "multiply"
    assert "n" not in first and upstream.authorizations == [f"Bearer {UPSTREAM_KEY}"] * 6
    outputs = [item for item in last["input"] if item.get("type") == "function_call_output"]
    assert [item["output"] for item in outputs] == ["42"]


async def test_a_streamed_agents_sdk_run_gets_the_same(serve) -> None:
    upstream = serve(tool_replies, apis=("responses",))
    ran: list[tuple[int, int]] = []
    with proxy_for(upstream, n=3, settle=False) as url:  # every candidate, to count the calls
        streamed = Runner.run_streamed(agent_with_multiply(proxy_client(url), ran), "What is 6 times 7?")
        raw = [event.data.type async for event in streamed.stream_events() if event.type == "raw_response_event"]
    assert ran == [(6, 7)] and upstream.calls == 6
    assert streamed.final_output == "6 times 7 is 42. The answer is 42."
    assert raw.count("response.created") == raw.count("response.completed") == 2
    assert "response.output_text.delta" in raw and "response.function_call_arguments.done" in raw


def test_the_openai_client_gets_a_response_plain_and_streamed(serve) -> None:
    upstream = serve(math_replies, apis=("responses",))
    with proxy_for(upstream, n=3, settle=False) as url:  # every candidate, to check the votes and the calls
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        response = client.responses.create(model="gpt-test", input="What is 6 times 7?", max_output_tokens=64)
        with client.responses.stream(model="gpt-test", input="What is 6 times 7?", tools=[MULTIPLY]) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
    assert sample_sets_from(response)[0].aggregation.votes == {"42": 2.0, "41": 1.0}
    assert response.usage.total_tokens == sample_sets_from(response)[0].usage.total_tokens > 0
    assert "".join(deltas) == final.output_text and final.output_text.endswith("The answer is 42.")
    assert len(sample_sets_from(final)[0].candidates) == 3  # on the closing event's response
    assert upstream.calls == 6 and all("n" not in sent for sent in upstream.requests)
    assert upstream.requests[0]["max_output_tokens"] == 64 and upstream.requests[-1]["tools"] == [MULTIPLY]


def test_the_responses_route_has_the_chat_routes_auth_refusals_and_error_json(serve) -> None:
    upstream = serve(math_replies, apis=("responses",))
    with proxy_for(upstream, n=3) as url:
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=url, api_key="wrong", max_retries=0).responses.create(model="m", input="hi")
        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="m", input="What is 6 times 7?", previous_response_id="resp_1")
        assert refused.value.body["param"] == "previous_response_id"
        assert "send the whole conversation in `input`" in refused.value.body["message"]
        over = httpx.post(
            f"{url}/responses",
            json={"model": "m", "input": "x" * 300_000},
            headers={"Authorization": f"Bearer {CLIENT_KEY}"},
        )
        assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded"
    assert upstream.calls == 0
    failing = serve(math_replies, apis=("responses",), failure_rate=1.0, failure_status=429)
    with proxy_for(failing, n=2) as url:
        with pytest.raises(openai.RateLimitError) as limited:
            OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0).responses.create(model="m", input="6 * 7?")
        streamed = httpx.post(
            f"{url}/responses",
            json={"model": "m", "input": "6 * 7?", "stream": True},
            headers={"Authorization": f"Bearer {CLIENT_KEY}"},
        )
    error: Any = limited.value.body
    assert len(error["sample_set"]["candidates"]) == 2 and UPSTREAM_KEY not in json.dumps(error)
    assert streamed.status_code == 429  # a stream every candidate fails is answered with its status, not a 200


def test_a_responses_stream_that_fails_midway_ends_with_an_error_event_the_client_raises() -> None:
    from fastapi import FastAPI
    from pydantic import SecretStr

    from aggregate_graph.openai_compat.proxy import proxy_error
    from aggregate_graph.openai_compat.proxy_config import Scrubber
    from aggregate_graph.openai_compat.proxy_wire import sse_events, stream_response
    from aggregate_graph.testing.threaded import running

    class Event:
        def model_dump(self, **_: Any) -> dict[str, Any]:
            return {"type": "response.created", "sequence_number": 0, "response": {"id": f"resp_{UPSTREAM_KEY}"}}

    class Stream:
        async def __aiter__(self) -> Any:
            yield Event()
            raise RuntimeError(f"upstream gone ({UPSTREAM_KEY})")

        async def close(self) -> None:
            pass

    scrub = Scrubber(SecretStr(UPSTREAM_KEY))
    app = FastAPI()

    @app.post("/v1/responses")
    async def respond() -> Any:
        events = sse_events(
            Stream(),
            scrub=scrub,
            to_error=lambda exc: proxy_error(exc, scrub, max_request_s=1),
            release=lambda: None,
            deadline=float("inf"),
            api="responses",
        )
        return stream_response(events, release=lambda: None)

    with running(app) as url:
        raw = httpx.post(f"{url}/responses", json={}).text
        stream = OpenAI(base_url=url, api_key="k").responses.create(model="m", input="hi", stream=True)
        with pytest.raises(openai.APIError, match="upstream gone"):
            list(stream)
    lines = [line for line in raw.splitlines() if line]
    assert lines[0] == "event: response.created" and lines[2] == "event: error" and "[DONE]" not in raw
    error = json.loads(lines[3].removeprefix("data: "))
    assert error["type"] == "error" and error["sequence_number"] == 1 and error["error"]["type"] == "server_error"
    assert UPSTREAM_KEY not in raw
