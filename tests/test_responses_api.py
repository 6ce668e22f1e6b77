"""wrap_openai and OpenAI's Responses API: `responses.create` (sync, async, streamed), `.parse` and `.stream`
aggregate n separate upstream Responses calls — the Responses API has no `n` — voting over output text,
`function_call` items and `text.format` JSON. The real openai client against a real test server on 127.0.0.1 that
serves only `/v1/responses` and refuses an `n` field, as OpenAI does."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic import BaseModel

from aggregate_graph import QuorumError, sample_sets_from, wrap_openai
from aggregate_graph.openai_compat import RequestError
from tests.test_openai_tools import CALL_6_7, CALL_6_8, MULTIPLY_TOOL, client

MULTIPLY = {"type": "function", **MULTIPLY_TOOL["function"]}  # the Responses API's flat form of the tool
set_tracing_disabled(True)  # the Agents SDK would otherwise export traces to OpenAI
SSA_VERDICT = "<think>Two say 42; 6 times 7 is 42.</think> <answer>42</answer>"


def math_replies(body: dict[str, Any], sample_no: int) -> str:
    """Candidates answer 42, 42, 41, …; an aggregator's prompt gets an SSA-style verdict."""
    if "proposed answers" in json.dumps(body["input"]):
        return SSA_VERDICT
    return ["Six sevens: 42. The answer is 42.", "The answer is 42.", "I get 41. The answer is 41."][sample_no % 3]


def tool_replies(body: dict[str, Any], sample_no: int) -> Any:
    """Two of three candidates call multiply(6, 7), one multiply(6, 8); given the tool's output, they answer."""
    outputs = [item["output"] for item in body["input"] if item.get("type") == "function_call_output"]
    if outputs:
        return f"6 times 7 is {outputs[-1]}. The answer is {outputs[-1]}."
    return CALL_6_8 if sample_no % 3 == 2 else CALL_6_7


def agent_with_multiply(client: Any, ran: list[tuple[int, int]]) -> Agent:
    """An OpenAI Agents SDK agent whose model calls go through `client`'s Responses API."""

    @function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        ran.append((a, b))
        return a * b

    model = OpenAIResponsesModel(model="gpt-test", openai_client=client)
    return Agent(name="calculator", instructions="Use the tool.", tools=[multiply], model=model)


def responses_only(serve: Any, replies: Any, **kwargs: Any) -> Any:
    return serve(replies, apis=("responses",), **kwargs)


def test_the_voted_function_call_comes_back_from_exactly_n_upstream_calls(serve) -> None:
    upstream = responses_only(serve, tool_replies)
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.responses.create(
        model="gpt-test",
        input="What is 6 times 7?",
        instructions="Use the tools.",
        tools=[MULTIPLY],
        temperature=0.3,
        reasoning={"effort": "low"},
    )
    [call] = response.output
    assert call.type == "function_call" and call.name == "multiply" and json.loads(call.arguments) == {"a": 6, "b": 7}
    [sample_set] = sample_sets_from(response)
    assert sample_set.aggregation.method == "tool_call_vote" and sorted(sample_set.aggregation.votes.values()) == [
        1.0,
        2.0,
    ]
    winner = sample_set.candidates[sample_set.aggregation.support[0]]
    assert call.call_id == winner.tool_calls[0]["id"]  # the call id the upstream gave the winning candidate
    # three separate upstream Responses calls, none with `n`, each carrying every option the caller set
    assert upstream.calls == 3
    for sent in upstream.requests:
        assert "n" not in sent
        assert (sent["model"], sent["instructions"], sent["tools"], sent["temperature"]) == (
            "gpt-test",
            "Use the tools.",
            [MULTIPLY],
            0.3,
        )
        assert sent["input"] == [{"role": "user", "content": "What is 6 times 7?"}]
        assert sent["reasoning"] == {"effort": "low"}
    assert response.usage.input_tokens == upstream.prompt_tokens_billed
    assert response.usage.total_tokens == sample_set.usage.total_tokens > 0
    assert response.status == "completed" and response.model == "gpt-test"


def test_the_tool_loop_sends_function_call_outputs_and_ends_in_the_voted_text(serve) -> None:
    upstream = responses_only(serve, tool_replies)
    wrapped = wrap_openai(client(upstream), n=3)
    items: list[Any] = [{"role": "user", "content": "What is 6 times 7?"}]
    first = wrapped.responses.create(model="m", input=items, tools=[MULTIPLY])
    items += first.output  # as OpenAI's function-calling guide does: the response's output items themselves
    for call in first.output:
        args = json.loads(call.arguments)
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": str(args["a"] * args["b"])})
    final = wrapped.responses.create(model="m", input=items, tools=[MULTIPLY])
    assert final.output_text == "6 times 7 is 42. The answer is 42."
    assert [item.type for item in final.output] == ["message"]
    assert sample_sets_from(final)[0].aggregation.votes == {"42": 3.0}
    sent = upstream.requests[-1]["input"]
    assert [item.get("type", "message") for item in sent] == ["message", "function_call", "function_call_output"]
    assert sent[1]["call_id"] == sent[2]["call_id"] == first.output[0].call_id


