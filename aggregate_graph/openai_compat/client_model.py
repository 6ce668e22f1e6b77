"""A LangChain chat model over an `openai` client's own `chat.completions.create`.

`wrap_openai` draws candidates and runs model-backed aggregators through the client the user already
configured (key, base URL, headers, retries, timeout, http client), passing every request option the caller
gave — not through a second client built from settings that would have to be copied over.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
    Callbacks,
)
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models._utils import _normalize_messages
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, convert_to_openai_messages
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import InvalidToolCall, ToolCall, ToolCallChunk, tool_call_chunk
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables.config import run_in_executor, var_child_runnable_config
from pydantic import ConfigDict, Field

from aggregate_graph.drawing.replies import OnChoice, Reply, ReplyChoice, answers_from_cache
from aggregate_graph.sample_set import Usage

CALL_CONFIG_KEY = "aggregate_graph_openai_call"  # `configurable` key of a running call's settings


@dataclass(frozen=True)
class CallSettings:
    """What one call sends, given at invoke time, so that a compiled graph serves every call of the same shape:
    the model name, the request's options, and the caller's own messages (None: the converted input)."""

    model: str
    request: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None


def current_call(key: str) -> CallSettings | None:
    """The running call's settings under `key`, from the config LangGraph runs the model's node with (in the
    node's thread, or one that copied its context)."""
    config = var_child_runnable_config.get() or {}
    calls = (config.get("configurable") or {}).get(CALL_CONFIG_KEY) or {}
    return calls.get(key)


def read_tool_calls(raw_calls: Iterable[dict[str, Any]]) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """Function calls in the wire form `{"id", "function": {"name", "arguments"}}` as LangChain's: arguments
    parsed, or invalid when not a JSON object (an `AIMessage` refuses a tool call whose arguments are a list or
    a number)."""
    calls, invalid = [], []
    for raw_call in raw_calls:
        try:
            parsed = parse_tool_call(raw_call, return_id=True)
        except OutputParserException as exc:
            invalid.append(make_invalid_tool_call(raw_call, str(exc)))
            continue
        if parsed is not None and not isinstance(parsed["args"], dict):
            invalid.append(make_invalid_tool_call(raw_call, "the arguments are not a JSON object"))
        elif parsed is not None:
            calls.append(parsed)
    return calls, invalid


def _tool_calls(message: Any) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """A choice message's function tool calls as LangChain's (`read_tool_calls`). A custom tool's call has
    free-form input, not JSON arguments: it is left out."""
    return read_tool_calls(
        {"id": raw.id, "function": {"name": raw.function.name, "arguments": raw.function.arguments}}
        for raw in getattr(message, "tool_calls", None) or []
        if getattr(raw, "type", "function") == "function" and getattr(raw, "function", None) is not None
    )


def _text(content: Any) -> str:
    """A choice's text: its content, or the text of its content parts as LangChain reads them (a compatible
    server may send parts, e.g. a reasoning model's "thinking" and "text"); the SDK does not validate it."""
    if isinstance(content, str):
        return content
    return AIMessage(content=content or "").text


def _tool_call_chunks(delta: Any) -> list[ToolCallChunk]:
    """A streamed delta's pieces of tool calls (LangChain joins them by `index`)."""
    chunks = []
    for raw in getattr(delta, "tool_calls", None) or []:
        function = raw.function
        chunks.append(
            tool_call_chunk(
                name=function.name if function else None,
                args=function.arguments if function else None,
                id=raw.id,
                index=raw.index,
            )
        )
    return chunks


def _usage_record(usage: Any) -> Usage | None:
    """A response's usage as the sample set records it."""
    if usage is None:
        return None
    details = (getattr(usage, "prompt_tokens_details", None), getattr(usage, "completion_tokens_details", None))
    return Usage.of(usage.prompt_tokens, usage.completion_tokens, *details)


def _usage(usage: Any) -> UsageMetadata | None:
    record = _usage_record(usage)
    return None if record is None else UsageMetadata(**record.usage_metadata())


class ClientChatModel(BaseChatModel):
    """A LangChain chat model over one of an `openai` client's own generation methods (`create`, sync or async),
    sending `model`, the call's messages and `request` (any other options of that API). Subclasses say how a
    request body is made and how a response reads (`OpenAIClientChatModel`: chat completions;
    `OpenAIResponsesChatModel`: the Responses API).

    With `messages` set, those messages (or input items) are sent as they are instead of the converted input:
    `wrap_openai` passes the caller's own (images, tool calls and all) to every candidate request.

    With `call_key` set, a call's model, request and messages come from the `CallSettings` under that key of
    the running call's config (`current_call`), when there is one: `wrap_openai` compiles one graph per
    shape of call and passes each call's own at invoke time."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    create: Callable[..., Any] = Field(exclude=True)
    is_async: bool = False
    model: str
    request: dict[str, Any] = Field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    call_key: str | None = None
    endpoint: str = ""  # the client's base URL: what the graph remembers a server's handling of `n` by

    def _call(self) -> CallSettings:
        call = current_call(self.call_key) if self.call_key is not None else None
        return call if call is not None else CallSettings(self.model, self.request, self.messages)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        call = self._call()
        return {"model": call.model, **call.request}

    def _combine_llm_outputs(self, llm_outputs: list[dict[str, Any] | None], /) -> dict[str, Any]:
        # The base class drops llm_output; the graph reads each request's usage from it.
        return next((o for o in llm_outputs if o), {})

    @abstractmethod
    def _body(self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of one `create` call."""

    @abstractmethod
    def _result(self, response: Any) -> ChatResult:
        """A response as LangChain's result (with the request's usage in `llm_output["token_usage"]`)."""

    @abstractmethod
    def _reply(self, response: Any) -> Reply:
        """What `_result` says of a response, in the form candidates are built from (`reply_of` of it)."""

    def observed(self, callbacks: Callbacks, kwargs: dict[str, Any]) -> bool:
        """Whether a call with these callbacks and generate keywords needs LangChain's own path (`RepliesDirectly`):
        a callback handler would see it (`configure` gathers them all: the run's, tracing from the environment or
        context, usage counters), or a cache, rate limiter, streaming, structured output or the v1 output format
        acts on it."""
        if kwargs.get("stream") or self.rate_limiter is not None:
            return True
        if self.output_version not in (None, "v0") or any("structured_output_format" in key for key in kwargs):
            return True
        if answers_from_cache(self):
            return True
        tags, metadata = kwargs.get("tags"), kwargs.get("metadata")
        listeners = CallbackManager.configure(callbacks, self.callbacks, self.verbose, tags, self.tags, metadata)
        return bool(listeners.handlers)

    def reply(self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any) -> Reply:
        """The candidates' `Reply` straight from the client's response, for a call nothing observes."""
        if self.is_async:
            raise TypeError("this model wraps an async client: call it with areply")
        return self._reply(self.create(**self._body(messages, stop, kwargs)))

    async def areply(self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any) -> Reply:
        if not self.is_async:
            return await run_in_executor(None, self.reply, messages, stop, **kwargs)
        return self._reply(await self.create(**self._body(messages, stop, kwargs)))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.is_async:
            raise TypeError("this model wraps an async client: call it with ainvoke / agenerate")
        return self._result(self.create(**self._body(messages, stop, kwargs)))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if not self.is_async:
            return await super()._agenerate(messages, stop, run_manager, **kwargs)
        return self._result(await self.create(**self._body(messages, stop, kwargs)))


class OpenAIClientChatModel(ClientChatModel):
    """Calls `create` (an unwrapped `client.chat.completions.create`, sync or async) with `model`, the
    converted messages and `request` (any other chat-completions options); see `ClientChatModel`."""

    n: int = 1  # declares that this model takes `n`, so the graph asks for n candidates in one request

    @property
    def _llm_type(self) -> str:
        return "openai-client"

    def _body(self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.pop("stream", None)
        call = self._call()
        # normalized as LangChain's generate normalizes its input (again, on that path: it is idempotent)
        sent = call.messages if call.messages is not None else convert_to_openai_messages(_normalize_messages(messages))
        body = {**call.request, **kwargs, "model": call.model, "messages": sent}
        if stop is not None:
            body["stop"] = stop
        if body.get("n") == 1:
            body.pop("n")
        return body

    def _result(self, response: Any) -> ChatResult:
        generations = []
        usage = response.usage.model_dump() if response.usage is not None else None
        llm_output = {"token_usage": usage, "model_name": response.model}
        for i, choice in enumerate(response.choices):
            meta = {"finish_reason": choice.finish_reason, "model_name": response.model}
            if getattr(choice, "logprobs", None) is not None:  # where ChatOpenAI puts them: the choice SSA reads them
                meta["logprobs"] = choice.logprobs.model_dump()
            tool_calls, invalid_tool_calls = _tool_calls(choice.message)
            message = AIMessage(
                content=choice.message.content or "",
                tool_calls=tool_calls,
                invalid_tool_calls=invalid_tool_calls,
                response_metadata=meta,
                id=response.id,
                # The request's usage, once: a request with n choices bills its prompt once.
                usage_metadata=_usage(response.usage) if i == 0 else None,
            )
            generations.append(ChatGeneration(message=message, generation_info={"finish_reason": choice.finish_reason}))
        return ChatResult(generations=generations, llm_output=llm_output)

    def _reply(self, response: Any) -> Reply:
        usage = response.usage
        choices = [
            ReplyChoice(
                _text(choice.message.content),
                [dict(call) for call in _tool_calls(choice.message)[0]],
                response.model,
                choice.finish_reason,
            )
            for choice in response.choices
        ]
        return Reply(choices, _usage_record(usage))

    def _stream_body(
        self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        return {**self._body(messages, stop, kwargs), "stream": True, "stream_options": {"include_usage": True}}

    def stream_choices(
        self, messages: list[BaseMessage], on_choice: OnChoice, stop: Callable[[], bool], **kwargs: Any
    ) -> Reply:
        """The request's choices streamed, each told to `on_choice` as it finishes; the stream is closed at the
        first event after which `stop` says the rest are not needed (`StreamsChoices`)."""
        if self.is_async:
            raise TypeError("this model wraps an async client: call it with astream_choices")
        body = self._stream_body(messages, None, kwargs)
        choices = _StreamedChoices(body.get("n") or 1, on_choice, stop)
        with self.create(**body) as events:
            for event in events:
                if choices.take(event):
                    break  # leaving the block closes the connection: the upstream stops generating
        return choices.reply()

    async def astream_choices(
        self, messages: list[BaseMessage], on_choice: OnChoice, stop: Callable[[], bool], **kwargs: Any
    ) -> Reply:
        if not self.is_async:
            return await run_in_executor(None, self.stream_choices, messages, on_choice, stop, **kwargs)
        body = self._stream_body(messages, None, kwargs)
        choices = _StreamedChoices(body.get("n") or 1, on_choice, stop)
        async with await self.create(**body) as events:
            async for event in events:
                if choices.take(event):
                    break
        return choices.reply()

    @staticmethod
    def _chunk(event: Any) -> ChatGenerationChunk | None:
        if not event.choices:  # the closing usage chunk
            usage = _usage(event.usage)
            if usage is None:
                return None
            return ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=usage))
        choice = event.choices[0]
        meta = {"finish_reason": choice.finish_reason, "model_name": event.model} if choice.finish_reason else {}
        message = AIMessageChunk(
            content=choice.delta.content or "", response_metadata=meta, tool_call_chunks=_tool_call_chunks(choice.delta)
        )
        return ChatGenerationChunk(message=message)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        if self.is_async:
            raise TypeError("this model wraps an async client: call it with astream")
        with self.create(**self._stream_body(messages, stop, kwargs)) as events:
            for event in events:
                if (chunk := self._chunk(event)) is not None:
                    if run_manager is not None and chunk.text:
                        run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                    yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        if not self.is_async:
            async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
                yield chunk
            return
        async with await self.create(**self._stream_body(messages, stop, kwargs)) as events:
            async for event in events:
                if (chunk := self._chunk(event)) is not None:
                    if run_manager is not None and chunk.text:
                        await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                    yield chunk


class _StreamedChoices:
    """The choices of one streamed request, put together from their deltas and read as an unstreamed reply's are
    (`_text`, `read_tool_calls`); each is told to `on_choice` as it finishes, and `stop` is asked after every event
    whether the choices still generating are needed."""

    def __init__(self, n: int, on_choice: OnChoice, stop: Callable[[], bool]) -> None:
        self.n, self.on_choice, self.stop = n, on_choice, stop
        self.texts: dict[int, list[str]] = {}
        self.calls: dict[int, dict[int, dict[str, Any]]] = {}  # choice → tool call index → its pieces so far
        self.finished: list[ReplyChoice] = []
        self.usage: Usage | None = None
        self.model: str | None = None
        self.closed = False

    def take(self, event: Any) -> bool:
        """Take one event; whether to close the stream (the choices still out are no longer needed)."""
        if event.usage is not None:
            self.usage = _usage_record(event.usage)
        self.model = event.model
        for choice in event.choices:
            content = choice.delta.content
            self.texts.setdefault(choice.index, []).append(_text(content) if content else "")
            calls = self.calls.setdefault(choice.index, {})
            for raw in getattr(choice.delta, "tool_calls", None) or []:
                call = calls.setdefault(raw.index, {"id": None, "type": None, "name": "", "arguments": "", "fn": False})
                call["id"], call["type"] = call["id"] or raw.id, call["type"] or getattr(raw, "type", None)
                if (function := getattr(raw, "function", None)) is not None:
                    call["fn"] = True
                    call["name"] += function.name or ""
                    call["arguments"] += function.arguments or ""
            if choice.finish_reason is not None:
                self.finished.append(self._choice(choice.index, choice.finish_reason))
                self.on_choice(self.finished[-1])
        # once every choice has finished, the stream is read to its end for the usage it closes with
        self.closed = len(self.finished) < self.n and self.stop()
        return self.closed

    def _choice(self, index: int, finish_reason: str | None) -> ReplyChoice:
        """Choice `index` as read so far: its text, and its function calls as `_tool_calls` reads a message's (a
        custom tool's call, free-form input, left out; arguments that are not a JSON object invalid)."""
        pieces = sorted(self.calls.pop(index, {}).items())
        raw = [
            {"id": call["id"], "function": {"name": call["name"], "arguments": call["arguments"]}}
            for _, call in pieces
            if call["fn"] and call["type"] in (None, "function")
        ]
        calls = [dict(call) for call in read_tool_calls(raw)[0]]
        return ReplyChoice("".join(self.texts.pop(index, [])), calls, self.model, finish_reason)

    def reply(self) -> Reply:
        """The finished choices; a closed stream reports no usage (the upstream sends it only at the end). A stream
        that ended with choices unfinished (no finish reason) keeps them, as an unstreamed reply would."""
        choices = list(self.finished)
        if not self.closed:
            choices += [self._choice(index, None) for index in sorted(self.texts)]
        return Reply(choices, self.usage, closed=self.closed)
