"""Settling early (`AggregationOptions.settle`): the graph decides once the candidates still out cannot change the
decision, and cancels their requests — never changing what majority vote would decide after waiting for all."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Literal

import openai
import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from openai import AsyncOpenAI, OpenAI

from aggregate_graph import (
    AdaptiveSampling,
    AggregationOptions,
    build_aggregate_graph,
    checkpoint_serde,
    sample_sets_from,
    wrap_openai,
)
from aggregate_graph.aggregators.choice import SSAChoiceAggregator
from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.structured import StructuredVote
from aggregate_graph.aggregators.weighted import WeightedVote
from aggregate_graph.drawing.course import Draw
from aggregate_graph.drawing.sampling import Drawer, draw_candidates
from aggregate_graph.drawing.settings import CandidatePolicy, Sampler
from aggregate_graph.drawing.settling import Settling
from aggregate_graph.graph import _Nodes
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from aggregate_graph.reading.answers import group_equivalent
from aggregate_graph.sample_set import Candidate, SampleSet
from aggregate_graph.testing import tool_calls_reply
from aggregate_graph.testing.openai_server import OpenAITestServer
from tests.test_proxy import CLIENT_KEY, proxy_for
from training.data import one_model
from training.pools import FAITHFUL_COT_LMS, is_reserved, load_faithful_cot, load_gpt3_solutions

QUESTION = "What is 6 times 7?"


def chat(server: OpenAITestServer) -> ChatOpenAI:
    return ChatOpenAI(model="test-model", base_url=server.base_url, api_key="x", max_retries=0)


def by_arrival(latencies: list[float]):  # the k-th request the server receives waits latencies[k]
    return lambda body, number: latencies[number % len(latencies)]


def stats_once_aborted(server: OpenAITestServer, aborted: int, within_s: float = 5.0) -> dict[str, int]:
    """The server's counters once it has counted `aborted` closed requests (it notices a closed socket a little
    later), or after `within_s`."""
    deadline = time.monotonic() + within_s
    while server.stats()["aborted"] < aborted and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.stats()


def settle_in_arrival_order(nodes: _Nodes, sample_set: SampleSet, order: list[int]) -> list[Candidate]:
    """The candidates landed when the graph's settling check (`_Nodes._settle_check`) first holds."""
    landed: list[Candidate] = []
    is_settled = nodes._settle_check(sample_set.question)
    for i in order:
        landed.append(sample_set.candidates[i].model_copy(update={"answer": None}))
        if is_settled(landed, len(order) - len(landed)):
            break
    return landed


def decision(nodes: _Nodes, question: str, candidates: list[Candidate]) -> str | None:
    copies = [c.model_copy(update={"answer": None}) for c in candidates]
    nodes._read(question, copies)  # read as one set, as the aggregate node reads it
    return MajorityVote().invoke(SampleSet(question=question, candidates=copies)).answer


def test_settling_never_changes_the_majority_answer_on_the_pools():
    """Every unreserved set of the Faithful-CoT pool (each LM's five prompts, anonymised, and nine candidates
    mixed from the six LMs; their answers are their programs' results, read by an answer function) and of the
    GPT-3 pool (read from the text as any reply is), in a random arrival order: the answer decided on the
    candidates landed when the vote settles is the answer decided on all of them. Every other set carries its
    landing times, as a drawn set does (a tie goes to the answer that landed first); the rest tie by index, as a
    set built by hand does."""
    sets = [s for s in load_faithful_cot() if not is_reserved(s)]
    pools = [one_model(s, lm) for s in sets for lm in FAITHFUL_COT_LMS]
    pools += [s.model_copy(update={"candidates": random.Random(s.id).sample(s.candidates, 9)}) for s in sets]
    gpt3 = [s for s in load_gpt3_solutions() if not is_reserved(s)]
    read_from_text = {id(s) for s in gpt3}  # the pools share problem ids
    rng, saved, checked = random.Random(0), 0, 0
    for number, sample_set in enumerate(pools + gpt3):
        n = len(sample_set.candidates)
        executed = {c.text: c.answer for c in sample_set.candidates}  # a program's text → what running it gave
        answer_type = "auto" if id(sample_set) in read_from_text else executed.get
        nodes = _Nodes([], AggregationOptions(n=n, answer_type=answer_type), (), False)
        order = rng.sample(range(n), n)
        if number % 2:
            landed_at = {position: float(time) for time, position in enumerate(order)}
            stamped = [c.model_copy(update={"landed_at": landed_at[i]}) for i, c in enumerate(sample_set.candidates)]
            sample_set = sample_set.model_copy(update={"candidates": stamped})
        landed = settle_in_arrival_order(nodes, sample_set, order)
        if len(landed) == n:
            continue
        early = decision(nodes, sample_set.question, landed)
        full = decision(nodes, sample_set.question, sample_set.candidates)
        assert early is not None and len(group_equivalent([early, full or ""])) == 1, (sample_set.id, early, full)
        saved, checked = saved + n - len(landed), checked + 1
    assert checked > len(pools) // 2 and saved > len(pools) // 2  # it settles on most sets, so the property is tested


