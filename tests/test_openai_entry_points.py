"""Every entry point of a wrapped client aggregates or refuses — none sends an unaggregated request silently:
`chat.completions.parse` / `.stream` and `responses.create` / `.parse` / `.stream` aggregate; `responses.compact`,
legacy `completions`, Assistants runs and realtime sessions raise RequestError unless aggregation is off for the
call. Also: the wrapped `create` keeps openai's signature, and one compiled graph serves every call of the same
shape, each with its own request."""

from __future__ import annotations

import asyncio
import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel

from aggregate_graph import sample_sets_from, wrap_openai
from aggregate_graph.openai_compat import RequestError
from aggregate_graph.openai_compat.engine import ENGINE_ATTRIBUTE
from benchmarks.proxy_load import sum_reply
from tests.test_openai_tools import CALL_6_7, CALL_6_8
from tests.test_wrap_openai import QUESTION

OFF = {"aggregation": {"enabled": False}}


class Pair(BaseModel):
    a: int
    b: int


class Multiply(BaseModel):
    """Multiply two integers."""

    a: int
    b: int


JSON_REPLIES = ['{"a": 1, "b": 2}', '{"a": 3, "b": 4}', '{"b": 2, "a": 1}']


def client(server: Any, cls: type = OpenAI, **kwargs: Any) -> Any:
    return cls(base_url=server.base_url, api_key="upstream-key", max_retries=0, **kwargs)


def test_parse_votes_on_the_json_of_n_candidates_and_parses_the_winner(serve) -> None:
    upstream = serve(JSON_REPLIES)
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.chat.completions.parse(model="m", messages=QUESTION, response_format=Pair)
    assert isinstance(response, openai.types.chat.ParsedChatCompletion)
    assert response.choices[0].message.parsed == Pair(a=1, b=2)
    [sample_set] = sample_sets_from(response)
    assert sample_set.aggregation.votes == {'{"a":1,"b":2}': 2.0, '{"a":3,"b":4}': 1.0}
    [sent] = upstream.requests  # one request with n=3, the model's JSON schema as openai's parse sends it
    assert sent["n"] == 3 and sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "Pair"
    assert upstream.headers[0]["x-stainless-helper-method"] == "chat.completions.parse"


async def test_async_parse_and_parsed_tool_calls(serve) -> None:
    upstream = serve([CALL_6_7, CALL_6_8, CALL_6_7])
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=3)
    response = await wrapped.chat.completions.parse(
        model="m", messages=QUESTION, tools=[openai.pydantic_function_tool(Multiply, name="multiply")]
    )
    [call] = response.choices[0].message.tool_calls
    assert call.function.parsed_arguments == Multiply(a=6, b=7)  # the plan two of three candidates chose
    assert sample_sets_from(response)[0].aggregation.method == "tool_call_vote"


def test_parse_with_aggregation_off_is_openais_own_and_stream_aggregates(serve) -> None:
    upstream = serve(JSON_REPLIES)
    wrapped = wrap_openai(client(upstream), n=3)
    plain = wrapped.chat.completions.parse(model="m", messages=QUESTION, response_format=Pair, extra_body=OFF)
    assert plain.choices[0].message.parsed == Pair(a=1, b=2) and sample_sets_from(plain) == []
    assert upstream.requests[-1].get("n") is None and "aggregation" not in upstream.requests[-1]

    with wrapped.chat.completions.stream(model="m", messages=QUESTION, response_format=Pair) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "content.done" in events and final.choices[0].message.parsed is not None
    assert upstream.requests[-1]["n"] == 3 and upstream.requests[-1]["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize(
    ("entry_point", "call", "alternative"),
    [
        ("responses.compact", lambda c, **kw: c.responses.compact(model="m", input="hi", **kw), "compaction"),
        ("completions.create", lambda c, **kw: c.completions.create(model="m", prompt="hi", **kw), "legacy"),
        (
            "beta.threads.runs.create_and_poll",
            lambda c, **kw: c.beta.threads.runs.create_and_poll(thread_id="t", assistant_id="a", **kw),
            "Assistants",
        ),
    ],
)
def test_other_entry_points_are_refused_unless_aggregation_is_off(serve, entry_point, call, alternative) -> None:
    upstream = serve()
    wrapped = wrap_openai(client(upstream), n=3)
    with pytest.raises(RequestError, match=rf"{entry_point}\(\) .*{alternative}.*\"enabled\": False") as caught:
        call(wrapped)
    assert isinstance(caught.value, openai.BadRequestError) and caught.value.param == "aggregation"
    # turned off for the call, it is sent as it is: the test server has no such route, so 404 shows it went
    with pytest.raises(openai.NotFoundError):
        result = call(wrapped, extra_body=OFF)
        with result:  # `stream` returns a manager that sends on entering
            pass


