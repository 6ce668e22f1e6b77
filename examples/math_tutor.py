"""A math-tutor graph: the user's own StateGraph with an AggregateNode as its answering step.

    python examples/math_tutor.py "What is 15% of 80?"                      # embedded SmolLM2, offline
    python examples/math_tutor.py "What is 15% of 80?" --model gpt-4o-mini --base-url http://localhost:8000/v1

The tutor greets the student, answers with n candidates and majority vote, then explains how sure it is
from the vote — the sample set rides along in the answer's response_metadata.
"""

from __future__ import annotations

import argparse
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from aggregate_graph import AggregateNode, SampleSet, load_chat_model


class TutorState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    confidence: float


def confidence(state: TutorState) -> dict:
    sample_set = SampleSet.model_validate(state["messages"][-1].response_metadata["sample_set"])
    agg = sample_set.aggregation
    share = max(agg.votes.values()) / max(1.0, sum(agg.votes.values()))
    note = f"({share:.0%} of {len(sample_set.succeeded)} attempts agree on {agg.answer}.)"
    return {"confidence": share, "messages": [AIMessage(note)]}


def build(model, n: int) -> StateGraph:
    builder = StateGraph(TutorState)
    builder.add_node(
        "answer",
        AggregateNode(model, n=n, system_prompts=["You are a patient math tutor. End with 'The answer is N.'"]),
    )
    builder.add_node("confidence", confidence)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", "confidence")
    builder.add_edge("confidence", END)
    return builder.compile(checkpointer=InMemorySaver())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("question")
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--model", default="local")
    p.add_argument("--base-url")
    args = p.parse_args()
    if args.base_url:
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model=args.model, base_url=args.base_url, api_key="EMPTY", max_tokens=256)
    else:
        model = load_chat_model(args.model, max_new_tokens=96)
    graph = build(model, args.n)
    out = graph.invoke({"messages": [HumanMessage(args.question)]}, {"configurable": {"thread_id": "student"}})
    for message in out["messages"][1:]:
        print(message.content)


if __name__ == "__main__":
    main()