def test_settling_cancels_the_requests_still_out_and_keeps_every_candidate_that_landed():
    # arrivals 0-1 fail fast, 2-4 answer 42 in turn, 5-6 are slow: settled once the third 42 lands (3 > 2 out)
    latencies = [0.02, 0.02, 0.1, 0.15, 0.2, 5.0, 5.0]
    with OpenAITestServer(["The answer is 42."], latency_s=by_arrival(latencies), fail_first=2, n_mode="reject") as s:
        graph = build_aggregate_graph(chat(s), n=7, policy={"use_n": False, "max_attempts": 1})
        started = time.perf_counter()
        out = asyncio.run(graph.ainvoke({"messages": [("user", QUESTION)]}))
        elapsed = time.perf_counter() - started
        stats = stats_once_aborted(s, 2)
    sample_set = out["sample_set"]
    assert sample_set.aggregation.answer == "42" and elapsed < 2.0
    assert stats["aborted"] == 2 and stats["samples_served"] == 3  # the slow ones stopped: nothing generated
    assert len(sample_set.succeeded) == 3 and len(sample_set.failed) == 2  # failures recorded as before
    assert all("injected failure" in (c.error or "") for c in sample_set.failed)
    assert len(sample_set.metadata["cancelled"]) == 2 and sample_set.metadata["samples_saved"] == 2
    assert not set(sample_set.metadata["cancelled"]) & {c.index for c in sample_set.candidates}


def test_settle_off_waits_for_every_candidate():
    with OpenAITestServer(["The answer is 42."], latency_s=by_arrival([0.01, 0.01, 0.01, 0.3]), n_mode="reject") as s:
        graph = build_aggregate_graph(chat(s), n=4, settle=False, policy={"use_n": False})
        out = asyncio.run(graph.ainvoke({"messages": [("user", QUESTION)]}))
        assert len(out["sample_set"].candidates) == 4 and s.stats()["aborted"] == 0
        assert out["sample_set"].metadata["cancelled"] == []


def test_a_blocking_run_does_not_send_the_requests_a_settled_vote_no_longer_needs():
    with OpenAITestServer(["The answer is 42."], n_mode="reject") as s:
        graph = build_aggregate_graph(chat(s), n=5, max_concurrency=1, policy={"use_n": False})
        out = graph.invoke({"messages": [("user", QUESTION)]})
        assert s.calls == 3 and len(out["sample_set"].candidates) == 3
        assert out["sample_set"].metadata["cancelled"] == [3, 4]


def test_a_split_vote_waits_for_the_candidates_that_decide_it():
    replies = ["The answer is 42.", "The answer is 41.", "The answer is 40."]  # 1-1-1, then the fourth decides
    with OpenAITestServer(replies, latency_s=by_arrival([0.01, 0.02, 0.03, 0.3]), n_mode="reject") as s:
        graph = build_aggregate_graph(chat(s), n=4, policy={"use_n": False})
        out = asyncio.run(graph.ainvoke({"messages": [("user", QUESTION)]}))
        assert len(out["sample_set"].candidates) == 4 and s.stats()["aborted"] == 0
        assert out["sample_set"].aggregation.answer == "42"


def candidates(
    *answers: str, texts: list[str] | None = None, indices: list[int] | None = None, landed: list[float] | None = None
) -> SampleSet:
    return SampleSet(
        question=QUESTION,
        candidates=[
            Candidate(
                index=(indices or list(range(len(answers))))[i],
                text=(texts or list(answers))[i],
                answer=a,
                model="m",
                landed_at=None if landed is None else landed[i],
            )
            for i, a in enumerate(answers)
        ],
    )


def test_each_vote_settles_by_its_own_margin():
    assert MajorityVote().settled(candidates("42", "42", "42"), 2)
    # 2 - 1 is not more than 1 still out, but a 2-2 tie goes to the answer whose first candidate comes first
    assert MajorityVote().settled(candidates("42", "42", "41"), 1)
    assert not MajorityVote().settled(candidates("41", "42", "42"), 1)  # that tie would go to 41
    assert not MajorityVote().settled(candidates("42", "41"), 2)  # a new answer could take both
    assert not MajorityVote(weights={"m": 1.0}).settled(candidates("42", "42", "41"), 1)  # weighted: no tie rule
    assert MajorityVote().settled(candidates("42", "42", "42", "41"), 1)
    assert not MajorityVote(weights=lambda c: 1.0).settled(candidates("42", "42", "42"), 0)  # unbounded weights
    heavy = WeightedVote({"m": 1.0}, default_weight=3.0)  # a candidate still out may weigh 3
    assert not heavy.settled(candidates("42", "42", "42"), 1) and heavy.settled(candidates("42", "42", "42", "42"), 1)
    # with landing times (a drawn set) a tie goes to the answer that landed first, and those still out land later
    assert MajorityVote().settled(candidates("41", "42", "42", landed=[3.0, 1.0, 2.0]), 1)
    assert not MajorityVote().settled(candidates("41", "42", "42", landed=[1.0, 2.0, 3.0]), 1)
    assert not MajorityVote().settled(candidates("42", "42", indices=[2, 3]), 2)  # indices 0 and 1 would win a tie
    assert MajorityVote().settled(candidates("42", "42", indices=[2, 3], landed=[1.0, 2.0]), 2)
    assert MajorityVote().invoke(candidates("41", "42", landed=[2.0, 1.0])).answer == "42"
    assert MajorityVote().invoke(candidates("41", "42")).answer == "41"
    json_set = candidates("a", "a", "b", texts=['{"x": 1}', '{ "x":1 }', '{"x": 2}'])
    assert not StructuredVote().settled(json_set, 1) and StructuredVote().settled(json_set, 0)


