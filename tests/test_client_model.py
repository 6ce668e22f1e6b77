"""The chat model over an openai client: a candidate request nothing observes is answered straight from the
client's response (`RepliesDirectly`) and gives the candidates the full LangChain path gives; a callback handler,
a usage counter, a cache or any other setting LangChain acts on sends every candidate request down LangChain's
path. The real openai client against a real test server on 127.0.0.1, drawn through the real graph."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackHandler, get_usage_metadata_callback
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.rate_limiters import InMemoryRateLimiter
from langchain_core.tracers.context import collect_runs, tracing_v2_enabled
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionChunk

from aggregate_graph import CandidatePolicy, build_aggregate_graph
from aggregate_graph.drawing.course import Draw
from aggregate_graph.drawing.replies import reply_of
from aggregate_graph.drawing.sampling import Drawer, adraw_candidates, draw_candidates, replies_directly
from aggregate_graph.drawing.settings import Sampler
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel, _StreamedChoices
from aggregate_graph.testing.openai_server import tool_calls_reply

PROMPT = [HumanMessage("What is 6 times 7?")]
SINGLES = CandidatePolicy(use_n=False)


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("start")

    def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("end")


@pytest.fixture
def full_path_calls(monkeypatch) -> list[int]:
    """Counts calls that went through LangChain's own generate (its cache step runs on every one of them)."""
    calls: list[int] = []
    for name in ("_generate_with_cache", "_agenerate_with_cache"):
        original = getattr(BaseChatModel, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            calls.append(1)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(BaseChatModel, name, counted)
    return calls


def _model(server: Any, is_async: bool) -> OpenAIClientChatModel:
    client = (AsyncOpenAI if is_async else OpenAI)(base_url=server.base_url, api_key="k", max_retries=0)
    return OpenAIClientChatModel(create=client.chat.completions.create, is_async=is_async, model="m")


def _seen(candidates: list[Any]) -> list[dict[str, Any]]:
    """What a candidate says, without what differs from one request to the next."""
    return [c.model_dump(exclude={"request_id", "latency_s", "landed_at"}) for c in candidates]


def _without_call_ids(reply: Any) -> Any:
    """A reply without its tool calls' ids, which the server makes up for each sample."""
    choices = [c._replace(tool_calls=[{**t, "id": None} for t in c.tool_calls]) for c in reply.choices]
    return reply._replace(choices=choices)


def test_a_direct_reply_is_what_the_full_path_gives(serve) -> None:
    calls = tool_calls_reply(("multiply", {"a": 6, "b": 7}), ("add", "{not json"), content="Let me see.")
    model = _model(serve([calls], n_mode="honour"), is_async=False)
    for n in (1, 2):
        direct, full = model.reply(PROMPT, n=n), reply_of(model.generate([PROMPT], n=n))
        assert _without_call_ids(direct) == _without_call_ids(full) and len(direct.choices) == n
    choice = direct.choices[1]
    assert (choice.text, choice.finish_reason, choice.model) == ("Let me see.", "tool_calls", "m")
    assert [t["args"] for t in choice.tool_calls] == [{"a": 6, "b": 7}]  # the invalid call is left out on both
    assert direct.usage is not None and direct.usage.completion_tokens > 0


def test_content_parts_and_non_object_arguments_read_alike_on_both_paths(serve) -> None:
    parts = [{"type": "thinking", "thinking": "6 times 7 is 41? no"}, {"type": "text", "text": "#### 42"}]
    odd_arguments = tool_calls_reply(("multiply", "[6, 7]"), ("add", {"a": 1, "b": 2}))
    model = _model(serve([{"content": parts}]), is_async=False)
    direct, full = model.reply(PROMPT), reply_of(model.generate([PROMPT]))
    assert direct.choices[0].text == full.choices[0].text == "#### 42"
    model = _model(serve([odd_arguments]), is_async=False)
    direct, full = model.reply(PROMPT), reply_of(model.generate([PROMPT]))
    assert _without_call_ids(direct) == _without_call_ids(full)
    assert [call["name"] for call in direct.choices[0].tool_calls] == ["add"]  # a list is no arguments object


@pytest.mark.parametrize(
    "reply",
    [
        tool_calls_reply(("multiply", {"a": 6, "b": 7}), ("add", "{not json"), content="Let me see."),
        tool_calls_reply(("multiply", "[6, 7]"), ("add", {"a": 1, "b": 2})),
        "The answer is 42.",
    ],
    ids=["calls and an invalid one", "non-object arguments", "text"],
)
def test_a_streamed_reply_reads_as_the_same_reply_unstreamed(serve, reply: Any) -> None:
    # settling streams candidate requests (stream_candidates): what they read must not depend on it
    model = _model(serve([reply], n_mode="honour"), is_async=False)
    for n in (1, 2):
        landed: list[Any] = []
        streamed = model.stream_choices(PROMPT, landed.append, lambda: False, n=n)
        assert _without_call_ids(streamed) == _without_call_ids(model.reply(PROMPT, n=n))
        assert landed == streamed.choices and not streamed.closed


def test_a_stream_that_ends_unfinished_keeps_its_text_and_one_closed_drops_it() -> None:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> ChatCompletionChunk:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return ChatCompletionChunk.model_validate(
            {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}
        )

    events = [chunk({"role": "assistant", "content": "The answer"}), chunk({"content": " is 42."})]
    for stop, kept in ((False, ["The answer is 42."]), (True, [])):
        choices = _StreamedChoices(1, lambda choice: None, lambda stop=stop: stop)
        closed = [choices.take(event) for event in events]
        reply = choices.reply()
        assert [c.text for c in reply.choices] == kept and reply.closed is stop and closed[0] is stop
        assert all(c.finish_reason is None for c in reply.choices)


async def test_unobserved_candidates_skip_langchain_and_match_the_full_path(serve, full_path_calls) -> None:
    model = _model(serve(["The answer is unknown."]), is_async=True)
    sampler, draw, recorder = Sampler(model), Draw(0, (0, 1, 2), tuple(PROMPT)), Recorder()
    assert replies_directly(sampler, None) is True
    direct = await adraw_candidates(draw, SINGLES, Drawer(sampler))
    assert full_path_calls == []
    full = await adraw_candidates(draw, SINGLES, Drawer(sampler, {"callbacks": [recorder]}))
    assert full_path_calls == [1, 1, 1] and sorted(recorder.events) == ["end"] * 3 + ["start"] * 3
    assert _seen(direct) == _seen(full) and [c.text for c in direct] == ["The answer is unknown."] * 3


def test_sync_candidates_take_the_same_paths(serve, full_path_calls) -> None:
    model, recorder = _model(serve(["#### 42"]), is_async=False), Recorder()
    sampler, draw = Sampler(model), Draw(0, (0, 1), tuple(PROMPT))
    direct = draw_candidates(draw, SINGLES, Drawer(sampler))
    assert full_path_calls == []
    full = draw_candidates(draw, SINGLES, Drawer(sampler, {"callbacks": [recorder]}))
    assert full_path_calls == [1, 1] and recorder.events.count("start") == 2
    assert _seen(direct) == _seen(full)


async def test_a_graph_run_with_a_handler_shows_it_every_candidate_request(serve, full_path_calls) -> None:
    # settle off: the probe and two singles settle the vote, and the last single may not have started by then
    model = _model(serve(["#### 42"], n_mode="reject"), is_async=True)
    graph = build_aggregate_graph(model, n=4, settle=False)
    recorder = Recorder()
    out = await graph.ainvoke({"messages": PROMPT}, {"callbacks": [recorder]})
    # the refused n request, then its probe and the 3 single requests it was tested by
    assert recorder.events.count("start") == 5 and len(full_path_calls) == 5
    assert out["sample_set"].aggregation.answer == "42"
    full_path_calls.clear()
    out = await graph.ainvoke({"messages": PROMPT})
    assert full_path_calls == [] and out["sample_set"].aggregation.answer == "42"


async def test_a_usage_counter_in_context_still_counts_every_candidate(serve, full_path_calls) -> None:
    # settle off: two agreeing candidates settle the vote, and the third could be cancelled before it lands
    graph = build_aggregate_graph(_model(serve(["#### 42"]), is_async=True), n=3, policy=SINGLES, settle=False)
    with get_usage_metadata_callback() as usage:
        await graph.ainvoke({"messages": PROMPT})
    assert len(full_path_calls) == 3
    assert usage.usage_metadata["m"]["output_tokens"] == 6


def test_a_global_cache_still_answers_repeated_candidate_requests(serve, full_path_calls) -> None:
    server = serve(["#### 42"])
    sampler, draw = Sampler(_model(server, is_async=False)), Draw(0, (0,), tuple(PROMPT))
    set_llm_cache(InMemoryCache())
    try:
        first, again = draw_candidates(draw, SINGLES, Drawer(sampler)), draw_candidates(draw, SINGLES, Drawer(sampler))
    finally:
        set_llm_cache(None)
    assert first[0].text == again[0].text == "#### 42"
    assert server.stats()["calls"] == 1 and full_path_calls == [1, 1]


@pytest.mark.parametrize(
    ("setting", "observed"),
    [
        (lambda model, kwargs: contextlib.nullcontext(), False),
        (lambda model, kwargs: tracing_v2_enabled(project_name="p"), True),
        (lambda model, kwargs: collect_runs(), True),
        (lambda model, kwargs: setattr(model, "verbose", True), True),
        (lambda model, kwargs: setattr(model, "rate_limiter", InMemoryRateLimiter()), True),
        (lambda model, kwargs: setattr(model, "output_version", "v1"), True),
        (lambda model, kwargs: setattr(model, "cache", True), True),
        (lambda model, kwargs: kwargs.update(stream=True), True),
        (lambda model, kwargs: kwargs.update(ls_structured_output_format={"schema": {}}), True),
    ],
    ids=["nothing", "tracing", "collect_runs", "verbose", "rate_limiter", "output_v1", "cache", "stream", "structured"],
)
def test_whatever_langchain_would_do_for_a_call_takes_the_full_path(
    setting: Callable[[OpenAIClientChatModel, dict[str, Any]], Any], observed: bool
) -> None:
    model = OpenAIClientChatModel(create=lambda **_: None, model="m")
    kwargs: dict[str, Any] = {}
    context = setting(model, kwargs)
    with context if isinstance(context, contextlib.AbstractContextManager) else contextlib.nullcontext():
        assert model.observed(None, kwargs) is observed


async def test_a_handler_bound_to_the_model_sees_every_candidate_request(serve, full_path_calls) -> None:
    recorder = Recorder()
    model = _model(serve(["#### 42"]), is_async=True).with_config(callbacks=[recorder])
    # settle off: two 42s settle the vote, and the third request may not have started by then
    out = await build_aggregate_graph(model, n=3, policy=SINGLES, settle=False).ainvoke({"messages": PROMPT})
    assert recorder.events.count("start") == 3 and len(full_path_calls) == 3
    assert out["sample_set"].aggregation.answer == "42"
