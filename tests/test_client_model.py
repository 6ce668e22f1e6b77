"""The chat model over an openai client: a call no callback handler observes skips LangChain's per-call
bookkeeping and returns what the full path returns; a handler, a usage counter or a cache still get theirs.
The real openai client against a real test server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import uuid
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

from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel

PROMPT = [[HumanMessage("What is 6 times 7?")]]


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


def _seen(result: Any) -> list[tuple[Any, ...]]:
    return [
        (g.text, g.message.response_metadata, g.message.usage_metadata, g.message.tool_calls, g.generation_info)
        for g in result.generations[0]
    ] + [result.llm_output]


def test_an_unobserved_call_returns_what_the_full_path_returns(serve, full_path_calls) -> None:
    model, recorder, run_ids = _model(serve(["#### 42"]), is_async=False), Recorder(), [uuid.uuid4(), uuid.uuid4()]
    fast = model.generate(PROMPT, run_id=run_ids[0])
    assert full_path_calls == []
    full = model.generate(PROMPT, callbacks=[recorder], run_id=run_ids[1])
    assert full_path_calls == [1] and recorder.events == ["start", "end"]
    assert _seen(fast) == _seen(full)
    assert [fast.run[0].run_id, full.run[0].run_id] == run_ids
    assert fast.generations[0][0].message.response_metadata["token_usage"]["completion_tokens"] == 2


async def test_async_calls_take_the_same_paths(serve, full_path_calls) -> None:
    model, recorder = _model(serve(["#### 42"]), is_async=True), Recorder()
    fast = await model.agenerate(PROMPT, n=2)
    assert full_path_calls == []
    full = await model.agenerate(PROMPT, callbacks=[recorder], n=2)
    assert full_path_calls == [1] and recorder.events == ["start", "end"]
    assert _seen(fast) == _seen(full) and len(fast.generations[0]) == 2


async def test_a_usage_counter_in_context_still_counts(serve, full_path_calls) -> None:
    model = _model(serve(["#### 42"]), is_async=True)
    with get_usage_metadata_callback() as usage:
        await model.ainvoke("What is 6 times 7?")
    assert full_path_calls == [1]
    assert usage.usage_metadata["m"]["output_tokens"] == 2


def test_a_global_cache_still_answers_repeated_calls(serve, full_path_calls) -> None:
    server = serve(["#### 42"])
    model = _model(server, is_async=False)
    set_llm_cache(InMemoryCache())
    try:
        first, again = model.invoke("What is 6 times 7?"), model.invoke("What is 6 times 7?")
    finally:
        set_llm_cache(None)
    assert first.content == again.content == "#### 42"
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
        assert model._unobserved(PROMPT, None, kwargs) is not observed
