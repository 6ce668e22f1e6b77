"""`n` requests under real failure patterns: a failed `n` request degrades to single requests, each endpoint's
handling of `n` is probed once per process, and a 400 is tested with one single request before n are sent."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage
from openai import OpenAI

from aggregate_graph import CandidatePolicy, QuorumError, build_aggregate_graph, sample_sets_from, wrap_openai
from aggregate_graph.drawing.n_support import n_mode
from aggregate_graph.drawing.settings import Sampler
from tests.conftest import chat

ASK = {"messages": [HumanMessage("What is 6 times 7?")]}
QUICK = CandidatePolicy(backoff_initial_s=0.01, backoff_max_s=0.05)


def n_requests(server) -> int:
    return sum(1 for r in server.requests if (r.get("n") or 1) > 1)


@pytest.mark.parametrize(("rate", "status"), [(0.1, 429), (0.3, 500), (0.5, 429), (0.5, 500)])
def test_injected_failures_leave_survivors_and_record_every_candidate(serve, rate, status):
    server = serve(["#### 42"], failure_rate=rate, failure_status=status, seed=11)
    graph = build_aggregate_graph(chat(server), n=8, policy=QUICK)
    for _ in range(20):
        try:
            sample_set = graph.invoke(ASK)["sample_set"]
        except QuorumError as exc:  # only when nothing survived: a clear error that keeps all 8 records
            assert len(exc.sample_set.candidates) == 8 and not exc.sample_set.succeeded
            continue
        # every index is a record, or cancelled unsent once the vote settled (settling is on by default)
        cancelled = sample_set.metadata.get("cancelled", [])
        assert sorted([c.index for c in sample_set.candidates] + cancelled) == list(range(8))
        assert sample_set.aggregation.answer == "42"
    assert server.errors_sent > 0  # the faults really happened


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_failed_n_request_falls_back_to_single_requests(serve, run):
    server = serve(["#### 42"], fail_first=1, failure_status=500)
    graph = build_aggregate_graph(chat(server), n=5, policy=CandidatePolicy(max_attempts=1), settle=False)
    out = graph.invoke(ASK) if run == "sync" else asyncio.run(graph.ainvoke(ASK))
    assert len(out["sample_set"].succeeded) == 5 and server.requests[0]["n"] == 5
    assert [r.get("n") for r in server.requests[1:]] == [None] * 5
    assert n_mode(Sampler(chat(server)).endpoint) is None  # a 500 says nothing about n


def test_wrap_openai_without_client_retries_survives_a_failed_n_request(serve):
    server = serve(["The answer is 42."], fail_first=1, failure_status=500)
    # settle off: the singles counted, all of them (three 42s settle the vote before the last may be sent)
    client = wrap_openai(OpenAI(base_url=server.base_url, api_key="k", max_retries=0), n=4, settle=False)
    response = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "6*7?"}])
    [sample_set] = sample_sets_from(response)
    assert len(sample_set.succeeded) == 4 and sample_set.aggregation.answer == "42"


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_server_that_refuses_n_is_probed_once_per_endpoint(serve, run):
    server = serve(["#### 42"], n_mode="reject")
    graph = build_aggregate_graph(chat(server), n=4, settle=False)  # the singles counted: all of them

    async def three_calls() -> list[dict]:  # one event loop: the async client's connections belong to it
        return [await graph.ainvoke(ASK) for _ in range(3)]

    outs = [graph.invoke(ASK) for _ in range(3)] if run == "sync" else asyncio.run(three_calls())
    assert [len(out["sample_set"].succeeded) for out in outs] == [4, 4, 4]
    # the first call: the n request (400), one single as the probe, 3 more singles; then singles only
    assert n_requests(server) == 1 and server.calls == 1 + 4 * 3
    assert n_mode(Sampler(chat(server)).endpoint) == "refused"
    other = serve(["#### 42"])  # another endpoint is asked with n as before
    build_aggregate_graph(chat(other), n=4).invoke(ASK)
    assert other.calls == 1 and other.requests[0]["n"] == 4


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_server_that_ignores_n_is_asked_one_by_one_after_the_first_call(serve, run):
    server = serve(["#### 42"], n_mode="ignore")
    graph = build_aggregate_graph(chat(server), n=4, settle=False)  # the singles counted: all of them

    async def two_calls() -> None:  # one event loop: the async client's connections belong to it
        await graph.ainvoke(ASK)
        assert n_requests(server) == 1 and server.calls == 4
        await graph.ainvoke(ASK)

    if run == "async":
        asyncio.run(two_calls())
    else:
        graph.invoke(ASK)
        assert n_requests(server) == 1 and server.calls == 4  # 1 sample from the n request, then 3 singles
        graph.invoke(ASK)
    assert n_requests(server) == 1 and server.calls == 8


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_400_not_about_n_costs_two_requests_not_n_plus_one(serve, run):
    server = serve(["#### 42"], failure_rate=1.0, failure_status=400, failure_message="context length exceeded")
    graph = build_aggregate_graph(chat(server), n=5)
    with pytest.raises(QuorumError) as err:
        graph.invoke(ASK) if run == "sync" else asyncio.run(graph.ainvoke(ASK))
    assert server.calls == 2  # the n request, and one single that failed the same way
    candidates = err.value.sample_set.candidates
    assert len(candidates) == 5 and {c.error_status for c in candidates} == {400}
    assert all("context length exceeded" in c.error for c in candidates)
    assert n_mode(Sampler(chat(server)).endpoint) is None  # no verdict about n
