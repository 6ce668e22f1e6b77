"""A tool-calling agent whose model is an `AggregatingChatModel`: every model turn is a vote of n candidates.

    python examples/react_agent.py                                   # a scripted OpenAI-compatible server
    python examples/react_agent.py "What is 12 times 13?" --base-url http://localhost:8000/v1 --model my-model

LangChain's `create_agent` (or `langgraph.prebuilt.create_react_agent`) takes the aggregating model like any chat
model. When the candidates call tools, the graph votes on their plans (same tools, equal arguments) and the agent
runs the winning plan once; when they answer, their answers are voted on as usual. By default a scripted server
stands in for the model: two of three candidates call `multiply` with the question's numbers, one makes a slip,
and once the tool's result is in the conversation every candidate answers with it. It prints the conversation
and the votes behind each model turn.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from aggregate_graph.aggregating_chat_model import AggregatingChatModel
from aggregate_graph.aggregators.tool_calls import tool_plan
from aggregate_graph.testing import OpenAITestServer, tool_calls_reply


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


SYSTEM_PROMPT = "You are a careful assistant. Use the multiply tool for every multiplication."


def build_agent(model: Any, n: int = 3) -> Any:
    """The agent: `model` (any chat model) wrapped so that each of its turns aggregates n candidates."""
    return create_agent(AggregatingChatModel(model, n=n), [multiply], system_prompt=SYSTEM_PROMPT)


def scripted_reply(body: dict[str, Any], sample_no: int) -> Any:
    """The scripted model: before the tool has run, candidates propose `multiply` on the question's two numbers
    (every third one with a slip in b); after it, they answer with the tool's result."""
    messages = body["messages"]
    question = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    a, b = (int(x) for x in [*re.findall(r"-?\d+", question), "6", "7"][:2])
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if results:
        return f"{a} times {b} is {results[-1]}."
    return tool_calls_reply(("multiply", {"a": a, "b": b + 1 if sample_no % 3 == 2 else b}))


@contextmanager
def candidate_model(base_url: str | None, model: str) -> Iterator[ChatOpenAI]:
    """ChatOpenAI on `base_url` (key from OPENAI_API_KEY), or on a scripted test server started for the run."""
    if base_url:
        yield ChatOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"), model=model,
                         max_retries=0)  # fmt: skip
        return
    with OpenAITestServer(scripted_reply) as server:
        yield ChatOpenAI(base_url=server.base_url, api_key="sk-test", model=model, max_retries=0)


def plan_name(key: str) -> str:
    """A tool-call vote key (canonical JSON of the plan's calls) as `multiply(a=6, b=7)`."""
    if not key.startswith("["):
        return key  # "answer now", or an answer
    calls = json.loads(key)
    return " + ".join(
        f"{c['name']}({', '.join(f'{k}={json.dumps(v)}' for k, v in (c.get('args') or {}).items())})" for c in calls
    )


def votes_line(message: AIMessage) -> str:
    sample_set = message.response_metadata.get("sample_set")
    if not sample_set or not sample_set.get("aggregation"):
        return ""
    votes = sample_set["aggregation"]["votes"]
    return "   [votes: " + ", ".join(f"{plan_name(k)} {v:g}" for k, v in votes.items()) + "]"


def show(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return f"human: {message.text}"
    if isinstance(message, ToolMessage):
        return f"tool:  {message.name} -> {message.text}"
    if isinstance(message, AIMessage):
        if message.tool_calls:
            return f"ai:    calls {plan_name(tool_plan(message.tool_calls))}{votes_line(message)}"
        return f"ai:    {message.text}{votes_line(message)}"
    return f"{message.type}: {message.text}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="A create_agent agent over an AggregatingChatModel, with a calculator.")
    p.add_argument("question", nargs="?", default="What is 6 times 7?")
    p.add_argument("--n", type=int, default=3, help="candidates per model turn")
    p.add_argument("--base-url", help="an OpenAI-compatible server (default: a scripted one, started here)")
    p.add_argument("--model", default="test-model", help="the served model's name")
    args = p.parse_args(argv)
    with candidate_model(args.base_url, args.model) as model:
        out = build_agent(model, args.n).invoke({"messages": [HumanMessage(args.question)]})
    for message in out["messages"]:
        print(show(message))
    ran = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    print(f"the tool ran {len(ran)} time(s)")
    return out


if __name__ == "__main__":
    main()