def test_a_trained_aggregator_settles_only_when_it_would_skip_the_model_as_unanimous():
    ssa = SSAChoiceAggregator(FakeListChatModel(responses=["A"]))  # never asked: the rule reads the vote
    assert ssa.settled(candidates("42", "42", "42"), 2)  # unanimous, and 3 > 2: the vote's answer, as on any
    assert not ssa.settled(candidates("42", "42", "42", "41"), 0)  # two answers: the model reads them all


def test_the_proxy_streams_the_settled_answer_without_waiting_for_the_slow_candidates():
    latencies = [0.05, 0.1, 0.15, 5.0, 5.0]  # the vote is settled by the third 42
    with OpenAITestServer(["The answer is 42."], latency_s=by_arrival(latencies), n_mode="reject") as upstream:
        with proxy_for(upstream, n=5) as url:
            client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
            started = time.perf_counter()
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": QUESTION}], stream=True
            )
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
            elapsed = time.perf_counter() - started
            stats_once_aborted(upstream, 2)
        assert text == "The answer is 42." and elapsed < 2.0
        assert upstream.stats()["aborted"] == 2 and upstream.stats()["samples_served"] == 3


def test_a_wrapped_async_client_settles_too():
    latencies = [0.05, 0.1, 0.15, 5.0, 5.0]
    with OpenAITestServer(["The answer is 42."], latency_s=by_arrival(latencies), n_mode="reject") as upstream:

        async def call() -> Any:
            client = wrap_openai(AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), n=5)
            return await client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])

        started = time.perf_counter()
        completion = asyncio.run(call())
        assert time.perf_counter() - started < 2.0
        (sample_set,) = sample_sets_from(completion)
        assert sample_set.aggregation.answer == "42" and len(sample_set.metadata["cancelled"]) == 2


def test_under_a_checkpointer_the_candidates_own_tasks_share_the_settling():
    # with a checkpointer each candidate is its own LangGraph task: the wave's tasks settle together
    with OpenAITestServer(
        ["The answer is 42."], latency_s=by_arrival([0.05, 0.1, 0.15, 5.0, 5.0]), n_mode="reject"
    ) as s:
        graph = build_aggregate_graph(
            chat(s), n=5, policy={"use_n": False}, checkpointer=InMemorySaver(serde=checkpoint_serde())
        )
        started = time.perf_counter()
        out = asyncio.run(graph.ainvoke({"messages": [("user", QUESTION)]}, {"configurable": {"thread_id": "t"}}))
        assert time.perf_counter() - started < 2.0
        assert len(out["sample_set"].candidates) == 3 and len(out["sample_set"].metadata["cancelled"]) == 2


def _short_and_long(body: dict[str, Any], number: int) -> str:
    # the samples of one n=5 request: three short replies that agree, two long ones still generating
    return "The answer is 42." if number % 5 < 3 else " ".join(["step"] * 200) + " so the answer is 41."


def test_a_streamed_n_request_is_closed_once_the_vote_is_settled():
    with OpenAITestServer(_short_and_long, token_latency_s=0.01) as upstream:
        for client in (OpenAI, AsyncOpenAI):
            wrapped = wrap_openai(
                client(base_url=upstream.base_url, api_key="x", max_retries=0), n=5, stream_candidates=True
            )
            create = wrapped.chat.completions.create
            messages = [{"role": "user", "content": QUESTION}]
            started = time.perf_counter()
            completion = create(model="m", messages=messages) if client is OpenAI else asyncio.run(
                create(model="m", messages=messages)
            )  # fmt: skip
            elapsed = time.perf_counter() - started
            (sample_set,) = sample_sets_from(completion)
            assert sample_set.aggregation.answer == "42" and elapsed < 1.0  # all five would take over 2 s
            assert [c.text for c in sample_set.candidates] == ["The answer is 42."] * 3
            assert len(sample_set.metadata["cancelled"]) == 2 and not sample_set.failed
            # the closed stream never got its usage: the set says whose tokens its usage leaves out
            assert sample_set.metadata["usage_unreported"] == [c.index for c in sample_set.candidates]
            request = upstream.requests[-1]
            assert request["n"] == 5 and request["stream"] is True  # one request, streamed
        stats = stats_once_aborted(upstream, 2)
    assert stats["calls"] == 2 and stats["aborted"] == 2
    assert stats["completion_tokens_served"] < 2 * (3 * 4 + 2 * 20)  # the long replies stopped early


def test_a_streamed_n_request_settles_to_the_answer_waiting_for_all_gives():
    with OpenAITestServer(_short_and_long, token_latency_s=0.001) as upstream:
        messages, answers = [{"role": "user", "content": QUESTION}], []
        for settle in (True, False):
            options = {"n": 5, "settle": settle, "stream_candidates": True}
            client = wrap_openai(OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), **options)
            answers += sample_sets_from(client.chat.completions.create(model="m", messages=messages))
        assert answers[0].aggregation.answer == answers[1].aggregation.answer == "42"
        assert len(answers[1].candidates) == 5 and answers[1].metadata["cancelled"] == []
        assert upstream.requests[-1].get("stream") is None  # settle off: the n request is not streamed


