"""`aggregate-graph proxy`: an OpenAI-compatible server whose chat completions and Responses API responses are
aggregations of candidates drawn from an upstream OpenAI-compatible API. Any OpenAI client (the OpenAI Agents SDK
included) uses it by changing `base_url`.

It is `wrap_openai` over an `AsyncOpenAI` client of the upstream, behind the limits a shared server needs:
a bearer key (required off loopback), caps on body size, prompt length, samples per request, requests in
flight and wall time — each answered as OpenAI answers errors. The upstream key is sent to the upstream and
nowhere else: it is scrubbed from every error and sample set this server returns or logs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Self

import httpx
import openai
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import SecretStr

from aggregate_graph.errors import AggregateGraphError, describe
from aggregate_graph.openai_compat.engine import ENGINE_ATTRIBUTE
from aggregate_graph.openai_compat.proxy_config import UPSTREAM_CHECK_S, ProxyConfig, Scrubber
from aggregate_graph.openai_compat.proxy_wire import read_create_request, sse_events, stream_response
from aggregate_graph.openai_compat.request import RequestError
from aggregate_graph.openai_compat.wrap import wrap_openai
from aggregate_graph.serve.http import (
    OpenAIError,
    add_error_handlers,
    bearer_check,
    is_loopback,
)

logger = logging.getLogger(__name__)


def _status_of_failure(exc: BaseException) -> tuple[int, str, str]:
    """(status, type, code) of the error answered for an upstream failure. The client's own mistakes
    (a bad parameter, an unknown model) keep their status; the proxy's credentials being refused, or the
    upstream failing, is the gateway's problem (502), and a slow upstream is 504. Total candidate failure
    arrives already as the openai class of its cause (`openai_compat.quorum_errors`)."""
    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return 504, "timeout", "upstream_timeout"
    if status == 429:
        return 429, "requests", "rate_limit_exceeded"
    if status in (400, 404, 413, 422):
        return status, "invalid_request_error", "upstream_rejected_request"
    return 502, "upstream_error", "upstream_error"


def proxy_error(exc: BaseException, scrub: Scrubber, *, max_request_s: float) -> OpenAIError:
    """The OpenAI-style error for anything a proxy request ends in; nothing unscrubbed reaches a log or a client.
    A bare TimeoutError is the request's own wall time (`max_request_s`) running out."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, RequestError):
        return OpenAIError(400, str(exc), param=exc.param, code=exc.code)
    if isinstance(exc, AggregateGraphError | openai.APIError | TimeoutError):
        status, kind, code = _status_of_failure(exc)
        message = str(exc) or f"the request took longer than {max_request_s:g}s"
        error = OpenAIError(status, scrub(message), kind=kind, code=code)
        if isinstance(exc, AggregateGraphError) and exc.sample_set is not None:
            # what was drawn before the failure is the client's: it comes back with the error
            drawn = scrub.payload({"sample_sets": [exc.sample_set.model_dump(mode="json")]})
            error.extra = {"sample_set": drawn["sample_sets"][0]}
        return error
    logger.error("proxy request failed: %s", scrub(describe(exc)))
    return OpenAIError(500, scrub(str(exc) or type(exc).__name__), kind="server_error")


class RequestSlots:
    """Requests in flight, at most `limit`: one more is answered 429 at once (OpenAI clients retry 429 after
    a pause) rather than queued behind work that may take minutes."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self) -> Callable[[], None]:
        """Takes a slot, or raises the 429; returns the slot's release, which frees it once however often called."""
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


