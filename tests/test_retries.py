"""A candidate request's retries: the first attempt runs without tenacity, and a request that fails goes on
with tenacity on the schedule it would have had from the start. Real graphs against a real test server."""

from __future__ import annotations

import asyncio
import time

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph.state import CompiledStateGraph
from openai import OpenAI
from tenacity import RetryCallState

from aggregate_graph import CandidatePolicy, build_aggregate_graph
from aggregate_graph.drawing.retries import _wait, retry_after
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from tests.conftest import chat

ASK = {"messages": [HumanMessage("What is 6 times 7?")]}


def _waits(policy: CandidatePolicy, attempts: int) -> list[float]:
    return [_wait(policy)(_state(n)) for n in range(1, attempts)]


def _state(attempt: int) -> RetryCallState:
    state = RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    return state


def test_the_retries_keep_the_schedule_tenacity_would_have_kept(monkeypatch) -> None:
    monkeypatch.setattr("random.uniform", lambda a, b: 0.0)  # tenacity's jitter
    policy = CandidatePolicy(max_attempts=5, backoff_initial_s=0.5, backoff_max_s=3.0, deadline_s=60)
    assert retry_after(policy, TimeoutError("slow"), started=time.perf_counter() - 61) is None  # past the deadline
    retry = retry_after(policy, TimeoutError("slow"), started=time.perf_counter())
    assert retry is not None and retry.policy.max_attempts == 4
    assert [retry.wait_s, *_waits(retry.policy, 4)] == _waits(policy, 5) == [0.5, 1.0, 2.0, 3.0]
    assert retry_after(policy, ValueError("not transient"), started=time.perf_counter()) is None


@pytest.mark.parametrize("run", ["sync", "async"])
@pytest.mark.parametrize("client_path", [False, True], ids=["ChatOpenAI", "openai client (direct replies)"])
def test_a_failing_request_is_retried_up_to_the_policys_attempts(serve, client_path: bool, run: str) -> None:
    def invoke(graph: CompiledStateGraph) -> dict:
        return graph.invoke(ASK) if run == "sync" else asyncio.run(graph.ainvoke(ASK))

    server = serve(["#### 42"], fail_first=2, failure_status=429)
    if client_path:
        client = OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        model = OpenAIClientChatModel(create=client.chat.completions.create, model="m")
    else:
        model = chat(server)
    policy = CandidatePolicy(max_attempts=3, backoff_initial_s=0.01, backoff_max_s=0.05, use_n=False)
    out = invoke(build_aggregate_graph(model, n=1, policy=policy))
    assert server.calls == 3 and out["sample_set"].aggregation.answer == "42"

    server = serve(["#### 42"], fail_first=2, failure_status=429)
    policy = policy.model_copy(update={"max_attempts": 2})
    with pytest.raises(Exception, match="0 of 1"):
        invoke(build_aggregate_graph(chat(server), n=1, policy=policy))
    assert server.calls == 2
