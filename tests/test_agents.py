"""Aggregation inside real agents: the aggregating chat model in LangChain's and LangGraph's agents, tool-call
voting, `AggregateNode` with bound models and tool results, against scripted OpenAI-compatible servers."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, create_react_agent, tools_condition
from pydantic import BaseModel
from typing_extensions import TypedDict

from aggregate_graph import AggregateNode, AggregatingChatModel, Sampler, SampleSet, build_aggregate_graph
from aggregate_graph.testing import tool_calls_reply
from tests.conftest import chat, joined_by_message

QUESTION = "What is 6 times 7?"


def tool_result(body: dict[str, Any]) -> str | None:
    return next((m["content"] for m in reversed(body["messages"]) if m["role"] == "tool"), None)


def calculator_replies(body: dict[str, Any], sample_no: int) -> Any:
    """Two of every three candidates propose multiply(6, 7), one multiply(6, 8); once the tool has answered,
    every candidate states its result."""
    if (result := tool_result(body)) is not None:
        return f"6 times 7 is {result}. The answer is {result}."
    return tool_calls_reply(("multiply", {"a": 6, "b": 8 if sample_no % 3 == 2 else 7}))


def counting_multiply() -> tuple[Any, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        calls.append((a, b))
        return a * b

    return multiply, calls


def assert_streams_the_aggregated_turns(streamed: list[tuple[Any, dict[str, Any]]], node: str) -> None:
    """`stream_mode="messages"` of an aggregating agent on the calculator question shows one AI message per model
    turn (not the candidates' texts), the tool's result between them, each AI message in chunks as a chat model
    streams its reply: the voted call, then the answer word by word. `node` is the agent's model node."""
    answer_text = "6 times 7 is 42. The answer is 42."
    assert joined_by_message(streamed) == [("", node), ("42", "tools"), (answer_text, node)]
    answer = [chunk for chunk, _ in streamed if chunk.id == streamed[-1][0].id]
    assert len(answer) >= 2 and all(isinstance(chunk, AIMessageChunk) for chunk in answer)


def test_react_agent_over_the_aggregating_model_runs_the_voted_tool_call_once(serve):
    server = serve(calculator_replies)
    multiply, calls = counting_multiply()
    agent = create_react_agent(AggregatingChatModel(chat(server), n=3), [multiply])
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    assert calls == [(6, 7)]
    assert [type(m).__name__ for m in out["messages"]] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    proposal = SampleSet.model_validate(out["messages"][1].response_metadata["sample_set"])
    assert proposal.aggregation.method == "tool_call_vote" and proposal.aggregation.support == [0, 1]
    assert sorted(proposal.aggregation.votes.values()) == [1.0, 2.0]
    assert out["messages"][-1].content == "6 times 7 is 42. The answer is 42."
    final = SampleSet.model_validate(out["messages"][-1].response_metadata["sample_set"])
    assert final.aggregation.answer == "42" and final.aggregation.votes == {"42": 3.0}
    assert [(r.get("n"), r["tools"][0]["function"]["name"]) for r in server.requests] == [(3, "multiply")] * 2


def test_langchain_create_agent_async(serve):
    server = serve(calculator_replies)
    multiply, calls = counting_multiply()
    agent = create_agent(AggregatingChatModel(chat(server), n=3), [multiply])
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage(QUESTION)]}))
    assert calls == [(6, 7)] and out["messages"][-1].content.endswith("The answer is 42.")


def test_only_the_aggregated_answer_streams_as_the_agents_message(serve):
    server = serve(calculator_replies)
    multiply, _ = counting_multiply()
    agent = create_react_agent(AggregatingChatModel(chat(server), n=3), [multiply])
    streamed = list(agent.stream({"messages": [HumanMessage(QUESTION)]}, stream_mode="messages"))
    assert_streams_the_aggregated_turns(streamed, "agent")
    assert [call["name"] for call in streamed[0][0].tool_call_chunks] == ["multiply"]


def test_tool_plans_agree_as_sets_and_answering_now_is_one_choice(serve):
    def replies(body: dict[str, Any], sample_no: int) -> Any:
        plans = [
            tool_calls_reply(("multiply", {"a": 2, "b": 3}), ("multiply", {"b": 5, "a": 4})),
            tool_calls_reply(("multiply", {"a": 4, "b": 5}), ("multiply", {"a": 2, "b": 3})),
            "I can do this in my head. The answer is 26.",
            "The answer is 26.",
            "The answer is 26.",
        ]
        return plans[sample_no % 5]

    multiply, _ = counting_multiply()
    model = AggregatingChatModel(chat(server := serve(replies)), n=5).bind_tools([multiply])
    message = model.invoke("What is 2*3 + 4*5?")
    # the plan in two orders is one choice with 2 votes; answering now has 3
    assert message.tool_calls == [] and message.content == "I can do this in my head. The answer is 26."
    aggregation = SampleSet.model_validate(message.response_metadata["sample_set"]).aggregation
    assert aggregation.method == "majority" and aggregation.answer == "26"
    assert sorted(aggregation.details["choices"].values()) == [2.0, 3.0]
    server.replies = lambda body, no: replies(body, no) if no % 5 != 4 else replies(body, 0)
    message = model.invoke("What is 2*3 + 4*5?")
    assert {(c["name"], json.dumps(c["args"], sort_keys=True)) for c in message.tool_calls} == {
        ("multiply", '{"a": 2, "b": 3}'),
        ("multiply", '{"a": 4, "b": 5}'),
    }


