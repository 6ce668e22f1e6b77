"""What the proxy reads and writes on the wire: a request body as the keyword arguments of the openai client's
`create` (chat completions or the Responses API) within the body and prompt limits, and an answer streamed as
server-sent events — chat chunks ending in [DONE], or Responses events each on its `event:` line — with an error
after the 200 sent in-stream, as OpenAI does."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import StreamingResponse
from openai.resources.chat.completions import AsyncCompletions
from openai.resources.responses import AsyncResponses
from starlette.background import BackgroundTask

from aggregate_graph.openai_compat.proxy_config import ProxyConfig, Scrubber
from aggregate_graph.serve.http import SSE_DONE, OpenAIError, read_json, sse


def _body_fields(create: Callable[..., Any]) -> frozenset[str]:
    """The body fields an openai client's `create` takes as keyword arguments; any other field (ours, or a
    server's own such as vLLM's `top_k`) travels in `extra_body`, as the client would have sent it."""
    return frozenset(inspect.signature(create).parameters) - {
        "self",
        "extra_headers",
        "extra_query",
        "extra_body",
        "timeout",
    }


_CREATE_FIELDS = {"chat": _body_fields(AsyncCompletions.create), "responses": _body_fields(AsyncResponses.create)}


_PROMPT_FIELDS = {"chat": ("messages",), "responses": ("instructions", "input")}


def check_prompt_size(body: dict[str, Any], max_chars: int, api: str = "chat") -> None:
    """Refuses (400, as OpenAI refuses a prompt over the context) a prompt of more than `max_chars` characters as
    sent: every field of every message or input item (tool calls and content parts included)."""
    fields = [body[f] for f in _PROMPT_FIELDS[api] if body.get(f) is not None]
    if (chars := sum(len(json.dumps(f, ensure_ascii=False)) for f in fields)) > max_chars:
        param = _PROMPT_FIELDS[api][-1]
        raise OpenAIError(
            400,
            f"the {param} hold {chars} characters; this server takes at most {max_chars}",
            param=param,
            code="context_length_exceeded",
        )


def create_arguments(body: dict[str, Any], api: str = "chat") -> dict[str, Any]:
    """A request body as the keyword arguments of the openai client's `create` for `api` ("chat" or
    "responses"): the fields it does not take travel in `extra_body`."""
    fields = _CREATE_FIELDS[api]
    kwargs = {k: v for k, v in body.items() if k in fields}
    if extra := {k: v for k, v in body.items() if k not in fields}:
        kwargs["extra_body"] = extra
    return kwargs


async def read_create_request(request: Request, config: ProxyConfig, deadline: float, api: str) -> dict[str, Any]:
    """The `create` arguments of a chat-completions or Responses request, its body read by `deadline` (else 408)
    within the body and prompt limits of `config`."""
    try:
        async with asyncio.timeout_at(deadline):
            body = await read_json(request, config.max_body_bytes)
    except TimeoutError:
        raise OpenAIError(408, "the request body did not arrive in time", code="timeout") from None
    check_prompt_size(body, config.max_prompt_chars, api)
    return create_arguments(body, api)


def _responses_event(payload: dict[str, Any]) -> str:
    """A Responses stream event as OpenAI sends it, its type on an `event:` line."""
    return f"event: {payload['type']}\n{sse(payload)}"


def _responses_error(body: dict[str, Any], sequence_number: int) -> dict[str, Any]:
    """The API's `error` event for an error body; it also carries the error object, so the openai client raises
    it as it raises a chat stream's error."""
    error = body["error"]
    return {**error, "type": "error", "sequence_number": sequence_number, "error": error}


_READERS: set[asyncio.Task[None]] = set()


async def sse_events(
    stream: Any,
    *,
    scrub: Scrubber,
    to_error: Callable[[BaseException], OpenAIError],
    release: Callable[[], None],
    deadline: float,
    api: str = "chat",
) -> AsyncIterator[str]:
    """The chunks (or Responses events) of `stream` as server-sent events, scrubbed, until `deadline`; an error
    after the 200 is sent in-stream, as OpenAI does. The stream's slot is released, and the stream closed, when it
    ends or the client goes (the candidate requests still out are then cancelled, as once a vote settles). A chat
    stream ends with [DONE]; a Responses stream with its closing event."""
    event = _responses_event if api == "responses" else sse
    read: asyncio.Queue[tuple[Literal["chunk", "error", "end"], Any]] = asyncio.Queue()

    async def reader() -> None:
        # Its own task: when the client goes, the server cancels the response body through an anyio cancel scope,
        # which cancels every await under it again and again, so that closing the graph's stream there would never
        # finish and the candidate requests still out would run on. This task is cancelled once, and closes it.
        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in stream:
                    read.put_nowait(("chunk", chunk))
        except Exception as exc:
            read.put_nowait(("error", exc))
        finally:
            release()
            await stream.close()
            read.put_nowait(("end", None))

    reading, sent = asyncio.create_task(reader()), 0
    _READERS.add(reading)  # held until it ends: the loop keeps only a weak reference to a task
    reading.add_done_callback(_READERS.discard)
    try:
        while (item := await read.get())[0] != "end":
            if item[0] == "error":
                body = to_error(item[1]).body()
                yield event(_responses_error(body, sent) if api == "responses" else body)
                continue
            yield event(scrub.payload(item[1].model_dump(mode="json", exclude_unset=True, by_alias=True)))
            sent += 1
    finally:
        reading.cancel()  # nothing, once it has ended
    if api == "chat":
        yield SSE_DONE


def stream_response(events: AsyncIterator[str], release: Callable[[], None]) -> StreamingResponse:
    """The streamed answer: `events` (`sse_events`, which frees the slot when it ends), with `release` as the
    background task that frees the slot if the stream never starts."""
    return StreamingResponse(events, media_type="text/event-stream", background=BackgroundTask(release))
