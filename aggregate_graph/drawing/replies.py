"""A candidate request's answer in the one form candidates are built from (`Reply`), whichever way it came: a
LangChain chat model's result (`reply_of`) or stream (`streamed_reply`), or a model's own reply to a call nothing
observes (`RepliesDirectly`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

from langchain_core.callbacks import Callbacks
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, message_chunk_to_message
from langchain_core.outputs import ChatGeneration, LLMResult

from aggregate_graph.sample_set import Usage


class ReplyChoice(NamedTuple):
    """One sample of a reply: its text, tool calls (LangChain's `ToolCall` dicts), model and finish reason."""

    text: str
    tool_calls: list[dict[str, Any]]
    model: str | None
    finish_reason: str | None


class Reply(NamedTuple):
    """A candidate request's answer, as candidates are built from it: its samples and the request's usage.
    `closed`: a streamed request closed once the vote settled (`StreamsChoices`); the choices it has are those
    that finished, and the rest were never generated."""

    choices: list[ReplyChoice]
    usage: Usage | None
    closed: bool = False


OnChoice = Callable[[ReplyChoice], None]  # told of each choice of a streamed request as it finishes


@runtime_checkable
class RepliesDirectly(Protocol):
    """A chat model that can answer a candidate request with a `Reply` built straight from its provider's
    response, skipping LangChain's messages, results and per-call callback bookkeeping (~0.35 M instructions a
    request, measured: 6 % of a bare openai-client request's own). It is used only when `observed` says that
    nothing — no callback handler, tracer, usage counter, cache or rate limiter — needs LangChain's own path;
    that is decided once a draw, since every request of a draw runs under the same config."""

    def observed(self, callbacks: Callbacks, kwargs: dict[str, Any]) -> bool: ...

    def reply(self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any) -> Reply: ...

    async def areply(self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any) -> Reply: ...


@runtime_checkable
class StreamsChoices(Protocol):
    """A `RepliesDirectly` model that can stream one request's choices: each is told to `on_choice` as it
    finishes, in the order they finish, and the stream is closed (the upstream stops generating the rest) at the
    first event after which `stop` says they are no longer needed. Settling early uses it for a request with `n`,
    and for a blocking run's single requests, which it could not interrupt otherwise."""

    def stream_choices(
        self, messages: list[BaseMessage], on_choice: OnChoice, stop: Callable[[], bool], **kwargs: Any
    ) -> Reply: ...

    async def astream_choices(
        self, messages: list[BaseMessage], on_choice: OnChoice, stop: Callable[[], bool], **kwargs: Any
    ) -> Reply: ...


def _request_usage(result: LLMResult) -> Usage | None:
    """Usage of the whole request: providers report it once per request even when it returns n choices."""
    if (token_usage := (result.llm_output or {}).get("token_usage")) and isinstance(token_usage, dict):
        return Usage.of(
            token_usage.get("prompt_tokens"),
            token_usage.get("completion_tokens"),
            token_usage.get("prompt_tokens_details"),
            token_usage.get("completion_tokens_details"),
        )
    metas = [g.message.usage_metadata for g in result.generations[0] if isinstance(g, ChatGeneration)]
    usages = [u for m in metas if (u := Usage.from_usage_metadata(m)) is not None]
    if not usages:
        return None
    # the prompt is billed once per request; each choice's completion (and its details) counts
    completion = Usage.total(usages)
    return completion.model_copy(
        update={
            "prompt_tokens": max(u.prompt_tokens for u in usages),
            "total_tokens": max(u.prompt_tokens for u in usages) + completion.completion_tokens,
            "prompt_tokens_details": usages[0].prompt_tokens_details,
        }
    )


def reply_of(result: LLMResult) -> Reply:
    """The `Reply` in a LangChain result: each generation's text, tool calls, model name and finish reason."""
    choices = []
    for generation in result.generations[0]:
        message = generation.message if isinstance(generation, ChatGeneration) else None
        meta = {**(message.response_metadata if message is not None else {}), **(generation.generation_info or {})}
        text = str(message.text) if message is not None else generation.text
        calls = [dict(call) for call in getattr(message, "tool_calls", None) or []]
        choices.append(ReplyChoice(text, calls, meta.get("model_name"), meta.get("finish_reason")))
    return Reply(choices, _request_usage(result))


def answers_from_cache(model: BaseChatModel) -> bool:
    """Whether the chat model's `generate` goes through a cache: its own, or LangChain's global one unless it opts
    out (`cache=False`)."""
    return model.cache is not False and (model.cache is not None or get_llm_cache() is not None)


# How providers' chunks say that their choice is complete (OpenAI, Anthropic, Ollama, Bedrock)
FINISH_KEYS = ("finish_reason", "stop_reason", "done_reason", "stopReason")


def _finishes(chunk: BaseMessage) -> bool:
    """Whether a streamed chunk completes its reply: a whole message (a model that does not stream answers
    `stream` with one), a provider's finish marker, or LangChain's closing chunk."""
    if not isinstance(chunk, AIMessageChunk):
        return True
    return chunk.chunk_position == "last" or any(chunk.response_metadata.get(key) for key in FINISH_KEYS)


def streamed_reply(
    model: BaseChatModel, messages: list[BaseMessage], stop: Callable[[], bool], kwargs: dict[str, Any]
) -> Reply:
    """One single-sample request streamed through the chat model's own `stream` (LangChain's path: its callbacks,
    tags and rate limiter as for `generate`; `kwargs` are `generate`'s), closed at the first chunk after which
    `stop` says it is no longer needed, unless its reply is complete (`_finishes`): then it is read to its end,
    where providers send usage. A chat model whose `stream_usage` is unset (ChatOpenAI) is asked for usage."""
    config = {key: kwargs.pop(key) for key in ("callbacks", "tags", "metadata", "run_name") if key in kwargs}
    kwargs.pop("stream", None)
    if "stream_usage" in type(model).model_fields and getattr(model, "stream_usage", None) is None:
        model = model.model_copy(update={"stream_usage": True})  # the field, which every path of the model reads
    chunks: list[BaseMessage] = []
    finished = False
    stream = model.stream(messages, config, **kwargs)  # type: ignore[arg-type]
    try:
        for chunk in stream:
            chunks.append(chunk)
            finished = finished or _finishes(chunk)
            if not finished and stop():
                return Reply([], None, closed=True)  # leaving closes the stream: the upstream stops generating
    finally:
        stream.close()
    whole = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]  # LangChain raises for a stream of none
    return reply_of(LLMResult(generations=[[ChatGeneration(message=message_chunk_to_message(whole))]]))
