"""wrap_openai: the real openai client (sync and async) against real test servers on 127.0.0.1."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from langgraph.store.memory import InMemoryStore
from openai import AsyncOpenAI, OpenAI

from aggregate_graph import AggregationOptions, QuorumError, sample_sets_from, wrap_openai
from aggregate_graph.log import export_sample_sets, read_sample_sets
from aggregate_graph.openai_compat import RequestError

QUESTION = [{"role": "user", "content": "What is 6 times 7?"}]
SSA_OUTPUT = "<think>Two of three answers say 42 and 6 times 7 is 42 indeed.</think> <answer>42</answer>"


def math_replies(body: dict[str, Any], sample_no: int) -> str:
    """Candidates answer 42, 42, 41, …; an aggregator prompt gets an SSA-style verdict."""
    if "proposed answers" in str(body["messages"][-1]["content"]):
        return SSA_OUTPUT
    return ["Six sevens: 42. The answer is 42.", "The answer is 42.", "I get 41. The answer is 41."][sample_no % 3]


def client(server: Any, cls: type = OpenAI, **kwargs: Any) -> Any:
    return cls(base_url=server.base_url, api_key="upstream-key", **kwargs)


def test_sync_client_answers_with_the_majority_of_n_candidates_in_one_request(serve) -> None:
    upstream = serve(math_replies)
    wrapped = client(upstream)
    assert wrap_openai(wrapped, n=5) is wrapped  # patched in place, as LangSmith's wrap_openai
    response = wrapped.chat.completions.create(
        model="gpt-test", messages=QUESTION, temperature=0.7, max_tokens=64, seed=3
    )
    assert response.object == "chat.completion" and response.model == "gpt-test"
    assert response.choices[0].message.content == "Six sevens: 42. The answer is 42."
    [sample_set] = sample_sets_from(response)
    assert [c.answer for c in sample_set.candidates] == ["42", "42", "41", "42", "42"]
    assert sample_set.aggregation.votes == {"42": 4.0, "41": 1.0}
    # one upstream request with n=5 carrying every option the caller set
    assert upstream.calls == 1
    sent = upstream.requests[0]
    assert (sent["n"], sent["temperature"], sent["max_tokens"], sent["seed"], sent["model"]) == (
        5,
        0.7,
        64,
        3,
        "gpt-test",
    )
    assert response.usage.prompt_tokens == upstream.prompt_tokens_billed
    assert response.usage.total_tokens == sample_set.usage.total_tokens > 0


def test_server_that_ignores_n_gets_parallel_single_requests(serve) -> None:
    # A first wrapped call in the process pays for what it loads (~0.4 s): not what is timed here
    wrap_openai(client(serve(math_replies)), n=2).chat.completions.create(model="m", messages=QUESTION)
    upstream = serve(math_replies, n_mode="ignore", latency_s=0.2)
    # settle=False: every single is counted, and three 42s landing before the 41 would settle the vote without it
    wrapped = wrap_openai(client(upstream), n=4, settle=False)
    started = time.perf_counter()
    response = wrapped.chat.completions.create(model="m", messages=QUESTION)
    elapsed = time.perf_counter() - started
    assert len(sample_sets_from(response)[0].succeeded) == 4
    assert upstream.calls == 4 and elapsed < 0.2 * 3  # the three missing candidates were drawn in parallel


async def test_async_client_gives_the_same_answer_and_n_choices(serve) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=3)
    response = await wrapped.chat.completions.create(model="m", messages=QUESTION, n=2)
    assert [c.index for c in response.choices] == [0, 1]
    sets = sample_sets_from(response)
    assert len(sets) == 2 and all(len(s.succeeded) == 3 for s in sets)
    assert all(c.message.content for c in response.choices)
    assert response.usage.total_tokens == sum(s.usage.total_tokens for s in sets)
    assert upstream.calls == 2


def test_wrapping_twice_or_an_unknown_aggregator_is_refused(serve) -> None:
    upstream = serve()
    wrapped = wrap_openai(client(upstream))
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_openai(wrapped)
    with pytest.raises(ValueError, match="unknown aggregator 'median'"):
        wrap_openai(client(upstream), aggregator="median")


def _collect(chunks: Any) -> tuple[list[tuple[float, Any]], float]:
    started, seen = time.perf_counter(), []
    for chunk in chunks:
        seen.append((time.perf_counter() - started, chunk))
    return seen, started


def _check_live_stream(seen: list[tuple[float, Any]], token_latency_s: float) -> None:
    kinds = []
    for _, chunk in seen:
        if getattr(chunk, "candidate", None) is not None:
            kinds.append("candidate")
        elif chunk.choices and chunk.choices[0].delta.model_extra.get("reasoning_content"):
            kinds.append("reasoning")
        elif chunk.choices and chunk.choices[0].delta.content:
            kinds.append("content")
    # candidates first, then the aggregator's tokens, then the answer
    assert kinds == sorted(kinds, key=["candidate", "reasoning", "content"].index)
    assert kinds.count("candidate") == 3 and kinds.count("content") == 1
    reasoning = [(t, c) for t, c in seen if c.choices and c.choices[0].delta.model_extra.get("reasoning_content")]
    assert "".join(c.choices[0].delta.model_extra["reasoning_content"] for _, c in reasoning) == SSA_OUTPUT
    # The aggregator's words arrived one by one as the server produced them, not in one piece at the end.
    words = len(SSA_OUTPUT.split())
    assert len(reasoning) == words
    assert reasoning[-1][0] - reasoning[0][0] >= 0.7 * token_latency_s * (words - 1)


def test_stream_sends_candidates_then_the_aggregators_tokens_live_then_the_answer(serve) -> None:
    upstream = serve(math_replies, token_latency_s=0.05)
    wrapped = wrap_openai(client(upstream), n=3, aggregator="ssa")
    with wrapped.chat.completions.create(
        model="m", messages=QUESTION, stream=True, stream_options={"include_usage": True}
    ) as stream:
        seen, _ = _collect(stream)
    _check_live_stream(seen, 0.05)
    *_, finish, usage_chunk = [c for _, c in seen]
    assert finish.choices[0].finish_reason == "stop"
    [sample_set] = sample_sets_from(finish)
    assert sample_set.aggregation.method == "ssa" and sample_set.aggregation.answer == "42"
    assert usage_chunk.choices == [] and usage_chunk.usage.total_tokens == sample_set.usage.total_tokens
    # the streamed answer is the aggregation's text, as a non-streamed call's content is
    content = "".join(c.choices[0].delta.content or "" for _, c in seen if c.choices)
    assert content == sample_set.aggregation.text == "Six sevens: 42. The answer is 42."
    response = wrapped.chat.completions.create(model="m", messages=QUESTION)
    assert response.choices[0].message.content == sample_sets_from(response)[0].aggregation.text
    assert response.choices[0].message.reasoning_content == SSA_OUTPUT


async def test_async_stream_is_live_too(serve) -> None:
    upstream = serve(math_replies, token_latency_s=0.05)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=3, aggregator="ssa")
    stream = await wrapped.chat.completions.create(model="m", messages=QUESTION, stream=True)
    started, seen = time.perf_counter(), []
    async with stream:
        async for chunk in stream:
            seen.append((time.perf_counter() - started, chunk))
    _check_live_stream(seen, 0.05)
    assert seen[-1][1].usage is None  # no usage chunk unless asked for, as OpenAI


def test_extra_body_turns_aggregation_off_or_changes_n_and_method(serve) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream), n=5)
    direct = wrapped.chat.completions.create(
        model="m", messages=QUESTION, extra_body={"aggregation": {"enabled": False}, "top_k": 20}
    )
    assert sample_sets_from(direct) == [] and direct.choices[0].message.content == "Six sevens: 42. The answer is 42."
    assert upstream.requests[-1].get("n") is None and upstream.requests[-1]["top_k"] == 20
    assert "aggregation" not in upstream.requests[-1]

    refined = wrapped.chat.completions.create(
        model="m", messages=QUESTION, extra_body={"aggregation": {"n": 3, "method": "ssa"}, "top_k": 5}
    )
    [sample_set] = sample_sets_from(refined)
    assert len(sample_set.candidates) == 3 and sample_set.aggregation.method == "ssa"
    assert sample_set.aggregation.details["parse_status"] == "parsed"  # the model's verdict, not a fallback
    candidate_call, aggregator_call = upstream.requests[-2:]
    assert candidate_call["n"] == 3 and candidate_call["top_k"] == 5
    assert "proposed answers" in aggregator_call["messages"][-1]["content"]
    assert all("aggregation" not in r for r in upstream.requests)

    by_prefix = wrapped.chat.completions.create(model="ssa/m", messages=QUESTION)
    assert sample_sets_from(by_prefix)[0].aggregation.method == "ssa"
    assert upstream.requests[-1]["model"] == "m"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"functions": [{"name": "f", "parameters": {}}]}, "'functions' is the deprecated form of 'tools'"),
        (
            {"model": "ssa/m", "response_format": {"type": "json_object"}},
            "structured output .* is aggregated by vote .* method 'ssa' does not apply",
        ),
        ({"logprobs": True}, "log-probabilities"),
        ({"stream": True, "n": 2}, "stream=True gives one aggregated answer"),
        ({"stream": "false"}, "stream must be a boolean"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}, "no text"),
        ({"n": 0}, "n must be a positive integer"),
        ({"n": 200}, r"200 answer\(s\) × 5 candidates = 1000 samples, over the cap of 512"),
        ({"extra_body": {"aggregation": {"method": "median"}}}, "unknown aggregation method 'median'"),
        ({"extra_body": {"aggregation": {"n": 0}}}, "aggregation.n: Input should be greater than or equal to 1"),
        ({"extra_body": {"aggregation": {"temperature": 1}}}, "aggregation.temperature: Extra inputs"),
    ],
)
def test_requests_that_cannot_be_aggregated_raise_a_clear_error(serve, options, match) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream), n=5)
    with pytest.raises(RequestError, match=match) as caught:
        wrapped.chat.completions.create(**{"model": "m", "messages": QUESTION, **options})
    assert upstream.calls == 0  # refused before anything was paid for
    # what the API itself would raise, so `except openai.BadRequestError` handles it
    assert isinstance(caught.value, openai.BadRequestError) and caught.value.status_code == 400
    assert caught.value.param is not None


def test_text_response_format_and_tools_with_aggregation_off_are_fine(serve) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream), n=2)
    wrapped.chat.completions.create(model="m", messages=QUESTION, response_format={"type": "text"})
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    wrapped.chat.completions.create(
        model="m", messages=QUESTION, tools=[tool], extra_body={"aggregation": {"enabled": False}}
    )
    assert upstream.requests[-1]["tools"] == [tool]


def test_retries_are_the_wrapped_clients_own(serve) -> None:
    upstream = serve(math_replies, fail_first=1, failure_status=503)
    wrapped = wrap_openai(client(upstream, max_retries=1), n=3)
    response = wrapped.chat.completions.create(model="m", messages=QUESTION)
    assert len(sample_sets_from(response)[0].succeeded) == 3
    assert upstream.calls == 2  # the client's one retry, and no second layer of retries on top

    failing = serve(math_replies, failure_rate=1.0, failure_status=503)
    wrapped = wrap_openai(client(failing, max_retries=0), n=3)
    with pytest.raises(QuorumError) as caught:
        wrapped.chat.completions.create(model="m", messages=QUESTION)
    # the n request, then (a transient failure) each sample on its own: one attempt each, as max_retries=0 says
    assert failing.calls == 1 + 3
    failed = caught.value.sample_set.candidates
    assert len(failed) == 3 and {c.error_status for c in failed} == {503}
    assert isinstance(caught.value, openai.InternalServerError) and caught.value.status_code == 503


def test_candidates_without_a_final_answer_give_the_medoid_recorded(serve) -> None:
    upstream = serve(["Hi there, what do you need?", "Hello! How can I help you today?", "Hello! How can I help?"])
    wrapped = wrap_openai(client(upstream), n=3)
    response = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}])
    assert response.choices[0].message.content == "Hello! How can I help you today?"
    aggregation = sample_sets_from(response)[0].aggregation
    assert aggregation.method == "medoid" and "no candidate stated" in aggregation.details["fallback_reason"]


def test_a_separate_aggregator_server_gets_its_own_key_and_model(serve) -> None:
    upstream = serve(math_replies)
    aggregator_server = serve([SSA_OUTPUT])
    aggregator_client = OpenAI(base_url=aggregator_server.base_url, api_key="aggregator-key")
    wrapped = wrap_openai(
        client(upstream), n=3, aggregator="ssa", aggregator_client=aggregator_client, aggregator_model="ssa-smollm2"
    )
    response = wrapped.chat.completions.create(model="gpt-test", messages=QUESTION)
    assert sample_sets_from(response)[0].aggregation.answer == "42"
    assert upstream.calls == 1 and aggregator_server.calls == 1
    assert aggregator_server.requests[0]["model"] == "ssa-smollm2"
    assert aggregator_server.authorizations == ["Bearer aggregator-key"]
    assert set(upstream.authorizations) == {"Bearer upstream-key"}


def test_sample_sets_are_logged_to_the_store(serve, tmp_path) -> None:
    store = InMemoryStore()
    wrapped = wrap_openai(client(serve(math_replies)), n=3, store=store)
    wrapped.chat.completions.create(model="m", messages=QUESTION)
    assert export_sample_sets(store, tmp_path / "log.jsonl") == 1
    [logged] = read_sample_sets(tmp_path / "log.jsonl")
    assert logged.question == "What is 6 times 7?" and len(logged.candidates) == 3


def test_messages_reach_the_candidates_exactly_as_sent(serve) -> None:
    upstream = serve(math_replies)
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Look up the price."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "7 dollars"},
        {"role": "user", "content": [{"type": "text", "text": "What is 6 times"}, {"type": "text", "text": " 7?"}]},
    ]
    response = wrap_openai(client(upstream), n=2).chat.completions.create(model="m", messages=history)
    assert upstream.requests[0]["messages"] == history
    assert sample_sets_from(response)[0].question == "What is 6 times 7?"


def test_with_options_returns_a_wrapped_copy_and_raw_responses_are_refused(serve) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream), n=3)
    copy = wrapped.with_options(timeout=30)
    assert copy is not wrapped
    assert len(sample_sets_from(copy.chat.completions.create(model="m", messages=QUESTION))[0].candidates) == 3
    with pytest.raises(RequestError, match="with_raw_response"):
        wrapped.chat.completions.with_raw_response.create(model="m", messages=QUESTION)
    raw = wrapped.chat.completions.with_raw_response.create(
        model="m", messages=QUESTION, extra_body={"aggregation": {"enabled": False}}
    )
    assert raw.http_response.status_code == 200


async def test_with_streaming_response_on_a_stream_gives_the_aggregated_chunks(serve) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream, AsyncOpenAI), n=3)
    streaming = wrapped.chat.completions.with_streaming_response
    async with streaming.create(model="m", messages=QUESTION, stream=True) as response:
        chunks = [chunk async for chunk in await response.parse()]
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert len(sample_sets_from(finish)[0].candidates) == 3 and upstream.requests[0]["n"] == 3
    assert "x-stainless-raw-response" not in upstream.headers[0]  # the candidates' request is a plain one


def test_sync_and_async_clients_cannot_be_mixed(serve) -> None:
    upstream = serve()
    with pytest.raises(ValueError, match="same kind of client"):
        wrap_openai(client(upstream), aggregator="ssa", aggregator_client=client(upstream, AsyncOpenAI))


def test_timeouts_are_the_clients_own(serve) -> None:
    upstream = serve(math_replies, latency_s=1.0)
    wrapped = wrap_openai(client(upstream, max_retries=0), n=2)  # openai's default timeout: 600 s
    with pytest.raises(QuorumError) as caught:
        wrapped.chat.completions.create(model="m", messages=QUESTION, timeout=0.3)  # the call's own
    assert all(c.error.startswith("APITimeoutError") for c in caught.value.sample_set.candidates)
    # and the graph never cuts a call short of the client's whole retry cycle (3 × 600 s here)
    from aggregate_graph.openai_compat.engine import ClientAggregator, client_methods
    from aggregate_graph.openai_compat.request import plan_request, split_options

    engine = ClientAggregator(
        client_methods(client(upstream)),
        options=AggregationOptions(n=2, max_n=8, max_concurrency=4),
        aggregator="majority",
        aggregator_client=None,
        aggregator_model=None,
        client_timeout=600.0,
        client_retries=2,
        store=None,
    )
    plan = plan_request(*split_options({"model": "m", "messages": QUESTION}))
    assert engine._policy(plan).timeout_s >= 1800


def test_a_candidate_cut_off_by_the_token_limit_finishes_with_length(serve) -> None:
    upstream = serve(["Working: 6 times 7 is 42. The answer is 42"], finish_reason="length")
    response = wrap_openai(client(upstream), n=2).chat.completions.create(model="m", messages=QUESTION)
    assert response.choices[0].finish_reason == "length"


def test_the_calls_transport_options_reach_the_aggregator_on_the_same_client(serve) -> None:
    upstream = serve(math_replies)
    wrapped = wrap_openai(client(upstream), n=3, aggregator="ssa")
    wrapped.chat.completions.create(model="m", messages=QUESTION, extra_headers={"X-Gateway-Team": "math"}, user="u1")
    candidates, aggregator = upstream.headers
    assert candidates["x-gateway-team"] == aggregator["x-gateway-team"] == "math"
    assert upstream.requests[1]["user"] == "u1" and "proposed answers" in upstream.requests[1]["messages"][0]["content"]