def test_without_stream_candidates_a_request_with_n_is_answered_whole():
    with OpenAITestServer(_short_and_long) as upstream:
        client = wrap_openai(OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), n=5)
        completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        (sample_set,) = sample_sets_from(completion)
        assert len(sample_set.candidates) == 5 and sample_set.usage.completion_tokens > 0
        assert sample_set.metadata["usage_unreported"] == []
        assert upstream.requests[-1].get("stream") is None


def test_a_blocking_client_streams_its_requests_and_closes_those_still_out_once_settled():
    # a wrapped sync client cannot cancel a request in flight: with stream_candidates it streams each one and
    # closes those still out once settled
    with OpenAITestServer(_short_and_long, token_latency_s=0.01, n_mode="reject") as upstream:
        options = {"n": 5, "policy": {"use_n": False}, "stream_candidates": True}
        wrapped = wrap_openai(OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), **options)
        started = time.perf_counter()
        completion = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        elapsed = time.perf_counter() - started
        (sample_set,) = sample_sets_from(completion)
        assert sample_set.aggregation.answer == "42" and elapsed < 1.0  # the two long replies take over 2 s
        assert [c.text for c in sample_set.candidates] == ["The answer is 42."] * 3 and not sample_set.failed
        assert len(sample_set.metadata["cancelled"]) == 2
        # each landed stream was read to its end: its usage is counted
        assert sample_set.metadata["usage_unreported"] == [] and sample_set.usage.completion_tokens == 3 * 4
        assert all(r["stream"] is True and "n" not in r for r in upstream.requests)
        stats = stats_once_aborted(upstream, 2)
    assert stats["calls"] == 5 and stats["aborted"] == 2
    assert stats["completion_tokens_served"] < 3 * 4 + 2 * 20  # the long replies stopped early


def _split_and_long(body: dict[str, Any], number: int) -> str:
    # five answers that never settle: the first short, the other four still generating (~4 s at 0.05 s a word)
    return "The answer is 42." if number == 0 else f"The answer is {number}. " + " ".join(["step"] * 76)


def seconds_to_close_after_the_first_chunk(upstream: OpenAITestServer, **options: Any) -> float:
    """A wrapped blocking client's aggregated stream (n=5, single requests), read to its first chunk (held until the
    first candidate landed), then closed: how long `close()` took."""
    wrapped = wrap_openai(
        OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), n=5, policy={"use_n": False}, **options
    )
    stream = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], stream=True)
    next(iter(stream))
    started = time.perf_counter()
    stream.close()
    return time.perf_counter() - started


def test_closing_a_blocking_aggregated_stream_closes_the_candidate_streams_still_out():
    # closing a blocking LangGraph stream waits for its running nodes: the wrapper first tells the draws to stop
    with OpenAITestServer(_split_and_long, latency_s=0.05, token_latency_s=0.05, n_mode="reject") as upstream:
        closing_s = seconds_to_close_after_the_first_chunk(upstream, stream_candidates=True)
        stats = stats_once_aborted(upstream, 4)
    assert closing_s < 1.0  # waiting for the four long replies takes ~4 s
    assert stats["calls"] == 5 and stats["aborted"] == 4
    assert stats["completion_tokens_served"] < 4 + 4 * 40  # the long replies stopped early (80 words each)


def test_closing_a_blocking_aggregated_stream_sends_no_more_requests():
    # without stream_candidates a request in flight is waited for, but those not yet sent are never sent
    with OpenAITestServer(lambda b, number: f"The answer is {number}.", latency_s=0.3, n_mode="reject") as upstream:
        closing_s = seconds_to_close_after_the_first_chunk(upstream, max_concurrency=1)
        time.sleep(0.4)  # a request sent after the close would reach the server by now
    assert closing_s < 0.6  # the second request, in flight, is waited for; the three more would take 0.9 s
    assert upstream.stats()["calls"] == 2


def test_a_blocking_graph_streams_its_chat_models_requests_and_closes_those_still_out_once_settled():
    # a blocking graph over ChatOpenAI cannot cancel a request in flight: with stream_candidates each single request
    # is streamed through the model's own `stream` and closed once settled; a parent streaming messages sees none
    with OpenAITestServer(_short_and_long, token_latency_s=0.01, n_mode="reject") as upstream:
        graph = build_aggregate_graph(chat(upstream), n=5, policy={"use_n": False}, stream_candidates=True)
        started = time.perf_counter()
        events = list(graph.stream({"messages": [("user", QUESTION)]}, stream_mode=["messages", "values"]))
        elapsed = time.perf_counter() - started
        stats = stats_once_aborted(upstream, 2)
    sample_set = [data for mode, data in events if mode == "values"][-1]["sample_set"]
    assert sample_set.aggregation.answer == "42" and elapsed < 1.0  # the two long replies take over 2 s
    assert [c.text for c in sample_set.candidates] == ["The answer is 42."] * 3 and not sample_set.failed
    assert len(sample_set.metadata["cancelled"]) == 2
    assert sample_set.metadata["usage_unreported"] == [] and sample_set.usage.completion_tokens == 3 * 4
    assert all(r["stream"] is True for r in upstream.requests)
    assert stats["calls"] == 5 and stats["aborted"] == 2
    streamed = [meta["langgraph_node"] for mode, (_, meta) in ((m, d) for m, d in events if m == "messages")]
    assert "generate" not in streamed


