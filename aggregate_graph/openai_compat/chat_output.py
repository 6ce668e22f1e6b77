"""Sample sets as OpenAI responses: a `ChatCompletion` whose choices are aggregated answers (text, or the tool
calls the candidates voted for), or the chunks of a stream — candidate progress first, then the aggregator
model's tokens as they are produced, then the answer. Either way the sample sets ride along in an extra
`sample_sets` field (`sample_sets_from` reads it).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.messages import AIMessageChunk
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from aggregate_graph.openai_compat.request import Plan
from aggregate_graph.sample_set import SampleSet, Usage
from aggregate_graph.streaming import ANSWER_TAG

SAMPLE_SETS_FIELD = "sample_sets"
CANDIDATE_FIELD = "candidate"


def stream_modes(aggregator: object) -> list[str]:
    """What a streamed call reads of a graph deciding with `aggregator` (`ChunkWriter.event`): the candidates'
    progress, the state, and the aggregator model's tokens ("messages") where it may run a chat model
    (`Aggregator.runs_chat_model`; a Runnable of another kind may)."""
    return ["custom", "messages", "values"] if getattr(aggregator, "runs_chat_model", True) else ["custom", "values"]


def _usage(sample_sets: list[SampleSet]) -> dict[str, int]:
    return sum((s.usage for s in sample_sets), Usage()).model_dump()


def _reasoning(sample_set: SampleSet) -> str | None:
    """What the aggregator model wrote (SSA's deliberation, GSR's refinement), when a model was asked."""
    raw = sample_set.aggregation.details.get("raw_output") if sample_set.aggregation else None
    return raw or None


def finish_reason(sample_set: SampleSet) -> str:
    """ "tool_calls" when the candidates voted to call tools; "length" when the answer given is a candidate's
    text that the token limit cut off; else "stop"."""
    if sample_set.aggregation.tool_calls:
        return "tool_calls"
    chosen = (c for c in sample_set.succeeded if c.text == sample_set.aggregation.text and not c.tool_calls)
    return next((c.finish_reason for c in chosen if c.finish_reason), None) or "stop"


def openai_tool_calls(sample_set: SampleSet) -> list[dict[str, Any]]:
    """The agreed tool calls in the OpenAI wire format (JSON-string arguments), each with the call id the
    candidate that proposed the plan got from its server (a new one when it had none)."""
    return [
        {
            "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False)},
        }
        for call in sample_set.aggregation.tool_calls
    ]


def _content(sample_set: SampleSet) -> str | None:
    """The answer's text; None (as OpenAI sends it) for a tool-call message with no text."""
    text = sample_set.aggregation.text
    return None if not text and sample_set.aggregation.tool_calls else text


def completion(plan: Plan, sample_sets: list[SampleSet]) -> ChatCompletion:
    """One choice per sample set: the aggregated text, or the agreed tool calls; `usage` is every candidate's
    and aggregator's."""
    choices = []
    for i, sample_set in enumerate(sample_sets):
        message: dict[str, Any] = {"role": "assistant", "content": _content(sample_set)}
        if tool_calls := openai_tool_calls(sample_set):
            message["tool_calls"] = tool_calls
        if (reasoning := _reasoning(sample_set)) is not None:
            message["reasoning_content"] = reasoning
        choices.append({"index": i, "message": message, "finish_reason": finish_reason(sample_set), "logprobs": None})
    return ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-agg-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": plan.model,
            "choices": choices,
            "usage": _usage(sample_sets),
            SAMPLE_SETS_FIELD: [s.model_dump(mode="json") for s in sample_sets],
        }
    )


def sample_sets_from(response: Any) -> list[SampleSet]:
    """The sample sets behind a response of `wrap_openai` or the proxy (a ChatCompletion, the last chunk of a
    stream, a Response, or their JSON), one per choice; [] for a response that was not aggregated.

    Args:
        response: what a wrapped client or the proxy returned.

    Returns:
        The `SampleSet`s, each with its candidates and aggregation (see `wrap_openai`'s example).
    """
    raw = response.get(SAMPLE_SETS_FIELD) if isinstance(response, dict) else getattr(response, SAMPLE_SETS_FIELD, None)
    return [SampleSet.model_validate(s) for s in raw or []]


