"""An OpenAI-compatible chat-completions server on CPU over `LocalChatModel` (needs the `serve` extra).

It answers `GET /v1/models` and `POST /v1/chat/completions` (n, temperature, top_p, max_tokens /
max_completion_tokens, stop, seed, streaming with `stream_options.include_usage`) for one model, so
anything that talks to vLLM — `ChatOpenAI(base_url=…)`, the `openai` client, `aggregate-graph ask
--base-url` — can talk to an aggregator on a machine without a GPU. Generation runs in worker threads
and `LocalChatModel` serialises it, so the event loop keeps answering while a request decodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio.to_thread
import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aggregate_graph.local import LocalChatModel
from aggregate_graph.serve import DEFAULT_MAX_BODY_BYTES, DEFAULT_SERVED_NAME, resolve_model_dir
from aggregate_graph.serve.http import (
    SSE_DONE,
    OpenAIError,
    add_error_handlers,
    bearer_check,
    completion_envelope,
    is_loopback,
    read_json,
    server_error,
    sse,
)

logger = logging.getLogger(__name__)

MAX_CHOICES_PER_REQUEST = 128
"""Largest `n` (choices) one request may ask the local engine for: all n sequences decode together in CPU memory."""

# Request options that change what a client gets back and that this server cannot honour: refusing
# them is better than an answer that silently ignores them (e.g. a tool call that never comes).
_UNSUPPORTED = ("tools", "functions", "logit_bias", "response_format")

_MESSAGE_TYPES: dict[str, type[BaseMessage]] = {
    "system": SystemMessage,
    "developer": SystemMessage,  # OpenAI's newer name for the system role
    "user": HumanMessage,
    "assistant": AIMessage,
}


class _TextPart(BaseModel):
    type: Literal["text"]
    text: str


class _Message(BaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[_TextPart] | None = None

    def to_langchain(self) -> BaseMessage:
        content = self.content or ""
        text = content if isinstance(content, str) else "".join(part.text for part in content)
        return _MESSAGE_TYPES[self.role](text)


class _StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The chat-completions fields this server reads; `None` means OpenAI's default, as clients may send null."""

    model_config = ConfigDict(extra="ignore")  # clients send fields such as `user` that change nothing here

    model: str
    messages: list[_Message] = Field(min_length=1)
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES_PER_REQUEST)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None  # OpenAI's limit

    def options(self) -> dict[str, Any]:
        """Call options for `LocalChatModel`, with OpenAI's defaults rather than the model's own."""
        options: dict[str, Any] = {
            "n": self.n or 1,
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "seed": self.seed,
        }
        # max_completion_tokens is OpenAI's replacement for max_tokens; unset, the model's default applies.
        if (limit := self.max_completion_tokens or self.max_tokens) is not None:
            options["max_tokens"] = limit
        if self.logprobs:
            options.update(logprobs=True, top_logprobs=self.top_logprobs or 0)
        return options

    def stops(self) -> list[str] | None:
        return [self.stop] if isinstance(self.stop, str) else self.stop


def parse_chat_request(body: dict[str, Any], served_model_name: str) -> ChatRequest:
    """The request in `body`, or the OpenAI-style error (400, or 404 for another model) that refuses it."""
    for key in _UNSUPPORTED:
        if body.get(key) not in (None, False, [], {"type": "text"}):
            raise OpenAIError(400, f"{key!r} is not supported by this server", param=key)
    try:
        chat = ChatRequest.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        raise OpenAIError(400, f"{param or 'body'}: {first['msg']}", param=param) from None
    if chat.model != served_model_name:
        raise OpenAIError(
            404,
            f"The model {chat.model!r} does not exist; this server serves {served_model_name!r}",
            param="model",
            code="model_not_found",
        )
    if chat.stream and (chat.n or 1) > 1:
        raise OpenAIError(400, "streaming returns one choice here; use n=1 or stream=false", param="n")
    if chat.stream and chat.logprobs:
        raise OpenAIError(
            400, "log-probabilities are returned without streaming here; use stream=false", param="logprobs"
        )
    if chat.top_logprobs and not chat.logprobs:
        raise OpenAIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
    return chat