@pytest.mark.parametrize("options", [{}, {"settle": False, "stream_candidates": True}], ids=["default", "no settle"])
def test_a_blocking_client_streams_only_when_asked_to_and_settling(options: dict[str, Any]):
    with OpenAITestServer(_short_and_long, n_mode="reject") as upstream:
        client = OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
        wrapped = wrap_openai(client, n=5, policy={"use_n": False}, **options)
        completion = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        (sample_set,) = sample_sets_from(completion)
        assert sample_set.aggregation.answer == "42" and not sample_set.failed
        assert all("stream" not in r for r in upstream.requests)


@pytest.mark.parametrize("refusal", ["stream", "stream_options"])
@pytest.mark.parametrize(
    ("client", "use_n"), [(OpenAI, True), (AsyncOpenAI, True), (OpenAI, False)], ids=["n", "async n", "singles"]
)
def test_an_endpoint_refusing_to_stream_is_asked_unstreamed(
    client: type[OpenAI | AsyncOpenAI], use_n: bool, refusal: Literal["stream", "stream_options"]
):
    # OpenAI answers a streamed request 400 naming `stream` for a model the organisation may not stream, older
    # Azure api-versions one carrying `stream_options` (no `param`): each refused request is asked again at once
    # unstreamed, and the endpoint's later requests are not streamed
    with OpenAITestServer(["The answer is 42."], refuse_stream=refusal) as upstream:
        options = {"n": 3, "policy": {"use_n": use_n}, "stream_candidates": True}
        create = wrap_openai(
            client(base_url=upstream.base_url, api_key="x", max_retries=0), **options
        ).chat.completions.create
        sent = []
        for _ in range(2):
            completion = create(model="m", messages=[{"role": "user", "content": QUESTION}])
            if client is AsyncOpenAI:
                completion = asyncio.run(completion)
            (sample_set,) = sample_sets_from(completion)
            assert sample_set.aggregation.answer == "42" and not sample_set.failed
            assert sum(c.ok for c in sample_set.candidates) >= 2  # settled once two agree: the third may be cancelled
            sent.append([bool(r.get("stream")) for r in upstream.requests])
            upstream.requests.clear()
    first, second = sent
    assert first[0] is True and first[-1] is False  # refused streamed, then asked unstreamed
    assert second and not any(second)  # remembered for the endpoint


def test_a_400_quoting_the_request_is_no_refusal_to_stream():
    # vLLM's validation errors quote the request, `stream_options` and all: such a 400 is about the request, so it
    # fails its candidates once, and the endpoint's later requests are still streamed (and closed once settled)
    quoted = (
        "1 validation error: Value error, use one kind of guided decoding: {'stream_options': {'include_usage': True}}"
    )
    with OpenAITestServer(["The answer is 42."], failure_rate=1.0, failure_status=400, failure_message=quoted) as bad:
        client = OpenAI(base_url=bad.base_url, api_key="x", max_retries=0)
        create = wrap_openai(client, n=2, policy={"use_n": False}, stream_candidates=True).chat.completions.create
        with pytest.raises(openai.BadRequestError, match="guided decoding"):
            create(model="m", messages=[{"role": "user", "content": QUESTION}])
        assert len(bad.requests) == 2 and all(r.get("stream") for r in bad.requests)  # none asked again unstreamed
        bad.failure_rate = 0.0
        create(model="m", messages=[{"role": "user", "content": QUESTION}])
        assert all(r.get("stream") for r in bad.requests[2:])


def test_a_blocking_graph_over_a_chat_model_whose_endpoint_refuses_stream_options_asks_unstreamed():
    # ChatOpenAI asks for a streamed request's usage with `stream_options`, which older Azure api-versions refuse
    with OpenAITestServer(["The answer is 42."], refuse_stream="stream_options", n_mode="reject") as upstream:
        model = ChatOpenAI(model="test-model", base_url=upstream.base_url, api_key="x", max_retries=0)
        graph = build_aggregate_graph(model, n=3, policy={"use_n": False}, stream_candidates=True)
        sample_sets = [graph.invoke({"messages": [("user", QUESTION)]})["sample_set"] for _ in range(2)]
        streamed = [bool(r.get("stream")) for r in upstream.requests]
    assert all(s.aggregation.answer == "42" and not s.failed for s in sample_sets)
    assert streamed[0] is True and not any(streamed[-3:])  # refused once, then asked unstreamed and remembered
    assert sample_sets[-1].metadata["usage_unreported"] == []


@pytest.mark.parametrize(
    "settings",
    [{"disable_streaming": True}, {"use_responses_api": True}, {"stream_usage": False}],
    ids=["not streaming", "responses", "no stream usage"],
)
def test_a_blocking_graph_streams_a_chat_model_as_it_is_set_up(settings: dict[str, Any]):
    # ChatOpenAI set up not to stream, to use the Responses API, or not to ask for usage: each candidate lands as
    # the model answers, none fails, and a whole (unstreamed) reply is never closed
    with OpenAITestServer(["The answer is 42."], latency_s=0.2, n_mode="reject") as upstream:
        model = ChatOpenAI(model="test-model", base_url=upstream.base_url, api_key="x", max_retries=0, **settings)
        graph = build_aggregate_graph(model, n=3, policy={"use_n": False}, stream_candidates=True)
        sample_set = graph.invoke({"messages": [("user", QUESTION)]})["sample_set"]
    assert sample_set.aggregation.answer == "42" and not sample_set.failed
    if "disable_streaming" in settings:  # sent before any landed, each answered whole: all kept
        assert len(sample_set.candidates) == 3 and not any(r.get("stream") for r in upstream.requests)
    if "stream_usage" in settings:  # the user's choice stands: no usage asked for, none reported
        assert not any((r.get("stream_options") or {}).get("include_usage") for r in upstream.requests)
        assert sample_set.metadata["usage_unreported"] == [c.index for c in sample_set.candidates]
    else:
        assert sample_set.metadata["usage_unreported"] == []


