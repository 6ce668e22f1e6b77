"""`AggregationMiddleware` in real `create_agent` agents over the real LangChain OpenAI client and a scripted
OpenAI-compatible server: the voted tool plan runs once, structured output both ways, composition with the
stock middleware, streaming, tracing, and `AggregatingChatModel` with a response format."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, ModelRetryMiddleware
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.tracers import BaseTracer
from langchain_core.tracers.schemas import Run
from pydantic import BaseModel

from aggregate_graph import AggregatingChatModel, AggregationMiddleware, SampleSet
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.testing import tool_calls_reply
from tests.conftest import chat
from tests.test_agents import assert_streams_the_aggregated_turns, counting_multiply

QUESTION = "What is 6 times 7?"


class Answer(BaseModel):
    value: int


def tool_result(body: dict[str, Any]) -> str | None:
    return next((m["content"] for m in reversed(body["messages"]) if m["role"] == "tool"), None)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def agent_replies(body: dict[str, Any], sample_no: int) -> Any:
    """Two of every three candidates propose multiply(6, 7), one multiply(6, 8); once the tool has answered,
    every candidate gives its result: as text, as the `Answer` tool's call (tool strategy) or as JSON content
    (provider strategy)."""
    if (result := tool_result(body)) is None:
        return tool_calls_reply(("multiply", {"a": 6, "b": 8 if sample_no % 3 == 2 else 7}))
    if "Answer" in tool_names(body):
        return tool_calls_reply(("Answer", {"value": int(result)}))
    if (body.get("response_format") or {}).get("type") == "json_schema":
        return json.dumps({"value": int(result)})
    return f"6 times 7 is {result}. The answer is {result}."


def test_the_voted_tool_call_runs_once_and_the_answer_uses_its_result(serve):
    server = serve(agent_replies)
    multiply, calls = counting_multiply()
    agent = create_agent(
        chat(server),
        [multiply],
        middleware=[ModelCallLimitMiddleware(run_limit=5), AggregationMiddleware(n=3)],
    )
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    assert calls == [(6, 7)]
    assert out["messages"][-1].content == "6 times 7 is 42. The answer is 42."
    proposal = SampleSet.model_validate(out["messages"][1].response_metadata["sample_set"])
    assert proposal.aggregation.method == "tool_call_vote" and sorted(proposal.aggregation.votes.values()) == [1, 2]
    final = SampleSet.model_validate(out["messages"][-1].response_metadata["sample_set"])
    assert final.aggregation.answer == "42" and len(final.candidates) == 3
    # two model calls, each one request asking for 3 samples, each carrying the agent's tools
    assert [(r.get("n"), tool_names(r)) for r in server.requests] == [(3, ["multiply"])] * 2


def test_the_same_async(serve):
    server = serve(agent_replies)
    multiply, calls = counting_multiply()
    agent = create_agent(chat(server), [multiply], middleware=[AggregationMiddleware(n=3)])
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage(QUESTION)]}))
    assert calls == [(6, 7)] and out["messages"][-1].content.endswith("The answer is 42.")
    assert len(server.requests) == 2


@pytest.mark.parametrize("strategy", [Answer, ToolStrategy(Answer), ProviderStrategy(Answer)])
def test_structured_response_is_voted(serve, strategy):
    server = serve(agent_replies)
    multiply, calls = counting_multiply()
    agent = create_agent(chat(server), [multiply], middleware=[AggregationMiddleware(n=3)], response_format=strategy)
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    assert calls == [(6, 7)] and out["structured_response"] == Answer(value=42)
    last = server.requests[-1]
    if isinstance(strategy, ProviderStrategy):
        assert last["response_format"]["type"] == "json_schema" and tool_names(last) == ["multiply"]
        final = SampleSet.model_validate(out["messages"][-1].response_metadata["sample_set"])
        assert final.aggregation.method == "structured_vote" and final.aggregation.answer == '{"value":42}'
    else:  # the schema is a tool the candidates must call
        assert tool_names(last) == ["multiply", "Answer"] and last["tool_choice"] == "required"


def test_composes_with_retry_and_a_failing_quorum(serve):
    """A whole aggregation whose candidates all fail is one failed model call: the retry middleware outside it
    draws the candidates again. (The first request asks for n=3; when it fails, the graph falls back to three
    single requests; those fail too.)"""
    server = serve(agent_replies, fail_first=4)
    multiply, calls = counting_multiply()
    retry = ModelRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False)
    agent = create_agent(chat(server), [multiply], middleware=[retry, AggregationMiddleware(n=3, policy=_one_try())])
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    assert calls == [(6, 7)] and out["messages"][-1].content.endswith("The answer is 42.")
    assert server.errors_sent == 4 and [r.get("n") for r in server.requests] == [3, None, None, None, 3, 3]


def _one_try() -> Any:
    from aggregate_graph import CandidatePolicy

    return CandidatePolicy(max_attempts=1, use_n=True)


def test_one_wrapper_and_one_graph_per_shape_across_turns(serve):
    server = serve(agent_replies)
    multiply, _ = counting_multiply()
    model, middleware = chat(server), AggregationMiddleware(n=3)
    agent = create_agent(model, [multiply], middleware=[middleware])
    for _ in range(3):
        agent.invoke({"messages": [HumanMessage(QUESTION)]})
    wrapper = middleware.aggregating(model)
    assert wrapper is middleware.aggregating(model)
    # the construction check's graph, and one for the agent's binding of its tools: six model calls, no more
    assert wrapper.graphs_built == 2 and len(server.requests) == 6


def test_stream_mode_messages_shows_the_aggregated_messages_only(serve):
    server = serve(agent_replies)
    multiply, _ = counting_multiply()
    agent = create_agent(chat(server), [multiply], middleware=[AggregationMiddleware(n=3)])
    streamed = list(agent.stream({"messages": [HumanMessage(QUESTION)]}, stream_mode="messages"))
    assert_streams_the_aggregated_turns(streamed, "model")


class _Runs(BaseTracer):
    """A tracer (as LangSmith's is): every run's parent, and the chat-model runs in order."""

    def __init__(self) -> None:
        super().__init__()
        self.parent: dict[UUID, UUID | None] = {}
        self.chat_models: list[tuple[str, UUID]] = []

    def _persist_run(self, run: Run) -> None:
        pass

    def _on_chain_start(self, run: Run) -> None:
        self.parent[run.id] = run.parent_run_id

    def _on_llm_start(self, run: Run) -> None:  # a chat model's start, in a tracer's default ("original") format
        self.parent[run.id] = run.parent_run_id
        self.chat_models.append((run.name, run.id))

    def descends(self, run: UUID, ancestor: UUID) -> bool:
        while run is not None and run != ancestor:
            run = self.parent.get(run)
        return run == ancestor


def test_tracing_shows_the_candidates_under_the_aggregating_call(serve):
    server = serve(agent_replies)
    multiply, _ = counting_multiply()
    runs = _Runs()
    agent = create_agent(chat(server), [multiply], middleware=[AggregationMiddleware(n=3)])
    agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [runs]})
    # per model turn: the aggregating model's run, then the candidates' request as a run nested below it (a tracer
    # sees the whole tree; a handler of the caller's own sees one model call: test_a_callers_handler_sees_one_call)
    assert [name for name, _ in runs.chat_models] == ["AggregatingChatModel", "ChatOpenAI"] * 2
    for turn in (0, 2):
        (_, aggregating), (_, candidates) = runs.chat_models[turn], runs.chat_models[turn + 1]
        assert runs.descends(candidates, aggregating)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n": 0}, "n must be at least 1"),
        ({"n": 3, "min_candidates": 4}, "min_candidates must be between 1 and n=3"),
        ({"aggregator": "median"}, "unknown aggregator 'median'; known: best_of_n, gsr, majority, medoid, recursive, "),
        ({"n": 10_000}, "over the cap"),
    ],
)
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        AggregationMiddleware(**options)


def test_an_aggregating_model_is_not_aggregated_again(serve):
    server = serve(agent_replies)
    model = AggregatingChatModel(chat(server), n=3, aggregator=MajorityVote())
    assert AggregationMiddleware(n=5).aggregating(model) is model


@pytest.mark.parametrize("strategy", [Answer, ToolStrategy(Answer), ProviderStrategy(Answer)])
def test_aggregating_chat_model_in_create_agent_with_a_response_format(serve, strategy):
    """The model itself in `create_agent(..., response_format=...)`: LangChain reads its name and profile (the
    candidates' model's) to choose a strategy; it compiles one graph per call shape and reuses it."""
    server = serve(agent_replies)
    multiply, calls = counting_multiply()
    model = AggregatingChatModel(chat(server), n=3)
    agent = create_agent(model, [multiply], response_format=strategy)
    for _ in range(2):
        assert agent.invoke({"messages": [HumanMessage(QUESTION)]})["structured_response"] == Answer(value=42)
    assert calls == [(6, 7)] * 2 and len(server.requests) == 4
    assert model.graphs_built == 2  # the construction check, and the agent's binding (the same every turn)


def test_provider_strategy_is_chosen_from_the_candidates_profile(serve):
    """For a model whose profile says it has structured output (gpt-4o-mini's does), `create_agent` picks the
    provider strategy — no crash on the wrapper's name, the candidates get a json_schema response format."""
    server = serve(agent_replies)
    multiply, _ = counting_multiply()
    agent = create_agent(
        AggregatingChatModel(chat(server, model="gpt-4o-mini"), n=3), [multiply], response_format=Answer
    )
    assert agent.invoke({"messages": [HumanMessage(QUESTION)]})["structured_response"] == Answer(value=42)
    assert server.requests[-1]["response_format"]["type"] == "json_schema"


def test_a_callers_handler_sees_one_call_per_model_turn_with_every_candidates_usage(serve):
    """A handler of the caller's own sees the aggregating model as one model call, as LangChain's standard tests
    ask of any chat model; the usage it sees is every candidate's, counted once (not again per candidate)."""

    class Calls(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts: list[str] = []
            self.tokens = 0

        def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
            self.starts.append((serialized or {}).get("name") or kw.get("name") or "?")

        def on_llm_end(self, response: Any, **kw: Any) -> None:
            self.tokens += response.generations[0][0].message.usage_metadata["total_tokens"]

    server = serve(agent_replies)
    multiply, _ = counting_multiply()
    calls = Calls()
    agent = create_agent(chat(server), [multiply], middleware=[AggregationMiddleware(n=3)])
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [calls]})
    assert calls.starts == ["AggregatingChatModel"] * 2 and server.calls == 2
    answers = [m for m in out["messages"] if getattr(m, "usage_metadata", None)]
    assert len(answers) == 2 and calls.tokens == sum(m.usage_metadata["total_tokens"] for m in answers) > 0