class Measurement(BaseModel):
    value: int
    unit: str


def test_structured_output_votes_on_the_parsed_object(serve):
    def replies(body: dict[str, Any], sample_no: int) -> Any:
        args = [{"value": 42, "unit": "kg"}, {"unit": "kg", "value": 42}, {"value": 41, "unit": "kg"}][sample_no % 3]
        return tool_calls_reply(("Measurement", args))

    server = serve(replies)
    structured = AggregatingChatModel(chat(server), n=3).with_structured_output(Measurement)
    assert structured.invoke("How heavy is it?") == Measurement(value=42, unit="kg")
    assert server.requests[-1]["tool_choice"] == "required" and server.requests[-1]["n"] == 3


def test_chat_model_in_an_lcel_chain_sync_async_and_streaming(serve):
    server = serve(["#### 12", "#### 12", "#### 13"])
    chain = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")]) | AggregatingChatModel(
        chat(server), n=3
    )
    assert chain.invoke({"q": "What is 3 * 4?"}).content == "#### 12"
    assert asyncio.run(chain.ainvoke({"q": "What is 3 * 4?"})).content == "#### 12"
    chunks = list(chain.stream({"q": "What is 3 * 4?"}))
    assert "".join(c.content for c in chunks) == "#### 12"
    assert server.requests[0]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_small_talk_through_the_chat_model_gets_the_medoid(serve):
    server = serve(["You're welcome!", "You are welcome, happy to help!", "You're welcome, happy to help."])
    message = AggregatingChatModel(chat(server), n=3).invoke("Thanks!")
    aggregation = SampleSet.model_validate(message.response_metadata["sample_set"]).aggregation
    assert aggregation.method == "medoid" and message.content == aggregation.text
    assert aggregation.support == [2]


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_aggregate_node_as_the_agent_node_with_a_bound_model(serve):
    server = serve(calculator_replies)
    multiply, calls = counting_multiply()
    builder = StateGraph(AgentState)
    builder.add_node("agent", AggregateNode(chat(server).bind_tools([multiply]).with_config(tags=["mine"]), n=3))
    builder.add_node("tools", ToolNode([multiply]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    out = graph.invoke({"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": "t"}})
    assert calls == [(6, 7)] and out["messages"][-1].content.endswith("The answer is 42.")
    assert all(r["n"] == 3 and r["tools"] for r in server.requests)


def test_aggregate_node_after_a_tool_loop_sees_the_tool_result(serve):
    """Tools first (one cheap model), then an aggregated final answer: the candidates must see the tool call and
    its result, not only the question, and not the agent's own draft."""
    server = serve(lambda body, no: f"The tool says {tool_result(body)}. The answer is {tool_result(body)}.")
    builder = StateGraph(AgentState)
    builder.add_node("final_answer", AggregateNode(chat(server), n=3))
    builder.add_edge(START, "final_answer")
    conversation = [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "call_1"}]),
        ToolMessage("42", tool_call_id="call_1"),
        AIMessage("It is 41."),  # the agent's draft, which the aggregate node rewrites
    ]
    out = builder.compile().invoke({"messages": conversation})
    assert out["messages"][-1].content == "The tool says 42. The answer is 42."
    sent = server.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "multiply"


def test_bound_models_keep_their_tools_and_n_everywhere_and_other_runnables_are_refused(serve):
    server = serve([tool_calls_reply(("multiply", {"a": 6, "b": 7}))])
    multiply, _ = counting_multiply()
    sampler = Sampler(chat(server).bind_tools([multiply]))
    out = build_aggregate_graph(sampler, n=2).invoke({"messages": [HumanMessage(QUESTION)]})
    assert out["messages"][-1].tool_calls[0]["args"] == {"a": 6, "b": 7}
    assert server.requests[0]["n"] == 2 and server.requests[0]["tools"]
    with pytest.raises(TypeError, match=r"got RunnableSequence$"):
        AggregateNode(ChatPromptTemplate.from_messages([("human", "{q}")]) | chat(server))
    with pytest.raises(TypeError, match="not a chat model: give an agent AggregatingChatModel"):
        create_react_agent(AggregateNode(chat(server), n=2), [multiply])


def test_prebuilt_graph_and_node_schemas_generate_for_studio(serve):
    """Studio's input form comes from these JSON schemas; pydantic needs typing_extensions.TypedDict on 3.11."""
    graph = build_aggregate_graph(chat(serve()), n=2)
    schema = graph.get_input_jsonschema()
    assert "messages" in schema["properties"] and "Candidate" in json.dumps(schema)
    assert "sample_set" in graph.get_output_jsonschema()["properties"]
