"""`aggregate-graph proxy`: an OpenAI-compatible server whose chat completions are aggregations of candidates
drawn from an upstream OpenAI-compatible API. Any OpenAI client uses it by changing `base_url`.

It is `wrap_openai` over an `AsyncOpenAI` client of the upstream, behind the limits a shared server needs:
a bearer key (required off loopback), caps on body size, prompt length, samples per request, requests in
flight and wall time — each answered as OpenAI answers errors. The upstream key is sent to the upstream and
nowhere else: it is scrubbed from every error and sample set this server returns or logs.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

import openai
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.resources.chat.completions import AsyncCompletions
from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from starlette.background import BackgroundTask

from aggregate_graph.errors import AggregateGraphError
from aggregate_graph.graph import QuorumError
from aggregate_graph.openai_compat.request import RequestError
from aggregate_graph.openai_compat.wrap import ENGINE_ATTRIBUTE, wrap_openai
from aggregate_graph.registry import AGGREGATOR_NAMES
from aggregate_graph.sampling import describe
from aggregate_graph.serve.http import OpenAIError, bearer_check, is_loopback, openai_error

logger = logging.getLogger(__name__)

# Body fields the openai client takes as keyword arguments; any other field (ours, or a server's own such as
# vLLM's `top_k`) travels in `extra_body`, as the client would have sent it.
_CREATE_FIELDS = frozenset(inspect.signature(AsyncCompletions.create).parameters) - {
    "self",
    "extra_headers",
    "extra_query",
    "extra_body",
    "timeout",
}
_TIMEOUT_ERRORS = ("TimeoutError", "APITimeoutError")  # how `describe` starts a timed-out candidate's error
_DRAIN_LIMIT = 256 * 1024 * 1024  # an oversized body is read (and dropped) up to this, then the connection closes
_KEY_LIKE = re.compile(r"\b(sk-|Bearer\s+)[A-Za-z0-9_\-*.]{6,}")


class ProxyConfig(BaseModel):
    """Everything the proxy is started with; the CLI flags map onto these fields."""

    upstream: str = Field(description="base URL of the upstream OpenAI-compatible API, e.g. https://api.openai.com/v1")
    upstream_api_key: SecretStr = SecretStr("EMPTY")
    aggregator: str = Field(default="majority", description=f"default method: {', '.join(AGGREGATOR_NAMES)}")
    aggregator_weights: Path | None = Field(
        default=None, description="a WeightedVote weights file: needed by the `weighted` method, default or per request"
    )
    aggregator_base_url: str | None = Field(default=None, description="a server of the aggregator model (vLLM)")
    aggregator_api_key: SecretStr = SecretStr("EMPTY")
    aggregator_model: str | None = None
    n: int = Field(default=5, ge=1)
    min_candidates: int = Field(default=1, ge=1)
    api_key: SecretStr | None = Field(default=None, description="clients must send it as a bearer token")
    upstream_timeout_s: float = Field(default=120.0, gt=0)
    upstream_retries: int = Field(default=2, ge=0)
    max_n: int = Field(default=64, ge=1, description="samples per request: n candidates × choices")
    max_body_bytes: int = Field(default=1_000_000, ge=1)
    max_prompt_chars: int = Field(default=200_000, ge=1)
    max_concurrency: int = Field(default=64, ge=1, description="requests in flight; more are answered 429")
    max_request_s: float = Field(default=300.0, gt=0, description="wall time per request, streams included")

    @field_validator("aggregator")
    @classmethod
    def _known_aggregator(cls, name: str) -> str:
        if name not in AGGREGATOR_NAMES:
            raise ValueError(f"unknown aggregator {name!r}; use one of {', '.join(AGGREGATOR_NAMES)}")
        return name

    @field_validator("aggregator_weights")
    @classmethod
    def _weights_file(cls, path: Path | None) -> Path | None:
        # checked with the config, so that a missing file is a command-line error, not a failed server startup
        if path is not None and not path.is_file():
            raise ValueError(f"aggregator weights {str(path)!r}: no such file (write one with WeightedVote.save)")
        return path

    @model_validator(mode="after")
    def _weighted_has_weights(self) -> Self:
        if self.aggregator == "weighted" and self.aggregator_weights is None:
            raise ValueError("aggregator 'weighted' needs aggregator_weights (--aggregator-weights FILE)")
        return self

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods this proxy answers: `weighted` only with weights."""
        return tuple(m for m in AGGREGATOR_NAMES if m != "weighted" or self.aggregator_weights is not None)


