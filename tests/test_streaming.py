"""LangChain's streaming contract, on a real HTTP server: chunks that add up to what `invoke` returns, candidate
progress as custom events and on a calling graph's custom stream, and agents that stream the aggregated answer."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk, HumanMessage

from aggregate_graph import AggregatingChatModel, AggregationMiddleware
from aggregate_graph.streaming import PROGRESS_EVENT
from aggregate_graph.testing import tool_calls_reply
from tests.conftest import chat
from tests.test_agents import assert_streams_the_aggregated_turns, counting_multiply

QUESTION = "What is 6 times 7?"
REPLIES = ["6 times 7 is 42. The answer is 42.", "Six sevens make 42, so the answer is 42.", "The answer is 41."]


def added_up(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    full = chunks[0]
    for chunk in chunks[1:]:
        full = full + chunk
    return full


def test_stream_yields_chunks_that_add_up_to_the_invoke_result(serve):
    model = AggregatingChatModel(chat(serve(REPLIES)), n=3)
    chunks = list(model.stream(QUESTION))
    invoked = model.invoke(QUESTION)
    assert len(chunks) >= 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    assert [c.chunk_position for c in chunks].count("last") == 1 and chunks[-1].chunk_position == "last"
    assert len({c.id for c in chunks}) == 1
    full = added_up(chunks)
    assert full.content == invoked.content == "6 times 7 is 42. The answer is 42."
    # the usage of the three candidates, summed, on the last chunk only
    assert full.usage_metadata == invoked.usage_metadata == chunks[-1].usage_metadata
    assert full.usage_metadata["output_tokens"] == sum(len(r.split()) for r in REPLIES)
    assert full.response_metadata["model_name"] == invoked.response_metadata["model_name"] == "test-model"
    streamed_set, invoked_set = full.response_metadata["sample_set"], invoked.response_metadata["sample_set"]
    assert streamed_set["aggregation"]["answer"] == invoked_set["aggregation"]["answer"] == "42"
    assert [c["text"] for c in streamed_set["candidates"]] == [c["text"] for c in invoked_set["candidates"]]


def test_astream_yields_the_same_chunks(serve):
    model = AggregatingChatModel(chat(serve(REPLIES)), n=3)

    async def collect() -> list[AIMessageChunk]:
        return [chunk async for chunk in model.astream(QUESTION)]

    chunks = asyncio.run(collect())
    sync_chunks = list(model.stream(QUESTION))
    assert [c.content for c in chunks] == [c.content for c in sync_chunks]
    assert added_up(chunks).usage_metadata == added_up(sync_chunks).usage_metadata


def test_voted_tool_calls_stream_as_tool_call_chunks(serve):
    server = serve([tool_calls_reply(("multiply", {"a": 6, "b": 7}))])
    multiply, _ = counting_multiply()
    model = AggregatingChatModel(chat(server), n=3).bind_tools([multiply])
    chunks = list(model.stream(QUESTION))
    invoked = model.invoke(QUESTION)
    calls = [c for chunk in chunks for c in chunk.tool_call_chunks]
    assert [(c["name"], c["args"], c["index"]) for c in calls] == [("multiply", '{"a": 6, "b": 7}', 0)]
    full = added_up(chunks)
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [(c["name"], c["args"]) for c in invoked.tool_calls]
    assert full.tool_calls[0]["args"] == {"a": 6, "b": 7} and full.content == ""


def test_candidates_are_custom_events_of_the_call_and_its_children_in_traces(serve):
    model = AggregatingChatModel(chat(serve(REPLIES)), n=3)

    async def collect() -> list[dict[str, Any]]:
        return [event async for event in model.astream_events(QUESTION, version="v2")]

    events = asyncio.run(collect())
    ends = [e for e in events if e["event"] == "on_chat_model_end"]
    call = next(e for e in ends if e["name"] == "AggregatingChatModel")
    progress = [e for e in events if e["event"] == "on_custom_event"]
    assert [e["name"] for e in progress] == [PROGRESS_EVENT] * 3
    assert {e["run_id"] for e in progress} == {call["run_id"]}
    assert sorted(e["data"]["candidate"] for e in progress) == [0, 1, 2] and {e["data"]["of"] for e in progress} == {3}
    assert sorted(e["data"]["answer"] for e in progress) == ["41", "42", "42"]
    # the candidate request (one request with n=3) nests under the call, and the answer streams once, as the call's
    candidates = [e for e in ends if e["name"] == "ChatOpenAI"]
    assert candidates and all(call["run_id"] in e["parent_ids"] for e in candidates)
    answer = [e for e in events if e["event"] == "on_chat_model_stream" and e["name"] != "ChatOpenAI"]
    assert {e["name"] for e in answer} == {"AggregatingChatModel"}
    assert "".join(e["data"]["chunk"].text for e in answer) == "6 times 7 is 42. The answer is 42."


def _calculator(body: dict[str, Any], sample_no: int) -> Any:
    if body["messages"][-1]["role"] == "tool":
        return REPLIES[sample_no % 3]
    return tool_calls_reply(("multiply", {"a": 6, "b": 7}))


def test_an_agent_over_the_aggregating_model_streams_the_answer_in_chunks_and_progress(serve):
    multiply, calls = counting_multiply()
    agent = create_agent(AggregatingChatModel(chat(serve(_calculator)), n=3), [multiply])
    parts = list(agent.stream({"messages": [HumanMessage(QUESTION)]}, stream_mode=["messages", "custom"]))
    streamed = [data for mode, data in parts if mode == "messages"]
    assert_streams_the_aggregated_turns(streamed, "model")
    assert calls == [(6, 7)]
    # each of the two model calls reports its three candidates on the agent's custom stream
    progress = [data for mode, data in parts if mode == "custom"]
    assert [p["candidate"] for p in progress] == [0, 1, 2, 0, 1, 2]


def test_the_middleware_streams_the_answer_in_chunks_and_progress_async(serve):
    multiply, _ = counting_multiply()
    agent = create_agent(chat(serve(_calculator)), [multiply], middleware=[AggregationMiddleware(n=3)])

    async def collect() -> list[tuple[str, Any]]:
        stream = agent.astream({"messages": [HumanMessage(QUESTION)]}, stream_mode=["messages", "custom"])
        return [part async for part in stream]

    parts = asyncio.run(collect())
    streamed = [data for mode, data in parts if mode == "messages"]
    assert_streams_the_aggregated_turns(streamed, "model")
    assert len([data for mode, data in parts if mode == "custom"]) == 6


def test_usage_sums_every_candidate_request_with_the_upstreams_token_details(serve):
    details = {"prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 3}}
    server = serve(REPLIES, n_mode="ignore", token_details=details)  # three requests, each with its details
    model = AggregatingChatModel(chat(server), n=3, settle=False)  # every request's usage: none cancelled
    usage = added_up(list(model.stream(QUESTION))).usage_metadata
    assert server.calls == 3 and usage == model.invoke(QUESTION).usage_metadata
    assert usage["input_token_details"] == {"cache_read": 6} and usage["output_token_details"] == {"reasoning": 9}
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
