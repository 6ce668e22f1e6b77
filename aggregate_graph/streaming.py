"""Streaming the decided answer as LangChain does it: `AIMessageChunk`s that add up to the answer, and the
candidates' progress as custom events.

An aggregated answer exists only once the vote is decided, so it cannot stream token by token as the
candidates are generated (their tokens are candidates, not the answer). Once decided, it is streamed in
word-sized chunks — content first, then each voted tool call as a `tool_call_chunk`, then a last chunk with
the usage and the response metadata — so that code written for any chat model (`chunk + chunk`, chat UIs on
`stream_mode="messages"`, `astream_events`) works unchanged, and their sum is the message `invoke` returns.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

# the marker of handlers that stream chat models' tokens, as LangChain's `_should_stream` and LangGraph read it
from langchain_core.tracers._streaming import _StreamingCallbackHandler

# The name of the custom event (`astream_events`, callbacks' `on_custom_event`) that reports each candidate as it
# lands; LangGraph's `stream_mode="custom"` gets the same dict.
PROGRESS_EVENT = "aggregate_graph.candidate"
# The tag of the answer's chat-model run in the prebuilt graph: a reader of `stream_mode="messages"` that streams
# the aggregate node's other tokens (an aggregator model's reasoning, as the proxy does) tells the answer apart by it.
ANSWER_TAG = "aggregate_graph:answer"
_WORD = re.compile(r"(?<=\s)(?=\S)")  # split before each word that follows whitespace: the pieces join to the text


def streams_tokens(handler: object) -> bool:
    """Whether a callback handler streams chat models' tokens: LangGraph's `stream_mode="messages"`,
    `astream_events`."""
    return isinstance(handler, _StreamingCallbackHandler)


def answer_chunks(message: AIMessage) -> list[AIMessageChunk]:
    """`message` as the chunks a streaming chat model sends: its text a word per chunk, each tool call as a
    `tool_call_chunk`, and a last chunk (`chunk_position="last"`) with its usage and response metadata. The
    chunks share the message's id and add up (`+`) to it."""
    text = message.content if isinstance(message.content, str) else message.text
    pieces = [p for p in _WORD.split(text) if p]
    chunks = [AIMessageChunk(content=piece, id=message.id) for piece in pieces]
    for index, call in enumerate(message.tool_calls):
        args = json.dumps(call["args"], ensure_ascii=False)
        chunk = tool_call_chunk(name=call["name"], args=args, id=call.get("id"), index=index)
        chunks.append(AIMessageChunk(content="", id=message.id, tool_call_chunks=[chunk]))
    last = AIMessageChunk(
        content="",
        id=message.id,
        usage_metadata=message.usage_metadata,
        response_metadata=dict(message.response_metadata),
        chunk_position="last",
    )
    return [*chunks, last]


class ChatCall(NamedTuple):
    """One call of a chat model, as LangChain makes it (the arguments of `_generate` and `_stream`)."""

    messages: list[BaseMessage]
    stop: list[str] | None
    run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None
    kwargs: dict[str, Any]


class DecidedAnswerModel(BaseChatModel):
    """A chat model whose reply is decided whole before any of it is said: a subclass decides it (`_decide`,
    `_adecide`: a result of one generation), `invoke` returns it and `stream` says it as `answer_chunks`."""

    @abstractmethod
    def _decide(self, call: ChatCall) -> ChatResult: ...

    @abstractmethod
    async def _adecide(self, call: ChatCall) -> ChatResult: ...

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._decide(ChatCall(messages, stop, run_manager, kwargs))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return await self._adecide(ChatCall(messages, stop, run_manager, kwargs))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from _said(self._decide(ChatCall(messages, stop, run_manager, kwargs)))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in _said(await self._adecide(ChatCall(messages, stop, run_manager, kwargs))):
            yield chunk


def _said(result: ChatResult) -> Iterator[ChatGenerationChunk]:
    message = result.generations[0].message
    assert isinstance(message, AIMessage)  # a decided answer is the reply of a chat model
    for chunk in answer_chunks(message):
        yield ChatGenerationChunk(message=chunk)


class AnswerSpeaker(DecidedAnswerModel):
    """A chat model that says the message it is given, as it is: the prebuilt graph's aggregate node passes the
    decided answer through it so that a parent streaming `stream_mode="messages"` (or `astream_events`) gets the
    answer as chunks, like any model's reply. It spends no tokens: its chunks carry no usage of their own (the
    candidates' usage is on the answer in the graph's state)."""

    @property
    def _llm_type(self) -> str:
        return "aggregate_graph_answer"

    def _decide(self, call: ChatCall) -> ChatResult:
        """The message to say, without usage: this run spends no tokens (the candidates' are on the message)."""
        message = call.messages[-1] if call.messages else None
        if not isinstance(message, AIMessage):
            raise TypeError(f"AnswerSpeaker says an AIMessage given as the last input message; got {message!r}")
        return ChatResult(generations=[ChatGeneration(message=message.model_copy(update={"usage_metadata": None}))])

    async def _adecide(self, call: ChatCall) -> ChatResult:
        return self._decide(call)