class UpstreamClients:
    """The proxy's openai clients, open inside `async with`: `wrapped` answers chat completions with
    aggregations (its upstream client retries and times out each request itself; the graph adds nothing on top),
    `raw` (no retries) lists the upstream's models. Both are None until opened."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.raw: openai.AsyncOpenAI | None = None
        self.wrapped: Any = None
        self._opened: list[openai.AsyncOpenAI] = []

    @property
    def ready(self) -> bool:
        return self.wrapped is not None

    @property
    def graphs_compiled(self) -> int:
        engine = getattr(self.wrapped.chat.completions, ENGINE_ATTRIBUTE, None) if self.ready else None
        return engine.graphs_built if engine is not None else 0

    def _open(self, base_url: str, api_key: SecretStr, max_retries: int) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key.get_secret_value(),
            max_retries=max_retries,
            timeout=self.config.upstream_timeout_s,
        )
        self._opened.append(client)
        return client

    async def __aenter__(self) -> Self:
        config = self.config
        upstream = self._open(config.upstream, config.upstream_api_key, config.upstream_retries)
        aggregator_client = None
        if config.aggregator_base_url is not None:
            aggregator_client = self._open(
                config.aggregator_base_url, config.aggregator_api_key, config.upstream_retries
            )
        self.raw = self._open(config.upstream, config.upstream_api_key, 0)
        self.wrapped = wrap_openai(
            upstream,
            options=config.aggregation_options(),
            aggregator=config.aggregator,
            aggregator_client=aggregator_client,
            aggregator_model=config.aggregator_model,
            aggregator_weights=config.aggregator_weights,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        opened, self._opened = self._opened, []
        for client in opened:
            await client.close()


class Proxy:
    """The proxy's endpoints and what they share (its clients, its slots, its scrubber), apart from the app that
    routes to them: `create_proxy_app` mounts them."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.scrub = Scrubber(config.upstream_api_key, config.aggregator_api_key)
        self.clients = UpstreamClients(config)
        self.slots = RequestSlots(config.max_concurrency)

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        async with self.clients:
            yield

    def error(self, exc: BaseException) -> OpenAIError:
        return proxy_error(exc, self.scrub, max_request_s=self.config.max_request_s)

    async def health(self) -> JSONResponse:
        """200 once the upstream clients are up (503 before): for load balancers and readiness probes."""
        ready = self.clients.ready
        body = {
            "status": "ok" if ready else "starting",
            "aggregator": self.config.aggregator,
            "methods": list(self.config.methods),
            "n": self.config.n,
            "in_flight": self.slots.used,
            "max_concurrency": self.config.max_concurrency,
            "graphs_compiled": self.clients.graphs_compiled,
        }
        return JSONResponse(body, 200 if ready else 503)

    async def models(self) -> dict[str, Any]:
        """The upstream's models, and each again under every method's prefix (`majority/MODEL`, …)."""
        try:
            async with asyncio.timeout(self.config.upstream_timeout_s):
                upstream_models = [m async for m in self.clients.raw.models.list()]
        except Exception as exc:
            raise self.error(exc) from None
        data = [m.model_dump() for m in upstream_models]
        data += [{**m, "id": f"{method}/{m['id']}"} for method in self.config.methods for m in list(data)]
        return {"object": "list", "data": data}

    async def chat_completions(self, request: Request) -> Response:
        return await self._answer(request, "chat")

    async def responses(self, request: Request) -> Response:
        """`POST /v1/responses`: n upstream Responses calls aggregated into one Response (or its events)."""
        return await self._answer(request, "responses")

    async def _answer(self, request: Request, api: str) -> Response:
        deadline = asyncio.get_running_loop().time() + self.config.max_request_s
        kwargs = await read_create_request(request, self.config, deadline, api)
        wrapped = self.clients.wrapped
        create = wrapped.responses.create if api == "responses" else wrapped.chat.completions.create
        # The slot is taken once the body is in: a slow upload holds a connection, not a slot for real work.
        release = self.slots.take()
        try:
            async with asyncio.timeout_at(deadline):
                # A stream's create() returns once the answer is under way (enough candidates succeeded), so a
                # request every candidate fails (an unknown model, a refused key) is answered with its status,
                # not a 200 stream.
                result = await create(**kwargs)
        except Exception as exc:
            release()
            raise self.error(TimeoutError() if isinstance(exc, TimeoutError) else exc) from None
        if kwargs.get("stream") is not True:
            release()
            return JSONResponse(self.scrub.payload(result.model_dump(mode="json", exclude_unset=True, by_alias=True)))
        events = sse_events(result, scrub=self.scrub, to_error=self.error, release=release, deadline=deadline, api=api)
        return stream_response(events, release)


def create_proxy_app(config: ProxyConfig) -> FastAPI:
    """The proxy as an ASGI app (serve it with uvicorn, or `serve_proxy`)."""
    proxy = Proxy(config)
    app = FastAPI(
        title="aggregate-graph proxy", lifespan=proxy.lifespan, openapi_url=None, docs_url=None, redoc_url=None
    )
    add_error_handlers(app, proxy.error)
    # The API needs the client key; /health does not (a load balancer's probe), and tells nothing secret.
    api = APIRouter(dependencies=[Depends(bearer_check(config.api_key.get_secret_value()))] if config.api_key else [])
    app.add_api_route("/health", proxy.health, methods=["GET"])
    api.add_api_route("/v1/models", proxy.models, methods=["GET"])
    api.add_api_route("/v1/chat/completions", proxy.chat_completions, methods=["POST"])
    api.add_api_route("/v1/responses", proxy.responses, methods=["POST"])
    app.include_router(api)
    return app


def proxy_banner(config: ProxyConfig, host: str, port: int) -> str:
    """The line `serve_proxy` prints once its checks pass: where it serves, and whether clients need a key."""
    return (
        f"proxy on http://{host}:{port}/v1 → {config.upstream} (aggregator: {config.aggregator}, n={config.n}, "
        f"client key {'required' if config.api_key else 'not required'}; health: http://{host}:{port}/health)"
    )


def upstream_problem(config: ProxyConfig, timeout_s: float = UPSTREAM_CHECK_S) -> str | None:
    """Why the upstream cannot answer this proxy now, in one line, or None: it is asked `GET /models` with the
    upstream key, as the proxy's clients will be served. Only what no request could get past counts: no answer,
    or the key refused (401/403); another status (a server without /models) is for the requests to find out."""
    url = f"{config.upstream.rstrip('/')}/models"
    headers = {"Authorization": f"Bearer {config.upstream_api_key.get_secret_value()}"}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return f"upstream {config.upstream} did not answer GET {url} within {timeout_s:g} s"
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return f"upstream {config.upstream} is unreachable (GET {url}: {describe(exc)})"
    if response.status_code in (401, 403):
        return (
            f"upstream {config.upstream} refused the upstream key (GET {url}: {response.status_code} "
            f"{response.reason_phrase}): check the key (--upstream-api-key-env)"
        )
    return None


def serve_proxy(config: ProxyConfig, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve until interrupted. Off loopback a client key is required: the proxy spends the upstream key.
    The upstream is checked first (`upstream_problem`): a failure is a warning on stderr, not a refusal, since
    the upstream may come up later. `proxy_banner` goes to stderr once the checks have passed (never before a
    refusal)."""
    if config.api_key is None and not is_loopback(host):
        raise ValueError(f"refusing to serve on {host!r} without an API key: set one, or bind 127.0.0.1")
    if (problem := upstream_problem(config)) is not None:
        scrub = Scrubber(config.upstream_api_key)
        print(f"warning: {scrub(problem)}; serving anyway, requests fail until it answers", file=sys.stderr)
    app = create_proxy_app(config)
    print(proxy_banner(config, host, port), file=sys.stderr, flush=True)
    # uvicorn answers 503 past this many connections: slow uploads cannot pile up without bound
    uvicorn.run(app, host=host, port=port, limit_concurrency=2 * config.max_concurrency + 16)