@pytest.mark.parametrize("options", [{}, {"settle": False, "stream_candidates": True}], ids=["default", "no settle"])
def test_a_blocking_graph_streams_only_when_asked_to_and_settling(options: dict[str, Any]):
    with OpenAITestServer(_short_and_long, n_mode="reject") as upstream:
        graph = build_aggregate_graph(chat(upstream), n=5, policy={"use_n": False}, **options)
        out = graph.invoke({"messages": [("user", QUESTION)]})
        assert out["sample_set"].aggregation.answer == "42" and not out["sample_set"].failed
        assert not any(r.get("stream") for r in upstream.requests)


def _streaming_drawer(upstream: OpenAITestServer, endpoint: str) -> tuple[OpenAIClientChatModel, Drawer, Settling]:
    """A blocking drawer that streams through a sync client, with a settling that the test settles itself."""
    client = OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
    model = OpenAIClientChatModel(create=client.chat.completions.create, model="m", cache=False, endpoint=endpoint)
    settling = Settling(5, lambda landed, outstanding: False)
    return model, Drawer(Sampler(model), None, settling, stream_candidates=True), settling


def test_a_probe_closed_once_settled_ends_its_draw():
    # an n request refused (400) is followed by one streamed single: settled meanwhile (by another sampler's
    # candidates), it is closed, and the draw ends with none rather than failing
    with OpenAITestServer(["The answer is 42."], n_mode="reject", token_latency_s=0.01) as upstream:
        model, drawer, settling = _streaming_drawer(upstream, "probe-closed")
        create = model.create

        def settling_create(**body: Any) -> Any:
            if body.get("n"):
                settling.settled = True
            return create(**body)

        object.__setattr__(model, "create", settling_create)
        drawn = draw_candidates(Draw(0, (0, 1, 2), (HumanMessage(QUESTION),)), CandidatePolicy(), drawer)
        assert drawn == [] and [(r.get("n"), r.get("stream")) for r in upstream.requests] == [(3, True), (None, True)]


def test_a_streamed_single_retried_after_a_timeout_keeps_its_candidate():
    # the first attempt times out and keeps streaming in its thread; the retry's candidate is the draw's
    latencies = [1.3, 0.6]
    with OpenAITestServer(["The answer is 42."], latency_s=lambda body, k: latencies[k % 2]) as upstream:
        _, drawer, _ = _streaming_drawer(upstream, "retried")
        policy = CandidatePolicy(timeout_s=1.0, max_attempts=2, backoff_initial_s=0, backoff_max_s=0, use_n=False)
        landed: list[Candidate] = []
        drawn = draw_candidates(Draw(0, (0,), (HumanMessage(QUESTION),)), policy, drawer, landed.extend)
    assert [(c.index, c.text, c.error) for c in drawn] == [(0, "The answer is 42.", None)]
    assert landed == drawn


def test_a_streamed_attempt_given_up_on_is_closed():
    # the first attempt times out while its upstream is still slow to answer; once it streams, nobody reads it:
    # it is closed at its first chunk instead of being read to its end in its thread. The reply goes by the order
    # served, the latency by arrival: the first request (1.1 s) is served 0.4 s before the retry (1.0 + 0.5 s),
    # and the retry lands 0.4 s within its own timeout
    latencies, long = [1.1, 0.5], " ".join(["step"] * 200) + " so the answer is 41."
    with OpenAITestServer(
        lambda body, number: long if number == 0 else "The answer is 42.",
        latency_s=lambda body, k: latencies[k % 2],
        token_latency_s=0.02,
    ) as upstream:
        _, drawer, _ = _streaming_drawer(upstream, "given-up")
        policy = CandidatePolicy(timeout_s=1.0, max_attempts=2, backoff_initial_s=0, backoff_max_s=0, use_n=False)
        drawn = draw_candidates(Draw(0, (0,), (HumanMessage(QUESTION),)), policy, drawer)
        stats = stats_once_aborted(upstream, 1, within_s=2)
    assert [c.text for c in drawn] == ["The answer is 42."]
    assert stats["aborted"] == 1 and stats["completion_tokens_served"] < 50  # the long reply takes 4 s to stream


def test_the_proxy_closes_a_streamed_n_request_once_settled():
    with OpenAITestServer(_short_and_long, token_latency_s=0.01) as upstream:
        with proxy_for(upstream, n=5, stream_candidates=True) as url:
            client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
            completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        (sample_set,) = sample_sets_from(completion)
        assert sample_set.aggregation.answer == "42" and len(sample_set.metadata["cancelled"]) == 2
        assert upstream.calls == 1 and upstream.requests[0]["stream"] is True and upstream.requests[0]["n"] == 5