class Scrubber:
    """Removes the upstream's and aggregator's keys (and anything shaped like a key) from text shown to
    clients: upstream error messages may quote the key they were sent."""

    def __init__(self, *secrets: SecretStr | None) -> None:
        self.secrets = [s.get_secret_value() for s in secrets if s is not None and len(s.get_secret_value()) >= 4]

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return _KEY_LIKE.sub(lambda m: f"{m.group(1)}***", text)

    def payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A response body, key-free: every candidate error is scrubbed, then the whole text."""
        for sample_set in payload.get("sample_sets") or []:
            for candidate in sample_set.get("candidates", []):
                if candidate.get("error"):
                    candidate["error"] = self(candidate["error"])
        text = json.dumps(payload, ensure_ascii=False)
        clean = text
        for secret in self.secrets:
            clean = clean.replace(secret, "***")
        return payload if clean == text else json.loads(clean)


def _status_of_failure(exc: BaseException) -> tuple[int, str, str]:
    """(status, type, code) of the error answered for an upstream failure. The client's own mistakes
    (a bad parameter, an unknown model) keep their status; the proxy's credentials being refused, or the
    upstream failing, is the gateway's problem (502), and a slow upstream is 504."""
    timed_out = isinstance(exc, openai.APITimeoutError | TimeoutError)
    if isinstance(exc, QuorumError) and exc.sample_set is not None:
        failed = exc.sample_set.failed
        statuses = {c.error_status for c in failed}
        status = statuses.pop() if len(statuses) == 1 else None
        timed_out = bool(failed) and all((c.error or "").startswith(_TIMEOUT_ERRORS) for c in failed)
    else:
        status = getattr(exc, "status_code", None)
    if timed_out:
        return 504, "timeout", "upstream_timeout"
    if status == 429:
        return 429, "requests", "rate_limit_exceeded"
    if status in (400, 404, 413, 422):
        return status, "invalid_request_error", "upstream_rejected_request"
    return 502, "upstream_error", "upstream_error"


async def _read_body(request: Request, limit: int) -> dict[str, Any]:
    """The JSON body, refused (413) past `limit` bytes, whether declared or chunked. An oversized body is read
    on (and dropped) up to `_DRAIN_LIMIT`, so a client — which sends its whole body before reading — gets the
    413 rather than a reset connection; past that, or when the declared length is, the connection is dropped."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > _DRAIN_LIMIT:
        raise OpenAIError(413, f"the request body is {declared} bytes; this server takes at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > _DRAIN_LIMIT:
            break
    if size > limit:
        raise OpenAIError(413, f"the request body is {size} bytes; this server takes at most {limit}", code="too_large")
    try:
        body = json.loads(b"".join(chunks))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        raise OpenAIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    return body


class _Slots:
    """Requests in flight, at most `limit`: one more is answered 429 at once (OpenAI clients retry 429 after
    a pause) rather than queued behind work that may take minutes."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self) -> Callable[[], None]:
        if self.used >= self.limit:
            raise OpenAIError(
                429,
                f"{self.used} requests are in flight, the most this server takes; retry shortly",
                kind="requests",
                code="rate_limit_exceeded",
            )
        self.used += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.used -= 1

        return release


def _prompt_chars(messages: Any) -> int:
    """The prompt's size as sent: every field of every message (tool calls and content parts included)."""
    return len(json.dumps(messages, ensure_ascii=False)) if messages is not None else 0