async def test_async_entry_points_are_refused_too(serve) -> None:
    wrapped = wrap_openai(client(serve(), AsyncOpenAI), n=3)
    with pytest.raises(RequestError, match="legacy completions"):
        await wrapped.completions.create(model="m", prompt="hi")
    with pytest.raises(openai.NotFoundError):
        await wrapped.completions.create(model="m", prompt="hi", extra_body=OFF)


def test_realtime_sessions_and_raw_responses_wrapped_before_are_refused(serve) -> None:
    plain = client(serve())
    raw_responses = plain.responses.with_raw_response  # cached before wrapping: it must not keep the original
    wrapped = wrap_openai(plain, n=3)
    assert raw_responses is not wrapped.responses.with_raw_response
    with pytest.raises(RequestError, match="with_raw_response"):
        wrapped.responses.with_raw_response.create(model="m", input="hi")
    for connect in (wrapped.responses.connect, wrapped.realtime.connect):
        with pytest.raises(RequestError, match=r"realtime session .* cannot be aggregated"):
            connect()
    copy = wrapped.with_options(timeout=5)  # a wrapped copy refuses the same
    with pytest.raises(RequestError, match="legacy completions"):
        copy.completions.create(model="m", prompt="hi")


def test_the_patched_create_keeps_openais_signature_and_the_clients_type(serve) -> None:
    plain = client(serve())
    original = plain.chat.completions.create
    wrapped: OpenAI = wrap_openai(plain)  # typed as it came (ClientT)
    create = wrapped.chat.completions.create
    assert create.__wrapped__ == original and create.__name__ == "create"
    assert "messages" in inspect.signature(create).parameters and "Wrapped by aggregate_graph" in create.__doc__
    assert wrapped.chat.completions.parse.__name__ == "parse"


def _sum_question(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Request {i}: what is {i} plus {2 * i}?"}]


def test_one_graph_serves_every_call_of_a_shape_each_with_its_own_request(serve) -> None:
    # single requests (the upstream ignores n) drawn from thread pools: every call's own messages and options
    upstream = serve(sum_reply, n_mode="ignore", latency_s=0.05)
    wrapped = wrap_openai(client(upstream), n=3)

    def ask(i: int) -> Any:
        return wrapped.chat.completions.create(model="m", messages=_sum_question(i), seed=i)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(ask, range(16)))
    for i, response in enumerate(responses):
        [sample_set] = sample_sets_from(response)
        assert sample_set.question == _sum_question(i)[0]["content"] and sample_set.aggregation.answer == str(3 * i)
        assert {c.model for c in sample_set.candidates} == {"m"}
    for sent in upstream.requests:
        i = int(sent["messages"][0]["content"].split()[1].rstrip(":"))
        assert sent["seed"] == i and sent["model"] == "m"
    engine = getattr(wrapped.chat.completions, ENGINE_ATTRIBUTE)
    assert engine.graphs_built == 1
    wrapped.chat.completions.create(model="m", messages=_sum_question(1), extra_body={"aggregation": {"n": 2}})
    wrapped.chat.completions.create(model="other", messages=_sum_question(2))
    assert engine.graphs_built == 3  # another n, another model: another shape


async def test_concurrent_async_calls_share_the_graph_and_keep_their_own_answers(serve) -> None:
    upstream = serve(sum_reply, latency_s=0.05)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=3)
    responses = await asyncio.gather(
        *(wrapped.chat.completions.create(model="m", messages=_sum_question(i)) for i in range(20))
    )
    assert [sample_sets_from(r)[0].aggregation.answer for r in responses] == [str(3 * i) for i in range(20)]
    assert getattr(wrapped.chat.completions, ENGINE_ATTRIBUTE).graphs_built == 1


def test_the_beta_chat_completions_resource_aggregates_too(serve) -> None:
    upstream = serve(JSON_REPLIES)
    wrapped = wrap_openai(client(upstream), n=3)
    beta = getattr(getattr(wrapped.beta, "chat", None), "completions", None)
    if beta is None or beta is wrapped.chat.completions:
        pytest.skip("this openai has no separate beta.chat.completions")
    response = beta.create(model="m", messages=QUESTION)
    assert len(sample_sets_from(response)[0].candidates) == 3
    assert beta.parse(model="m", messages=QUESTION, response_format=Pair).choices[0].message.parsed == Pair(a=1, b=2)
    with beta.stream(model="m", messages=QUESTION, response_format=Pair) as stream:
        assert stream.get_final_completion().choices[0].message.parsed == Pair(a=1, b=2)
    assert [r.get("n") for r in upstream.requests] == [3, 3, 3]
