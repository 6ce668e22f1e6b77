"""The HTTP toolkit every OpenAI-compatible server here (the local engine, the proxy, the test server) is built
with: OpenAI-shaped errors and the exception handlers that answer with them, the bearer-key check, the request
body read under a size limit, server-sent events, and the rule that only loopback may go without a key."""

from __future__ import annotations

import hmac
import ipaddress
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from aggregate_graph.serve import DEFAULT_MAX_BODY_BYTES

DRAIN_LIMIT = 256 * 1024 * 1024
"""An oversized body is read (and dropped) up to this, then the connection closes."""
SSE_DONE = "data: [DONE]\n\n"
"""The event that ends an OpenAI stream."""


class OpenAIError(Exception):
    """An error answered as OpenAI does: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.extra: dict[str, Any] = {}  # more fields of the error object, e.g. the proxy's sample set

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        return {"error": {**error, **self.extra}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, which may resolve to any interface
        return False


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event carrying `payload` as JSON; a stream ends with `SSE_DONE`."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def completion_envelope(model: str) -> dict[str, Any]:
    """The fields a chat completion and every chunk of its stream share: a fresh id, the time, the model."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}


def _too_large(size: int, max_bytes: int) -> OpenAIError:
    return OpenAIError(
        413, f"the request body is {size} bytes; this server takes at most {max_bytes}", code="too_large"
    )


async def read_json(request: Request, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> dict[str, Any]:
    """The JSON object in the body, refused (413) past `max_bytes`, whether declared or chunked. An oversized
    body is read on (and dropped) up to `DRAIN_LIMIT`, so a client — which sends its whole body before reading —
    gets the 413 rather than a reset connection; past that, or when the declared length is, the connection is
    dropped."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > DRAIN_LIMIT:
        raise _too_large(int(declared), max_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= max_bytes:
            chunks.append(chunk)
        elif size > DRAIN_LIMIT:
            break
    if size > max_bytes:
        raise _too_large(size, max_bytes)
    try:
        body = json.loads(b"".join(chunks))
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError alike
        raise OpenAIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    return body


def bearer_check(api_key: str) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency that refuses (401) a request without `Authorization: Bearer api_key`."""
    expected = f"Bearer {api_key}".encode()

    async def check(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        # Constant-time comparison, so response timing does not reveal how much of a guess was right.
        if not hmac.compare_digest(given, expected):
            raise OpenAIError(
                401, "invalid or missing API key (send 'Authorization: Bearer KEY')", code="invalid_api_key"
            )

    return check


def server_error(error: Exception) -> OpenAIError:
    """The 500 an unexpected exception is answered with: its message, in OpenAI's shape."""
    return OpenAIError(500, str(error) or type(error).__name__, kind="server_error")


def add_error_handlers(app: FastAPI, unexpected: Callable[[Exception], OpenAIError] = server_error) -> None:
    """OpenAIError answers in OpenAI's shape; any other exception is `unexpected(exc)` (a 500 by default, in
    the same shape; a server that must scrub or log what it answers passes its own). Starlette still logs the
    traceback of an unexpected exception."""

    async def openai_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, OpenAIError)  # registered for OpenAIError only
        return error.response()

    async def other_error(_: Request, error: Exception) -> Response:
        return unexpected(error).response()

    app.add_exception_handler(OpenAIError, openai_error)
    app.add_exception_handler(Exception, other_error)