class LocalEngine:
    """One model and its endpoints, apart from the app that routes to them (`create_app` mounts them).

    Generations run one at a time, queued on the event loop (`gate`): waiting on the model's own thread lock
    instead would park requests in the worker-thread pool, and a stream needs a pool thread for every next token.
    """

    def __init__(self, model: LocalChatModel, served_model_name: str, max_body_bytes: int) -> None:
        self.model, self.served_model_name, self.max_body_bytes = model, served_model_name, max_body_bytes
        self.created = int(time.time())
        self.gate = asyncio.Lock()

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        # Load before the server accepts connections: a bad model or adapter fails at startup, and the
        # first request does not pay the load.
        await anyio.to_thread.run_sync(self.model.load)
        yield

    async def models(self) -> dict[str, Any]:
        model = {
            "id": self.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "aggregate-graph",
        }
        return {"object": "list", "data": [model]}

    async def chat_completions(self, request: Request) -> Response:
        chat = parse_chat_request(await read_json(request, self.max_body_bytes), self.served_model_name)
        messages = [m.to_langchain() for m in chat.messages]
        envelope = completion_envelope(self.served_model_name)
        if chat.stream:
            events = _stream_events(self.model, self.gate, messages, chat, envelope)
            return StreamingResponse(events, media_type="text/event-stream")
        return JSONResponse(await self.complete(messages, chat, envelope))

    async def complete(
        self, messages: list[BaseMessage], chat: ChatRequest, envelope: dict[str, Any]
    ) -> dict[str, Any]:
        """The whole chat completion, as OpenAI's JSON, once the model has generated every choice."""
        async with self.gate:
            result = await self.model.agenerate([messages], stop=chat.stops(), **chat.options())
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": g.message.text},
                "logprobs": g.message.response_metadata.get("logprobs"),
                "finish_reason": g.message.response_metadata["finish_reason"],
            }
            for i, g in enumerate(result.generations[0])
        ]
        usage = (result.llm_output or {})["token_usage"]
        return {**envelope, "object": "chat.completion", "choices": choices, "usage": usage}


def create_app(
    model_dir: str | Path,
    *,
    adapter: str | Path | None = None,
    served_model_name: str = DEFAULT_SERVED_NAME,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The server for the transformers model in `model_dir` (or the word `smollm2`) plus an optional PEFT
    `adapter`, named `served_model_name`. With `api_key`, every request must carry `Authorization: Bearer …`.
    A request body over `max_body_bytes` is refused (413).
    """
    model = LocalChatModel(
        model_path=str(resolve_model_dir(model_dir)), adapter_path=None if adapter is None else str(adapter)
    )
    engine = LocalEngine(model, served_model_name, max_body_bytes)
    app = FastAPI(
        title="aggregate-graph local aggregator",
        lifespan=engine.lifespan,
        # No schema or docs pages: they would be served without the API key, and no client needs them.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(bearer_check(api_key))] if api_key is not None else [],
    )
    add_error_handlers(app)
    app.add_api_route("/v1/models", engine.models, methods=["GET"])
    app.add_api_route("/v1/chat/completions", engine.chat_completions, methods=["POST"])
    return app


def serve_local(
    model_dir: str | Path,
    *,
    adapter: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str = DEFAULT_SERVED_NAME,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Serve `model_dir` until interrupted. A host other than loopback needs an `api_key`: the server
    would otherwise hand CPU time and the model to anyone on the network."""
    if api_key is None and not is_loopback(host):
        raise ValueError(
            f"refusing to serve on {host!r} without an API key: name one with --api-key-env NAME or --api-key-file "
            "PATH, or bind 127.0.0.1"
        )
    app = create_app(
        model_dir, adapter=adapter, served_model_name=served_model_name, api_key=api_key, max_body_bytes=max_body_bytes
    )
    uvicorn.run(app, host=host, port=port)


async def _stream_events(
    model: LocalChatModel,
    gate: asyncio.Lock,
    messages: list[BaseMessage],
    chat: ChatRequest,
    envelope: dict[str, Any],
) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format, one per piece of text as the model decodes it."""
    include_usage = chat.stream_options is not None and chat.stream_options.include_usage
    # With include_usage, OpenAI gives every chunk a null `usage` and adds one last chunk that has it.
    extra: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, str], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return sse({**envelope, "object": "chat.completion.chunk", "choices": [choice], **extra})

    yield chunk({"role": "assistant", "content": ""})
    finish_reason, usage = "stop", None
    try:
        # aclosing: a client that hangs up closes the model's stream at once, which stops its decoding
        # (and frees the model for the next request) instead of waiting for garbage collection.
        async with gate, aclosing(model.astream(messages, stop=chat.stops(), **chat.options())) as pieces:
            async for piece in pieces:
                if piece.text:
                    yield chunk({"content": piece.text})
                # LocalChatModel reports both on its closing chunk, after the text.
                finish_reason = piece.response_metadata.get("finish_reason", finish_reason)
                usage = piece.usage_metadata or usage
    except Exception as error:  # the 200 status is already sent: report it in-stream, as OpenAI does
        logger.exception("streamed generation failed")
        yield sse(server_error(error).body())
        yield SSE_DONE
        return
    yield chunk({}, finish_reason)
    if include_usage:
        prompt, completion = (usage or {}).get("input_tokens", 0), (usage or {}).get("output_tokens", 0)
        totals = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        yield sse({**envelope, "object": "chat.completion.chunk", "choices": [], "usage": totals})
    yield SSE_DONE