def test_output_text_is_the_majority_answer_and_a_model_aggregator_is_asked_through_responses(serve) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3, settle=False)  # every candidate, to count the votes and the calls
    response = wrapped.responses.create(model="m", input="What is 6 times 7?")
    assert response.output_text in ("Six sevens: 42. The answer is 42.", "The answer is 42.")
    assert sample_sets_from(response)[0].aggregation.votes == {"42": 2.0, "41": 1.0}
    ssa = wrapped.responses.create(model="ssa/m", input="What is 6 times 7?")
    aggregation = sample_sets_from(ssa)[0].aggregation
    assert aggregation.method == "ssa" and aggregation.answer == "42"
    assert "proposed answers" in json.dumps(upstream.requests[-1]["input"])  # the SSA prompt, a Responses call
    assert upstream.calls == 3 + 4


async def test_async_streamed_call_gives_the_standard_events_ending_with_the_sample_set(serve) -> None:
    upstream = responses_only(serve, tool_replies)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=3, settle=False)  # every candidate, to count them
    stream = await wrapped.responses.create(model="m", input="What is 6 times 7?", tools=[MULTIPLY], stream=True)
    events = [event async for event in stream]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert json.loads(events[4].arguments) == {"a": 6, "b": 7}
    [sample_set] = sample_sets_from(events[-1].response)
    assert len(sample_set.candidates) == 3 and upstream.calls == 3
    assert all(not sent.get("stream") for sent in upstream.requests)  # candidates are whole calls


def test_the_stream_helper_and_parse_vote_on_json(serve) -> None:
    class Product(BaseModel):
        value: int

    upstream = responses_only(serve, ['{"value": 42}', '{"value": 41}', '{ "value": 42 }'])
    wrapped = wrap_openai(client(upstream), n=3)
    parsed = wrapped.responses.parse(model="m", input="What is 6 times 7?", text_format=Product)
    assert parsed.output_parsed == Product(value=42)
    assert sample_sets_from(parsed)[0].aggregation.method == "structured_vote"
    assert upstream.requests[-1]["text"]["format"]["type"] == "json_schema"
    with wrapped.responses.stream(model="m", input="What is 6 times 7?", text_format=Product) as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert json.loads("".join(texts)) == {"value": 42} and final.output_parsed == Product(value=42)
    assert upstream.calls == 6


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"conversation": "conv_123"}, "conversation"),
        ({"background": True}, "background"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"extra_body": {"n": 3}}, "n"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, "input"),
    ],
)
def test_what_cannot_be_aggregated_is_refused_before_anything_is_sent(serve, options, param) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3, settle=False)  # every candidate, to check what each call was sent
    with pytest.raises(RequestError) as caught:
        wrapped.responses.create(**{"model": "m", "input": "What is 6 times 7?", **options})
    assert isinstance(caught.value, openai.BadRequestError) and caught.value.param == param
    assert upstream.calls == 0
    # store=false is what an aggregated call may say: it reaches every candidate call
    wrapped.responses.create(model="m", input="What is 6 times 7?", store=False)
    assert [sent["store"] for sent in upstream.requests] == [False] * 3


def test_total_failure_raises_the_upstreams_openai_error_with_the_sample_set(serve) -> None:
    upstream = responses_only(serve, math_replies, failure_rate=1.0, failure_status=429)
    wrapped = wrap_openai(client(upstream), n=3)
    with pytest.raises(openai.RateLimitError) as caught:
        wrapped.responses.create(model="m", input="What is 6 times 7?")
    assert isinstance(caught.value, QuorumError) and len(caught.value.sample_set.failed) == 3
    assert str(caught.value.request.url).endswith("/responses")


def test_a_candidate_cut_off_by_max_output_tokens_makes_the_response_incomplete(serve) -> None:
    upstream = responses_only(serve, ["Working: 6 times 7 is 42. The answer is 42"], finish_reason="length")
    response = wrap_openai(client(upstream), n=2).responses.create(model="m", input="6 * 7?", max_output_tokens=16)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert [sent["max_output_tokens"] for sent in upstream.requests] == [16, 16]


def test_aggregation_off_sends_one_call_unchanged(serve) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3)
    plain = wrapped.responses.create(model="m", input="hi", extra_body={"aggregation": {"enabled": False}})
    assert upstream.calls == 1 and sample_sets_from(plain) == [] and "aggregation" not in upstream.requests[0]


