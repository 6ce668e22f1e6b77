"""AggregateNode dropped into a user's own StateGraph."""

from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore

from aggregate_graph import AggregateNode, AggregatingChatModel, CandidatePolicy, SampleSet
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.log import iter_logged
from tests.conftest import chat


class TutorState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    student: str


def greet(state: TutorState) -> dict:
    return {"messages": [AIMessage(f"Hi {state['student']}, let me think.")]}


def build(server, **compile_kwargs):
    builder = StateGraph(TutorState)
    builder.add_node("greet", greet)
    builder.add_node("aggregate", AggregateNode(chat(server), aggregator=MajorityVote(), n=8))
    builder.add_edge(START, "greet")
    builder.add_edge("greet", "aggregate")
    return builder.compile(**compile_kwargs)


def test_answers_the_last_human_turn_inside_a_user_graph(serve):
    server = serve(["#### 12", "#### 12", "#### 13"])
    store = InMemoryStore()
    graph = build(server, checkpointer=InMemorySaver(), store=store)
    config = {"configurable": {"thread_id": "student-1"}}
    out = graph.invoke({"messages": [HumanMessage("What is 3 * 4?")], "student": "Ada"}, config)
    assert [type(m).__name__ for m in out["messages"]] == ["HumanMessage", "AIMessage", "AIMessage"]
    answer = out["messages"][-1]
    s = SampleSet.model_validate(answer.response_metadata["sample_set"])
    assert s.question == "What is 3 * 4?" and len(s.candidates) == 8 and s.aggregation.answer == "12"
    assert server.calls == 1 and server.requests[0]["n"] == 8
    # the candidates saw the conversation up to the question, not the greeting that followed it
    assert [m["role"] for m in server.requests[0]["messages"]] == ["user"]
    assert [x.question for x in iter_logged(store)] == ["What is 3 * 4?"]  # the parent's store logs it
    assert out["student"] == "Ada"


def test_candidate_progress_streams_through_the_parent(serve):
    server = serve(["#### 12"])
    graph = build(server)
    progress = [
        chunk
        for chunk in graph.stream(
            {"messages": [HumanMessage("3*4?")], "student": "Bo"}, stream_mode="custom", subgraphs=True
        )
    ]
    assert sorted(event["candidate"] for _, event in progress) == list(range(8))
    assert all(event["answer"] == "12" for _, event in progress)  # read as it landed: the parent's stream shows it


async def test_async_node(serve):
    server = serve(["#### 12"])
    out = await build(server).ainvoke({"messages": [HumanMessage("3*4?")], "student": "Cy"})
    assert out["messages"][-1].response_metadata["sample_set"]["aggregation"]["answer"] == "12"


@pytest.mark.parametrize("kind", ["node", "chat_model"])
def test_inside_a_saved_parent_the_node_saves_each_candidate_and_the_chat_model_draws_one_task(serve, kind):
    # AggregateNode runs as a subgraph on the parent's checkpointer: one task per candidate, each saved as it
    # finishes. AggregatingChatModel's graph is compiled with checkpointer=False: nothing to save, one task.
    server, single = serve(["#### 42"]), CandidatePolicy(use_n=False)
    builder = StateGraph(MessagesState)
    if kind == "node":
        builder.add_node("answer", AggregateNode(chat(server), n=3, policy=single))
    else:
        model = AggregatingChatModel(chat(server), n=3, policy=single)
        builder.add_node("answer", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_edge(START, "answer")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": kind}}
    events = graph.stream({"messages": [HumanMessage("6 times 7?")]}, config, stream_mode="updates", subgraphs=True)
    assert [next(iter(update)) for _, update in events].count("generate") == (3 if kind == "node" else 1)
