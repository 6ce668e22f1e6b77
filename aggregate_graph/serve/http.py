"""What the OpenAI-compatible servers here (the local engine, the proxy) share: OpenAI-shaped errors, the
bearer-key check, server-sent events, and the rule that only loopback may go without a key."""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response


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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, which may resolve to any interface
        return False


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def read_json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError alike
        raise OpenAIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    return body


def bearer_check(api_key: str) -> Callable[[Request], Awaitable[None]]:
    expected = f"Bearer {api_key}".encode()

    async def check(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        # Constant-time comparison, so response timing does not reveal how much of a guess was right.
        if not hmac.compare_digest(given, expected):
            raise OpenAIError(
                401, "invalid or missing API key (send 'Authorization: Bearer KEY')", code="invalid_api_key"
            )

    return check


async def openai_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, OpenAIError)  # registered for OpenAIError only
    return JSONResponse(error.body(), error.status)


async def server_error(_: Request, error: Exception) -> Response:
    # Starlette still logs the traceback; the client gets the error in OpenAI's shape.
    return JSONResponse(OpenAIError(500, str(error) or type(error).__name__, kind="server_error").body(), 500)


def add_error_handlers(app: Any) -> None:
    """OpenAIError answers in OpenAI's shape; anything else is a 500 in the same shape."""
    app.add_exception_handler(OpenAIError, openai_error)
    app.add_exception_handler(Exception, server_error)