async def test_an_agents_sdk_agent_on_a_wrapped_client_runs_the_voted_call_plain_and_streamed(serve) -> None:
    upstream = responses_only(serve, tool_replies)
    ran: list[tuple[int, int]] = []
    agent = agent_with_multiply(wrap_openai(client(upstream, AsyncOpenAI), n=3, settle=False), ran)  # count calls
    result = await Runner.run(agent, "What is 6 times 7?")
    assert result.final_output == "6 times 7 is 42. The answer is 42." and ran == [(6, 7)] and upstream.calls == 6
    # streamed, the SDK calls responses.with_streaming_response.create(stream=True): the aggregated stream comes in
    # a stand-in for one HTTP response, and no candidate call carries the raw-response header
    streamed = Runner.run_streamed(agent, "What is 6 times 7?")
    raw = [event.data.type async for event in streamed.stream_events() if event.type == "raw_response_event"]
    assert streamed.final_output == result.final_output and ran == [(6, 7)] * 2 and upstream.calls == 12
    assert raw.count("response.completed") == 2
    assert not any("x-stainless-raw-response" in headers for headers in upstream.headers)


def test_with_streaming_response_gives_the_aggregated_stream_and_refuses_a_single_response(serve) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3, settle=False)  # every candidate, to count them
    with wrapped.responses.with_streaming_response.create(model="m", input="6 * 7?", stream=True) as response:
        assert response.request_id is None
        events = list(response.parse())
    assert events[-1].type == "response.completed" and len(sample_sets_from(events[-1].response)[0].candidates) == 3
    one_response = wrapped.responses.with_streaming_response.create(model="m", input="6 * 7?")
    with pytest.raises(RequestError, match="with_streaming_response works for stream=True"), one_response:
        pass


def test_tools_whose_calls_no_vote_covers_are_refused_and_built_in_ones_go_through(serve) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3, settle=False)  # every candidate, to check what each call was sent
    for tool in ({"type": "custom", "name": "run_sql"}, {"type": "computer_use_preview"}, {"type": "shell"}):
        with pytest.raises(RequestError, match=rf"a '{tool['type']}' tool's calls cannot be aggregated") as caught:
            wrapped.responses.create(model="m", input="What is 6 times 7?", tools=[MULTIPLY, tool])
        assert caught.value.param == "tools"
    assert upstream.calls == 0
    wrapped.responses.create(model="m", input="What is 6 times 7?", tools=[MULTIPLY, {"type": "web_search"}])
    assert [sent["tools"][1] for sent in upstream.requests] == [{"type": "web_search"}] * 3


def test_an_argument_create_does_not_take_fails_at_once_as_unwrapped(serve) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3)
    with pytest.raises(TypeError, match=r"responses\.create\(\) got an unexpected keyword argument 'temprature'"):
        wrapped.responses.create(model="m", input="What is 6 times 7?", temprature=0.2)
    with pytest.raises(TypeError, match=r"chat\.completions\.create\(\) got an unexpected keyword argument 'inputs'"):
        wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], inputs=[])
    assert upstream.calls == 0


def test_echoed_values_newer_than_the_installed_openai_types_do_not_break_the_answer(serve) -> None:
    upstream = responses_only(serve, math_replies)
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.responses.create(model="m", input="What is 6 times 7?", reasoning={"effort": "ultra"})
    assert response.reasoning.effort == "ultra" and sample_sets_from(response)[0].aggregation.answer == "42"


def test_parse_takes_verbosity_and_parse_as_none_reads_plain_text(serve) -> None:
    class Product(BaseModel):
        value: int

    upstream = responses_only(serve, ['{"value": 42}'])
    wrapped = wrap_openai(client(upstream), n=2)
    parsed = wrapped.responses.parse(model="m", input="6 * 7?", text_format=Product, verbosity="low")
    assert parsed.output_parsed == Product(value=42) and upstream.requests[-1]["verbosity"] == "low"
    plain = wrapped.responses.parse(model="m", input="6 * 7?", text_format=Product, parse_as=None)
    assert plain.output_parsed is None and plain.output_text == '{"value": 42}'
    assert upstream.requests[-1]["text"]["format"]["name"] == "Product"  # the schema is still asked for


def test_a_separate_aggregator_server_is_asked_through_chat_completions(serve) -> None:
    upstream = responses_only(serve, math_replies)
    aggregator_server = serve([SSA_VERDICT], apis=("chat",))  # as vLLM or serve-aggregator serve the SSA model
    wrapped = wrap_openai(client(upstream), n=3, aggregator="ssa", aggregator_client=client(aggregator_server))
    response = wrapped.responses.create(model="m", input="What is 6 times 7?")
    aggregation = sample_sets_from(response)[0].aggregation
    assert aggregation.method == "ssa" and aggregation.details.get("parse_status") != "model_error"
    assert upstream.calls == 3 and aggregator_server.calls == 1
    assert "proposed answers" in aggregator_server.requests[0]["messages"][0]["content"]


def test_streamed_text_deltas_join_to_the_text_and_only_the_closing_event_carries_the_sample_set(serve) -> None:
    upstream = responses_only(serve, ["The answer is 42.\n"])
    wrapped = wrap_openai(client(upstream), n=2)
    events = list(wrapped.responses.create(model="m", input="6 * 7?", stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    [done] = [e for e in events if e.type == "response.output_text.done"]
    assert deltas == done.text == "The answer is 42.\n"
    assert sample_sets_from(events[0].response) == [] and len(sample_sets_from(events[-1].response)) == 1