class ChunkWriter:
    """The chunks of one aggregated stream, in the order the graph's stream produces what they carry."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.state: dict[str, Any] = {}
        self.head = {
            "id": f"chatcmpl-agg-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": plan.model,
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> ChatCompletionChunk:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        usage = {"usage": None} if self.plan.include_usage else {}
        return ChatCompletionChunk.model_validate({**self.head, "choices": [choice], **usage, **extra})

    def opening(self) -> ChatCompletionChunk:
        return self.chunk({"role": "assistant", "content": ""})

    def event(self, mode: str, data: Any) -> ChatCompletionChunk | None:
        """A chunk for one item of the graph's `stream_mode=stream_modes(...)` stream, if it shows one; the graph's
        state ("values") is kept for `closing`.

        A candidate's progress has an empty delta (so `chunk.choices[0].delta.content` stays safe to read)
        and the event in an extra `candidate` field. The aggregator model's tokens are `reasoning_content`,
        as vLLM streams a reasoning model's thinking: what it writes is deliberation, and the answer it
        settles on (possibly a candidate's solution) is the `content` that follows."""
        if mode == "values":
            self.state = data
            return None
        if mode == "custom":
            return self.chunk({}, **{CANDIDATE_FIELD: data})
        if mode == "messages":
            message, metadata = data
            from_aggregator = isinstance(message, AIMessageChunk) and metadata.get("langgraph_node") == "aggregate"
            from_aggregator = from_aggregator and ANSWER_TAG not in (metadata.get("tags") or [])  # not the answer
            if from_aggregator and (text := str(message.text)):
                return self.chunk({"reasoning_content": text})
        return None

    def closing(self) -> list[ChatCompletionChunk]:
        """The answer (its text, then its tool calls, whole, in one delta), the finish (with the sample set) and,
        when asked for, the usage chunk."""
        sample_set: SampleSet = self.state["sample_set"]
        chunks = []
        if (content := _content(sample_set)) is not None:
            chunks.append(self.chunk({"content": content}))
        if tool_calls := openai_tool_calls(sample_set):
            chunks.append(self.chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(tool_calls)]}))
        finish = self.chunk({}, finish_reason(sample_set), **{SAMPLE_SETS_FIELD: [sample_set.model_dump(mode="json")]})
        chunks.append(finish)
        if self.plan.include_usage:
            usage = _usage([sample_set])
            chunks.append(ChatCompletionChunk.model_validate({**self.head, "choices": [], "usage": usage}))
        return chunks


class ChunkStream:
    """What a wrapped sync client returns for `stream=True`: iterate it, or use it as a context manager
    (like openai's `Stream`). `head` holds the chunks already drawn before `create` returned. `response` is the
    stream itself, so that openai's `chat.completions.stream()` helper, which closes `stream.response`, works."""

    def __init__(self, chunks: Iterator[ChatCompletionChunk], head: list[ChatCompletionChunk] | None = None) -> None:
        self._chunks, self._head = chunks, list(head or [])

    @property
    def response(self) -> ChunkStream:
        return self

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return self

    def __next__(self) -> ChatCompletionChunk:
        if self._head:
            return self._head.pop(0)
        return next(self._chunks)

    def __enter__(self) -> ChunkStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop early: closing the generator closes the graph's stream and the aggregator's request."""
        self._head.clear()
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


class AsyncChunkStream:
    """What a wrapped async client returns for `stream=True` (like openai's `AsyncStream`)."""

    def __init__(
        self, chunks: AsyncIterator[ChatCompletionChunk], head: list[ChatCompletionChunk] | None = None
    ) -> None:
        self._chunks, self._head = chunks, list(head or [])

    @property
    def response(self) -> AsyncChunkStream:
        return self

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        if self._head:
            return self._head.pop(0)
        return await anext(self._chunks)

    async def __aenter__(self) -> AsyncChunkStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._head.clear()
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()

    aclose = close  # what openai's async stream helpers call on `response`


class StreamedAggregation:
    """What `with_streaming_response.create(..., stream=True)` gives on a wrapped sync client, in place of one
    request's HTTP response: `parse()` is the aggregated stream, `close()` closes it. There is no single upstream
    response: `request_id` is None, and it has no status or headers."""

    request_id = None

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def parse(self) -> Any:
        return self._stream

    def close(self) -> None:
        self._stream.close()


class AsyncStreamedAggregation(StreamedAggregation):
    """`StreamedAggregation` for an async client (`await response.parse()`, as openai's `AsyncAPIResponse`)."""

    async def parse(self) -> Any:  # type: ignore[override]
        return self._stream

    async def close(self) -> None:  # type: ignore[override]
        await self._stream.close()


def _under_way(chunk: Any, succeeded: int, quorum: int) -> tuple[bool, int]:
    """Whether the stream can be handed over after this chunk: `quorum` candidates succeeded (so the call
    cannot fail for want of them), or the answer has begun; and the successes counted so far."""
    event = getattr(chunk, CANDIDATE_FIELD, None)
    if event is not None:
        succeeded += not event.get("error")
        return succeeded >= quorum, succeeded
    begun = any(
        c.finish_reason or c.delta.content or (c.delta.model_extra or {}).get("reasoning_content")
        for c in chunk.choices
    )
    return begun, succeeded


def held_until_under_way(chunks: Iterator[Any], quorum: int) -> list[Any]:
    """The chunks up to the point the answer is under way: as the unwrapped client raises at `create()`,
    a stream whose candidates all fail raises here, not after a few empty chunks."""
    head: list[Any] = []
    succeeded = 0
    try:
        for chunk in chunks:
            head.append(chunk)
            done, succeeded = _under_way(chunk, succeeded, quorum)
            if done:
                break
    except BaseException:
        getattr(chunks, "close", lambda: None)()
        raise
    return head


async def aheld_until_under_way(chunks: AsyncIterator[Any], quorum: int) -> list[Any]:
    head: list[Any] = []
    succeeded = 0
    try:
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            head.append(chunk)
            done, succeeded = _under_way(chunk, succeeded, quorum)
            if done:
                break
    except BaseException:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        raise
    return head