def create_proxy_app(config: ProxyConfig) -> FastAPI:
    """The proxy as an ASGI app (serve it with uvicorn, or `serve_proxy`)."""
    scrub = Scrubber(config.upstream_api_key, config.aggregator_api_key)
    clients: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The upstream client retries and times out each request itself; the graph adds nothing on top.
        upstream = openai.AsyncOpenAI(
            base_url=config.upstream,
            api_key=config.upstream_api_key.get_secret_value(),
            max_retries=config.upstream_retries,
            timeout=config.upstream_timeout_s,
        )
        aggregator_client = None
        if config.aggregator_base_url is not None:
            aggregator_client = openai.AsyncOpenAI(
                base_url=config.aggregator_base_url,
                api_key=config.aggregator_api_key.get_secret_value(),
                max_retries=config.upstream_retries,
                timeout=config.upstream_timeout_s,
            )
        clients["raw"] = openai.AsyncOpenAI(
            base_url=config.upstream,
            api_key=config.upstream_api_key.get_secret_value(),
            max_retries=0,
            timeout=config.upstream_timeout_s,
        )
        clients["wrapped"] = wrap_openai(
            upstream,
            n=config.n,
            aggregator=config.aggregator,
            aggregator_client=aggregator_client,
            aggregator_model=config.aggregator_model,
            aggregator_weights=config.aggregator_weights,
            min_candidates=config.min_candidates,
            max_n=config.max_n,
        )
        yield
        for client in (upstream, aggregator_client, clients["raw"]):
            if client is not None:
                await client.close()

    app = FastAPI(title="aggregate-graph proxy", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    app.add_exception_handler(OpenAIError, openai_error)
    # The API needs the client key; /health does not (a load balancer's probe), and tells nothing secret.
    api = APIRouter(dependencies=[Depends(bearer_check(config.api_key.get_secret_value()))] if config.api_key else [])
    slots = _Slots(config.max_concurrency)

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 once the upstream clients are up (503 before): for load balancers and readiness probes."""
        wrapped = clients.get("wrapped")
        engine = getattr(wrapped.chat.completions, ENGINE_ATTRIBUTE, None) if wrapped is not None else None
        body = {
            "status": "ok" if wrapped is not None else "starting",
            "aggregator": config.aggregator,
            "methods": list(config.methods),
            "n": config.n,
            "in_flight": slots.used,
            "max_concurrency": config.max_concurrency,
            "graphs_compiled": engine.graphs_built if engine is not None else 0,
        }
        return JSONResponse(body, 200 if wrapped is not None else 503)

    def failure(exc: BaseException) -> OpenAIError:
        """The OpenAI-style error for anything a request ends in; nothing unscrubbed reaches a log or a client."""
        if isinstance(exc, OpenAIError):
            return exc
        if isinstance(exc, RequestError):
            return OpenAIError(400, str(exc), param=exc.param, code=exc.code)
        if isinstance(exc, AggregateGraphError | openai.APIError | TimeoutError):
            status, kind, code = _status_of_failure(exc)
            message = str(exc) or f"the request took longer than {config.max_request_s:g}s"
            error = OpenAIError(status, scrub(message), kind=kind, code=code)
            if isinstance(exc, AggregateGraphError) and exc.sample_set is not None:
                # what was drawn before the failure is the client's: it comes back with the error
                drawn = scrub.payload({"sample_sets": [exc.sample_set.model_dump(mode="json")]})
                error.extra = {"sample_set": drawn["sample_sets"][0]}
            return error
        logger.error("proxy request failed: %s", scrub(describe(exc)))
        return OpenAIError(500, scrub(str(exc) or type(exc).__name__), kind="server_error")

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        try:
            async with asyncio.timeout(config.upstream_timeout_s):
                upstream_models = [m async for m in clients["raw"].models.list()]
        except Exception as exc:
            raise failure(exc) from None
        data = [m.model_dump() for m in upstream_models]
        data += [{**m, "id": f"{method}/{m['id']}"} for method in config.methods for m in list(data)]
        return {"object": "list", "data": data}

    @api.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        deadline = asyncio.get_running_loop().time() + config.max_request_s
        try:
            async with asyncio.timeout_at(deadline):
                body = await _read_body(request, config.max_body_bytes)
        except TimeoutError:
            raise OpenAIError(408, "the request body did not arrive in time", code="timeout") from None
        if (chars := _prompt_chars(body.get("messages"))) > config.max_prompt_chars:
            raise OpenAIError(
                400,
                f"the messages hold {chars} characters; this server takes at most {config.max_prompt_chars}",
                param="messages",
                code="context_length_exceeded",
            )
        kwargs = {k: v for k, v in body.items() if k in _CREATE_FIELDS}
        if extra := {k: v for k, v in body.items() if k not in _CREATE_FIELDS}:
            kwargs["extra_body"] = extra
        # The slot is taken once the body is in: a slow upload holds a connection, not a slot for real work.
        release = slots.take()
        try:
            async with asyncio.timeout_at(deadline):
                # A stream's create() returns once the answer is under way (enough candidates succeeded), so a
                # request every candidate fails (an unknown model, a refused key) is answered with its status,
                # not a 200 stream.
                result = await clients["wrapped"].chat.completions.create(**kwargs)
        except Exception as exc:
            release()
            raise failure(TimeoutError() if isinstance(exc, TimeoutError) else exc) from None
        if kwargs.get("stream") is not True:
            release()
            return JSONResponse(scrub.payload(result.model_dump(mode="json", exclude_unset=True)))
        # The stream keeps its slot until it ends; the background task frees it if the stream never starts.
        return StreamingResponse(
            _events(result, release, deadline), media_type="text/event-stream", background=BackgroundTask(release)
        )

    async def _events(stream: Any, release: Callable[[], None], deadline: float) -> AsyncIterator[str]:
        """The chunks as server-sent events; an error after the 200 is sent in-stream, as OpenAI does."""

        def event(chunk: Any) -> str:
            payload = scrub.payload(chunk.model_dump(mode="json", exclude_unset=True))
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in stream:
                    yield event(chunk)
        except Exception as exc:
            yield f"data: {json.dumps(failure(exc).body(), ensure_ascii=False)}\n\n"
        finally:
            release()
            await stream.close()
        yield "data: [DONE]\n\n"

    app.include_router(api)
    return app


def proxy_banner(config: ProxyConfig, host: str, port: int) -> str:
    """The line `serve_proxy` prints once its checks pass: where it serves, and whether clients need a key."""
    return (
        f"proxy on http://{host}:{port}/v1 → {config.upstream} (aggregator: {config.aggregator}, n={config.n}, "
        f"client key {'required' if config.api_key else 'not required'}; health: http://{host}:{port}/health)"
    )


def serve_proxy(config: ProxyConfig, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve until interrupted. Off loopback a client key is required: the proxy spends the upstream key.
    `proxy_banner` goes to stderr once the checks have passed (never before a refusal)."""
    if config.api_key is None and not is_loopback(host):
        raise ValueError(f"refusing to serve on {host!r} without an API key: set one, or bind 127.0.0.1")
    app = create_proxy_app(config)
    print(proxy_banner(config, host, port), file=sys.stderr, flush=True)
    # uvicorn answers 503 past this many connections: slow uploads cannot pile up without bound
    uvicorn.run(app, host=host, port=port, limit_concurrency=2 * config.max_concurrency + 16)
