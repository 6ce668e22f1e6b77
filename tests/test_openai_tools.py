"""wrap_openai with `tools` and `response_format`: the candidates' tool plans and JSON objects are voted on.
The real openai client against real test servers on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from aggregate_graph import sample_sets_from, wrap_openai
from aggregate_graph.aggregators import StructuredVote
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from aggregate_graph.sample_set import Candidate, SampleSet
from aggregate_graph.testing import tool_calls_reply
from tests.test_wrap_openai import QUESTION

MULTIPLY_TOOL = {
    "type": "function",
    "function": {
        "name": "multiply",
        "description": "Multiply two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
ADD_TOOL = {**MULTIPLY_TOOL, "function": {**MULTIPLY_TOOL["function"], "name": "add", "description": "Add."}}
CALL_6_7 = tool_calls_reply(("multiply", {"a": 6, "b": 7}))
CALL_6_8 = tool_calls_reply(("multiply", {"a": 6, "b": 8}))


def client(server: Any, cls: type = OpenAI, **kwargs: Any) -> Any:
    return cls(base_url=server.base_url, api_key="upstream-key", max_retries=0, **kwargs)


def _calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def test_the_tool_plan_most_candidates_chose_is_the_answer_and_the_upstream_gets_the_tools(serve) -> None:
    upstream = serve([CALL_6_7, CALL_6_7, CALL_6_8])
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.chat.completions.create(
        model="m", messages=QUESTION, tools=[MULTIPLY_TOOL], tool_choice="auto", parallel_tool_calls=False
    )
    [choice] = response.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "multiply"
    assert json.loads(call.function.arguments) == {"a": 6, "b": 7}
    [sample_set] = sample_sets_from(response)
    aggregation = sample_set.aggregation
    assert aggregation.method == "tool_call_vote" and aggregation.support == [0, 1]
    assert sorted(aggregation.votes.values()) == [1.0, 2.0]
    assert call.id == sample_set.candidates[0].tool_calls[0]["id"]  # the id the upstream gave the winning call
    # one upstream request with n=3, carrying the caller's tool options
    assert upstream.calls == 1
    sent = upstream.requests[0]
    assert (sent["n"], sent["tools"], sent["tool_choice"], sent["parallel_tool_calls"]) == (
        3,
        [MULTIPLY_TOOL],
        "auto",
        False,
    )


def test_the_whole_tool_loop_ends_in_the_aggregated_answer(serve) -> None:
    def replies(body: dict[str, Any], sample_no: int) -> Any:
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if results:
            return [f"6 times 7 is {results[-1]}. The answer is {results[-1]}.", "The answer is 41."][
                sample_no % 3 == 2
            ]
        return CALL_6_8 if sample_no % 3 == 2 else CALL_6_7

    upstream = serve(replies)
    wrapped = wrap_openai(client(upstream), n=3)
    messages: list[Any] = list(QUESTION)
    first = wrapped.chat.completions.create(model="m", messages=messages, tools=[MULTIPLY_TOOL])
    message = first.choices[0].message
    messages.append(message)  # as OpenAI's guide does: the response's message object itself
    for call in message.tool_calls:
        args = json.loads(call.function.arguments)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": str(args["a"] * args["b"])})
    final = wrapped.chat.completions.create(model="m", messages=messages, tools=[MULTIPLY_TOOL])
    assert final.choices[0].message.content == "6 times 7 is 42. The answer is 42."
    assert final.choices[0].message.tool_calls is None and final.choices[0].finish_reason == "stop"
    assert sample_sets_from(final)[0].aggregation.votes == {"42": 2.0, "41": 1.0}
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "multiply" and sent[1]["content"] is None
    assert sent[2]["tool_call_id"] == message.tool_calls[0].id and sent[2]["content"] == "42"


@pytest.mark.parametrize(
    ("replies", "calls", "content"),
    [
        (["The answer is 42.", CALL_6_7, "It is 42. The answer is 42."], [], "The answer is 42."),
        ([CALL_6_7, "The answer is 42.", CALL_6_7], [("multiply", {"a": 6, "b": 7})], None),
        # a tie goes to the choice made first, as in the majority vote
        ([CALL_6_8, "The answer is 42."], [("multiply", {"a": 6, "b": 8})], None),
    ],
)
def test_answering_now_is_one_choice_against_each_tool_plan(serve, replies, calls, content) -> None:
    upstream = serve(replies)
    wrapped = wrap_openai(client(upstream), n=len(replies))
    response = wrapped.chat.completions.create(model="m", messages=QUESTION, tools=[MULTIPLY_TOOL])
    [choice] = response.choices
    assert _calls(choice.message) == calls and choice.message.content == content
    assert choice.finish_reason == ("tool_calls" if calls else "stop")
    assert "answer now" in sample_sets_from(response)[0].aggregation.votes or not calls


def test_a_plan_of_two_calls_agrees_whatever_their_order(serve) -> None:
    add, multiply = ("add", {"a": 1, "b": 2}), ("multiply", {"b": 7, "a": 6})
    upstream = serve(
        [
            tool_calls_reply(("multiply", {"a": 6, "b": 7}), add, content="Two steps."),
            CALL_6_8,
            tool_calls_reply(add, multiply),
        ]
    )
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.chat.completions.create(model="m", messages=QUESTION, tools=[MULTIPLY_TOOL, ADD_TOOL])
    message = response.choices[0].message
    # the first supporter's calls, in its order, with its text
    assert _calls(message) == [("multiply", {"a": 6, "b": 7}), ("add", {"a": 1, "b": 2})]
    assert message.content == "Two steps." and response.choices[0].finish_reason == "tool_calls"
    assert sample_sets_from(response)[0].aggregation.support == [0, 2]


def test_json_object_output_is_voted_on_as_parsed_json(serve) -> None:
    upstream = serve(['{"a": 1, "b": 2}', '{"a": 3}', '{\n  "b": 2,\n  "a": 1\n}'])
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.chat.completions.create(model="m", messages=QUESTION, response_format={"type": "json_object"})
    assert json.loads(response.choices[0].message.content) == {"a": 1, "b": 2}
    aggregation = sample_sets_from(response)[0].aggregation
    assert aggregation.method == "structured_vote" and aggregation.support == [0, 2]
    assert aggregation.votes == {'{"a":1,"b":2}': 2.0, '{"a":3}': 1.0}
    assert upstream.requests[0]["response_format"] == {"type": "json_object"}


async def test_json_schema_output_votes_over_the_default_aggregator_and_text_abstains(serve) -> None:
    upstream = serve(["Sure! Here it is.", '```json\n{"answer": 41}\n```', '{"answer": 42}', '{"answer":42}'])
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=4, aggregator="ssa")  # a named method would be refused
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}, "strict": True}}
    response = await wrapped.chat.completions.create(model="m", messages=QUESTION, response_format=schema)
    assert response.choices[0].message.content == '{"answer": 42}'
    aggregation = sample_sets_from(response)[0].aggregation
    assert (aggregation.method, aggregation.details["abstained"]) == ("structured_vote", 1)
    assert upstream.calls == 1  # no aggregator model was asked
    assert upstream.requests[0]["response_format"] == schema


def test_json_output_with_no_json_falls_back_to_the_medoid(serve) -> None:
    upstream = serve(["I cannot do JSON.", "I cannot do JSON, sorry.", "No."])
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.chat.completions.create(model="m", messages=QUESTION, response_format={"type": "json_object"})
    aggregation = sample_sets_from(response)[0].aggregation
    assert aggregation.method == "medoid" and "parses as JSON" in aggregation.details["fallback_reason"]


def test_structured_vote_ties_go_to_the_lowest_index() -> None:
    texts = ["[1, 2]", "not json", "[2, 1]", "[1,2]", " [2,1] "]
    sample_set = SampleSet(question="q", candidates=[Candidate(index=i, text=t) for i, t in enumerate(texts)])
    aggregation = StructuredVote().invoke(sample_set)
    assert (aggregation.text, aggregation.answer, aggregation.tie) == ("[1, 2]", "[1,2]", ["[1,2]", "[2,1]"])


def streamed_answer(chunks: Any) -> tuple[str, list[dict[str, Any]], str | None]:
    content, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": delta.id, "name": "", "arguments": ""})
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
    return content, [{**c, "arguments": json.loads(c["arguments"])} for c in calls.values()], finish


def test_a_stream_carries_the_agreed_tool_calls(serve) -> None:
    upstream = serve([CALL_6_7, CALL_6_8, CALL_6_7])
    wrapped = wrap_openai(client(upstream), n=3)
    stream = wrapped.chat.completions.create(
        model="m", messages=QUESTION, tools=[MULTIPLY_TOOL], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    content, calls, finish = streamed_answer(chunks)
    assert content == "" and finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [("multiply", {"a": 6, "b": 7})]
    assert calls[0]["id"].startswith("call_")
    assert chunks[-1].usage.total_tokens > 0 and upstream.requests[0]["tools"] == [MULTIPLY_TOOL]


async def test_an_async_stream_carries_them_too(serve) -> None:
    upstream = serve([CALL_6_7, tool_calls_reply(("multiply", {"b": 7, "a": 6}), content="Multiplying.")])
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=2)
    stream = await wrapped.chat.completions.create(model="m", messages=QUESTION, tools=[MULTIPLY_TOOL], stream=True)
    content, calls, finish = streamed_answer([chunk async for chunk in stream])
    assert (content, finish) == ("", "tool_calls")  # the first supporter's plan: no text
    assert [(c["name"], c["arguments"]) for c in calls] == [("multiply", {"a": 6, "b": 7})]


def test_the_client_model_parses_tool_calls_and_keeps_invalid_ones_apart(serve) -> None:
    upstream = serve([tool_calls_reply(("multiply", {"a": 6, "b": 7}), ("add", '{"a": 1,'), content="Hmm")])
    model = OpenAIClientChatModel(create=client(upstream).chat.completions.create, model="m")
    message = model.invoke("What is 6 times 7?")
    assert message.content == "Hmm"
    [call] = message.tool_calls
    assert (call["name"], call["args"], call["type"]) == ("multiply", {"a": 6, "b": 7}, "tool_call")
    assert call["id"].startswith("call_")
    [invalid] = message.invalid_tool_calls
    assert (invalid["name"], invalid["args"]) == ("add", '{"a": 1,') and "not valid JSON" in invalid["error"]


def test_the_client_model_streams_tool_call_chunks(serve) -> None:
    upstream = serve([CALL_6_7])
    model = OpenAIClientChatModel(create=client(upstream).chat.completions.create, model="m")
    chunks = list(model.stream("What is 6 times 7?"))
    message = chunks[0]
    for chunk in chunks[1:]:
        message += chunk
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("multiply", {"a": 6, "b": 7})]