def test_settling_stamps_candidates_in_the_order_they_land():
    """A candidate stamped earlier elsewhere (a worker thread, a clock stepping back) that lands later gets a later
    time: the candidates still out land after every one landed, as a settled tie needs."""
    settling = Settling(4, lambda landed, outstanding: False)
    late, early = Candidate(index=1, text="7", answer="7", landed_at=5.0), Candidate(index=0, text="9", answer="9")
    settling.land([late])
    early.landed_at = 1.0
    settling.land([early])
    assert early.landed_at >= late.landed_at >= 5.0
    rebuilt = Candidate(index=0, text="9", answer="9", landed_at=99.0)  # e.g. a streamed choice, once its request ends
    settling.stamp([rebuilt])
    assert rebuilt.landed_at == early.landed_at


def test_a_later_wave_settles_on_the_earlier_waves_candidates_too():
    """Adaptive sampling: the second wave's vote counts the first wave's candidates as landed (first), so a tie
    they can still win keeps the wave waiting: 9, 9, then 7, 7, 7, two abstentions and a slow 9 tie 3-3, and the
    9s landed first. Counted as candidates still out instead, the first wave's 9s would land after the 7s and lose
    that tie: the wave would settle on 7 and cancel the slow 9."""
    replies = ["The answer is 9."] * 2 + ["The answer is 7."] * 3 + ["The answer is unknown."] * 2
    adaptive = AdaptiveSampling(first_wave=2, wave_size=6, agreement=1.0, min_agreeing=3)
    latencies = [0.01, 0.01, 0.01, 0.01, 0.01, 0.02, 0.02, 0.6]
    with OpenAITestServer([*replies, "The answer is 9."], latency_s=by_arrival(latencies), n_mode="reject") as s:
        graph = build_aggregate_graph(chat(s), n=8, adaptive=adaptive, answer_type="math", policy={"use_n": False})
        out = asyncio.run(graph.ainvoke({"messages": [("user", QUESTION)]}))
    sample_set = out["sample_set"]
    answers = [c.answer for c in sample_set.candidates]  # the server's replies go by arrival, not by index
    assert answers[:2] == ["9", "9"] and sorted(map(str, answers[2:])) == ["7", "7", "7", "9", "None", "None"]
    assert sample_set.metadata["cancelled"] == [] and sample_set.aggregation.answer == "9"


LONG_42 = "The answer is 42. " + "so " * 300  # 3 s at 0.01 s a word


def _cut_short_replies(body: dict[str, Any], sample: int) -> str:
    """The `n` request's choices: two short, three that outlast the attempt's timeout; each single request: 42."""
    if body.get("n"):
        return ["The answer is 42.", "The answer is 42.", LONG_42, LONG_42, LONG_42][sample % 5]
    return "The answer is 42."


@pytest.mark.parametrize("client", [OpenAI, AsyncOpenAI], ids=["sync", "async"])
def test_a_streamed_n_request_cut_short_keeps_the_choices_that_landed(client: type[OpenAI | AsyncOpenAI]):
    # the request times out after two of its five choices landed (each reported to settling as it finished): those
    # stay in the set, as settling counted them, and only the other three are asked for, one by one
    with OpenAITestServer(_cut_short_replies, token_latency_s=0.01) as upstream:
        policy = {"use_n": True, "timeout_s": 1.0, "max_attempts": 1}
        create = wrap_openai(
            client(base_url=upstream.base_url, api_key="x", max_retries=0), n=5, policy=policy, stream_candidates=True
        ).chat.completions.create
        completion = create(model="m", messages=[{"role": "user", "content": QUESTION}])
        if client is AsyncOpenAI:
            completion = asyncio.run(completion)
        (sample_set,) = sample_sets_from(completion)
        singles = [r for r in upstream.requests if not r.get("n")]
    first_two = [c for c in sample_set.candidates if c.index in (0, 1)]
    assert sample_set.aggregation.answer == "42" and not sample_set.failed
    assert [c.usage for c in first_two] == [None, None] and len(first_two) == 2  # the n request's, cut short
    assert {0, 1} <= set(sample_set.metadata["usage_unreported"])
    assert len(singles) <= 3  # the landed indices are not asked for again


def test_the_first_call_to_an_endpoint_ignoring_n_settles_on_its_one_choice_too():
    # the `n` request's one choice lands before the other four are asked for one by one: settling counts it, so
    # three agreeing answers settle the vote while two slow requests are still out
    replies = ["The answer is 42."] * 3 + ["The answer is 41."] * 2
    with OpenAITestServer(
        lambda body, sample: replies[sample % 5], latency_s=lambda body, k: 0.05 if k < 3 else 3.0, n_mode="ignore"
    ) as upstream:
        wrapped = wrap_openai(AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), n=5)
        started = time.perf_counter()
        completion = asyncio.run(
            wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        )
        elapsed = time.perf_counter() - started
        (sample_set,) = sample_sets_from(completion)
    # the four singles race to the server, so which candidate indices drew the two slow replies varies by run
    cancelled = set(sample_set.metadata["cancelled"])
    assert sample_set.aggregation.answer == "42" and len(cancelled) == 2 and cancelled <= {1, 2, 3, 4}
    assert [c.answer for c in sample_set.candidates if c.index not in cancelled] == ["42"] * 3
    assert elapsed < 2.0


def test_replies_already_at_the_client_when_the_vote_settles_are_kept():
    # every reply reaches the client while its event loop is held, so the vote settles on three of them with the
    # other two already there, paid for: they are read, not cancelled, and their tokens are in the usage
    replies = ["The answer is 42."] * 3 + ["The answer is 41."] * 2
    with OpenAITestServer(lambda body, sample: replies[sample % 5], latency_s=0.1, n_mode="reject") as upstream:
        # five singles from the start (not an n request refused first, then a probe, then four singles: those would
        # land after the loop is held, each when it comes), and the loop held once the server has all five
        client = AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
        wrapped = wrap_openai(client, n=5, policy={"use_n": False})

        async def call() -> SampleSet:
            async def hold_the_loop() -> None:
                while upstream.calls < 5:
                    await asyncio.sleep(0.005)
                time.sleep(0.5)  # the replies all arrive meanwhile

            holder = asyncio.create_task(hold_the_loop())
            messages = [{"role": "user", "content": QUESTION}]
            (sample_set,) = sample_sets_from(await wrapped.chat.completions.create(model="m", messages=messages))
            await holder
            return sample_set

        sample_set = asyncio.run(call())
        stats = upstream.stats()
    assert sample_set.aggregation.answer == "42" and len(sample_set.candidates) == 5
    assert sample_set.metadata["cancelled"] == [] and stats["aborted"] == 0
    assert sample_set.usage.completion_tokens == stats["completion_tokens_served"]


MULTIPLY_TOOL = {
    "type": "function",
    "function": {
        "name": "multiply",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}


@pytest.mark.parametrize("surface", ["wrap_openai", "graph"])
def test_a_tool_plan_settles_the_vote_though_its_candidates_state_no_text(surface: str):
    # three fast candidates call multiply(6, 7), two slow ones multiply(6, 8): 3 > 0 + 2 settles the tool-plan
    # vote, though the candidates' empty texts say nothing of an answer type
    plans = [tool_calls_reply(("multiply", {"a": 6, "b": 7}))] * 3 + [
        tool_calls_reply(("multiply", {"a": 6, "b": 8}))
    ] * 2
    with OpenAITestServer(
        lambda body, sample: plans[sample % 5], latency_s=by_arrival([0.05] * 3 + [3.0] * 2), n_mode="reject"
    ) as upstream:
        started = time.perf_counter()
        if surface == "wrap_openai":
            wrapped = wrap_openai(AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), n=5)
            completion = asyncio.run(
                wrapped.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": QUESTION}], tools=[MULTIPLY_TOOL]
                )
            )
            (sample_set,) = sample_sets_from(completion)
        else:
            graph = build_aggregate_graph(chat(upstream).bind_tools([MULTIPLY_TOOL]), n=5, policy={"use_n": False})
            sample_set = asyncio.run(graph.ainvoke({"messages": [("user", QUESTION)]}))["sample_set"]
        elapsed = time.perf_counter() - started
        stats = stats_once_aborted(upstream, 2)
    assert [(call["name"], call["args"]) for call in sample_set.aggregation.tool_calls] == [
        ("multiply", {"a": 6, "b": 7})
    ]
    assert len(sample_set.metadata["cancelled"]) == 2 and not sample_set.failed and stats["aborted"] == 2
    assert elapsed < 2.0


def test_a_blocking_run_sends_no_retry_once_settled():
    # two candidates fail at once with a transient 500; the other three settle the vote during the retries' wait
    with OpenAITestServer(["The answer is 42."], fail_first=2, latency_s=lambda body, k: 0.0 if k < 2 else 0.1) as up:
        policy = {"use_n": False, "max_attempts": 3, "backoff_initial_s": 2.0}
        wrapped = wrap_openai(OpenAI(base_url=up.base_url, api_key="x", max_retries=0), n=5, policy=policy)
        started = time.perf_counter()
        completion = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        elapsed = time.perf_counter() - started
        (sample_set,) = sample_sets_from(completion)
        assert up.calls == 5  # no retry sent
    assert sample_set.aggregation.answer == "42" and not sample_set.failed
    assert len(sample_set.metadata["cancelled"]) == 2 and elapsed < 1.5  # not failures, and not waited for


@pytest.mark.parametrize("client", [OpenAI, AsyncOpenAI], ids=["sync", "async"])
def test_a_streamed_call_still_streams_and_closes_its_n_request(client: type[OpenAI | AsyncOpenAI]):
    # `stream=True` reads the graph's stream; a vote runs no chat model, so no chat model events are read, nothing
    # observes the candidates' request, and it is streamed and closed once settled as without `stream=True`
    long_41 = "The answer is 41. " + "so " * 150
    replies = ["The answer is 42."] * 3 + [long_41] * 2
    with OpenAITestServer(lambda body, sample: replies[sample % 5], token_latency_s=0.02) as upstream:
        wrapped = wrap_openai(
            client(base_url=upstream.base_url, api_key="x", max_retries=0), n=5, stream_candidates=True
        )

        async def chunks() -> list[Any]:
            stream = await wrapped.chat.completions.create(
                model="m", messages=[{"role": "user", "content": QUESTION}], stream=True
            )
            return [chunk async for chunk in stream]

        if client is AsyncOpenAI:
            streamed = asyncio.run(chunks())
        else:
            streamed = list(
                wrapped.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": QUESTION}], stream=True
                )
            )
        (sample_set,) = [s for chunk in streamed for s in sample_sets_from(chunk) or []]
        stats = stats_once_aborted(upstream, 1)
    assert upstream.requests[0].get("stream") is True and upstream.requests[0].get("n") == 5
    assert sample_set.aggregation.answer == "42" and sorted(sample_set.metadata["cancelled"]) == [3, 4]
    assert stats["aborted"] == 1
