"""An OpenAI-compatible server on 127.0.0.1 for tests and benchmarks.

It answers `/v1/chat/completions`, `/v1/responses` (the Responses API, plain and streamed) and `/v1/models` with
scripted replies, and can be told to add latency, to honour, ignore or reject `n`, to serve only one of the two
APIs, and to inject 429/500 errors or hangs — with counters to check what a client really sent. Needs the `test`
extra (fastapi, uvicorn).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from aggregate_graph.openai_compat.request import content_text
from aggregate_graph.openai_compat.responses_output import (
    function_call_item,
    message_item,
    response_json,
    stream_events,
)
from aggregate_graph.sample_set import Usage
from aggregate_graph.serve.http import SSE_DONE, OpenAIError, add_error_handlers, completion_envelope, sse
from aggregate_graph.testing.threaded import ThreadedServer

Reply = str | bytes | dict[str, Any]
NMode = Literal["honour", "ignore", "reject"]
API = Literal["chat", "responses"]


def count_tokens(text: str) -> int:
    """The server's stand-in tokenizer: whitespace-separated words."""
    return len(text.split())


def tool_calls_reply(*calls: tuple[str, dict[str, Any] | str], content: str | None = None) -> dict[str, Any]:
    """A scripted reply that calls tools: `tool_calls_reply(("multiply", {"a": 6, "b": 7}))`."""
    return {"content": content, "tool_calls": [{"name": name, "arguments": arguments} for name, arguments in calls]}


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    """A dict reply's tool calls in the OpenAI wire format (JSON-string arguments); none for text replies."""
    if not isinstance(reply, dict):
        return []
    calls = []
    for call in reply.get("tool_calls") or []:
        args = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])
        function = {"name": call["name"], "arguments": args}
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function})
    return calls


def _text(reply: Reply) -> str:
    """The reply's text content, as the stand-in tokenizer counts it (without tool-call arguments)."""
    if isinstance(reply, dict) and isinstance(parts := reply.get("content"), list):
        return "".join(part.get("text", "") for part in parts if isinstance(part, dict))
    if isinstance(reply, dict):
        return reply.get("content") or ""
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply


def _completion_tokens(reply: Reply) -> int:
    return count_tokens(_text(reply)) + sum(count_tokens(c["function"]["arguments"]) for c in _tool_calls(reply))


async def _paced(started: float, step: int, pace: float) -> None:
    """Waits until `step` paces after `started` (the event loop's clock): on a schedule, so that each pause's
    overshoot does not add up over a long stream."""
    if step and pace:
        await asyncio.sleep(max(0.0, started + step * pace - asyncio.get_running_loop().time()))


class OpenAITestServer:
    """A real HTTP server in a background thread. Use as a context manager; `base_url` ends in `/v1`.

    replies: cycled over every sample served (a global counter), or a function `(request_body, sample_no)
        -> reply`; a `bytes` reply is sent raw inside the JSON string, to test undecodable bodies. A dict reply
        `{"content": str | None, "tool_calls": [{"name": ..., "arguments": dict | str}]}` (see `tool_calls_reply`)
        calls tools, with finish_reason "tool_calls"; streamed, its calls come whole in one chunk after the content.
        A dict reply's "content" may be a list of content parts (`{"type": "text", "text": ...}`), sent as it is.
    n_mode: "honour" returns n choices (prompt billed once), "ignore" returns one choice whatever n is
        (as many servers do), "reject" answers 400 to n > 1.
    failure_rate / failure_status / failure_message / failure_code: share of requests answered with that error
        (its `code` too); fail_first: the first requests always fail. hang_rate / hang_s: share of requests that
        sleep hang_s before answering.
    latency_s: seconds before each answer, or a function of (body, request number) giving them (a heavy-tailed
        upstream); a client that closes the connection meanwhile is counted in `aborted`, and nothing is served.
    token_latency_s: with `stream: true`, the reply is streamed a word per chunk with this delay between chunks,
        or a function of the request's body giving it (an upstream whose requests generate at their own pace).
    refuse_stream: streamed chat requests are answered 400: "stream", naming `stream`, as OpenAI answers one for a
        model the organisation is not verified to stream; "stream_options", one that carries `stream_options`, as
        older Azure OpenAI api-versions do ("Unrecognized request argument supplied: stream_options", no `param`).
    token_details: added to every chat completion's usage, as OpenAI reports them, e.g.
        `{"prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 3}}`.
    apis: the APIs served — "chat" (`/v1/chat/completions`) and "responses" (`/v1/responses`); a left-out one
        answers 404. A Responses request with `n` is refused (400) as OpenAI refuses it; the reply's text is one
        message output item and its tool calls `function_call` items; finish_reason "length" makes the response
        "incomplete" (max_output_tokens). Reply functions read `body["input"]` there instead of `body["messages"]`.
    `headers` records each request's headers (`authorizations` their Authorization), to check what a client sent.
    """

    def __init__(
        self,
        replies: Sequence[Reply] | Callable[[dict[str, Any], int], Reply] = ("The answer is 42.",),
        *,
        latency_s: float | Callable[[dict[str, Any], int], float] = 0.0,
        n_mode: NMode = "honour",
        failure_rate: float = 0.0,
        failure_status: int = 500,
        fail_first: int = 0,
        hang_rate: float = 0.0,
        hang_s: float = 30.0,
        seed: int = 0,
        model: str = "test-model",
        finish_reason: str = "stop",
        failure_message: str = "injected failure",
        failure_code: str | None = None,
        token_latency_s: float | Callable[[dict[str, Any]], float] = 0.0,
        apis: Sequence[API] = ("chat", "responses"),
        token_details: dict[str, dict[str, int]] | None = None,
        refuse_stream: Literal["stream", "stream_options"] | None = None,
    ) -> None:
        self.replies, self.latency_s, self.n_mode = replies, latency_s, n_mode
        self.failure_rate, self.failure_status, self.fail_first = failure_rate, failure_status, fail_first
        self.hang_rate, self.hang_s, self.model, self.finish_reason = hang_rate, hang_s, model, finish_reason
        self.failure_message, self.failure_code, self.token_latency_s = failure_message, failure_code, token_latency_s
        self.apis, self.token_details = tuple(apis), dict(token_details or {})
        if refuse_stream not in (None, "stream", "stream_options"):
            raise ValueError(f'refuse_stream must be "stream", "stream_options" or None; got {refuse_stream!r}')
        self.refuse_stream = refuse_stream
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.samples_served = 0
        self.prompt_tokens_billed = 0
        self.errors_sent = 0
        self.hangs = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.aborted = 0
        self.completion_tokens_served = 0
        self.app = self._build_app()
        self._threaded: ThreadedServer | None = None
        self.port = 0

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def authorizations(self) -> list[str | None]:
        return [h.get("authorization") for h in self.headers]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _reply(self, body: dict[str, Any], sample_no: int) -> Reply:
        if callable(self.replies):
            return self.replies(body, sample_no)
        return self.replies[sample_no % len(self.replies)]

    def _latency(self, body: dict[str, Any]) -> float:
        if callable(self.latency_s):
            with self._lock:
                number = len(self.requests) - 1
            return float(self.latency_s(body, number))
        return self.latency_s

    def _pace(self, body: dict[str, Any]) -> float:
        """Seconds between a streamed reply's chunks."""
        return float(self.token_latency_s(body)) if callable(self.token_latency_s) else self.token_latency_s

    @staticmethod
    async def _client_left_during(request: Request, seconds: float) -> bool:
        """Waits `seconds` (the request's latency) unless the client closes the connection first: True then, as
        an upstream that stops generating for a cancelled request."""

        async def disconnect() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        watch = asyncio.ensure_future(disconnect())
        try:
            done, _ = await asyncio.wait({watch}, timeout=seconds)
            return bool(done)
        finally:
            watch.cancel()

    def _admit(self, body: dict[str, Any]) -> str | None:
        """Record the request and decide its injected fault, if any."""
        with self._lock:
            number = len(self.requests)
            self.requests.append(body)
            roll = self._rng.random()
            if number < self.fail_first or roll < self.failure_rate:
                self.errors_sent += 1
                return "error"
            if roll < self.failure_rate + self.hang_rate:
                self.hangs += 1
                return "hang"
            return None

    def _build_app(self) -> FastAPI:
        app = FastAPI()
        add_error_handlers(app)

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]}

        @app.get("/test/stats")
        async def stats() -> dict[str, int]:
            return self.stats()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await counted(request, "chat", answer)

        @app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            return await counted(request, "responses", self._respond)

        async def counted(request: Request, api: API, handler: Callable[[dict[str, Any]], Any]) -> Response:
            if api not in self.apis:
                return _error(404, f"this server does not serve the {api} API", "invalid_request_error")
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                try:
                    body = await request.json()
                except ClientDisconnect:  # cancelled before its body was read: aborted, as during its latency
                    with self._lock:
                        self.aborted += 1
                    return Response(status_code=499)
                with self._lock:
                    self.headers.append(dict(request.headers))
                fault = self._admit(body)
                if (latency := self._latency(body)) and await self._client_left_during(request, latency):
                    with self._lock:
                        self.aborted += 1
                    return Response(status_code=499)  # nobody reads it: the client closed the connection
                if fault == "error":
                    return _error(self.failure_status, self.failure_message, "server_error", code=self.failure_code)
                if fault == "hang":
                    await asyncio.sleep(self.hang_s)
                return await handler(body)
            finally:
                with self._lock:
                    self.in_flight -= 1

        async def answer(body: dict[str, Any]) -> Response:
            n = int(body.get("n") or 1)
            if body.get("stream") and self.refuse_stream == "stream":
                message = "Your organization must be verified to stream this model."
                return _error(400, message, "invalid_request_error", "stream", "unsupported_value")
            if "stream_options" in body and self.refuse_stream == "stream_options":
                message = "Unrecognized request argument supplied: stream_options"
                return _error(400, message, "invalid_request_error")
            if n > 1 and self.n_mode == "reject":
                return _error(400, "n > 1 is not supported by this server", "invalid_request_error", "n")
            if self.n_mode == "ignore":
                n = 1
            with self._lock:
                first = self.samples_served
                self.samples_served += n
            prompt = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
            replies = [self._reply(body, first + i) for i in range(n)]
            prompt_tokens = count_tokens(prompt)
            completion_tokens = sum(_completion_tokens(r) for r in replies)
            with self._lock:
                self.prompt_tokens_billed += prompt_tokens
            if body.get("stream"):  # its tokens are counted as they are sent
                usage = (body.get("stream_options") or {}).get("include_usage", False)
                events = self._stream(body.get("model") or self.model, replies, prompt_tokens, usage, self._pace(body))
                return StreamingResponse(events, media_type="text/event-stream")
            with self._lock:
                self.completion_tokens_served += completion_tokens
            response = _completion(
                body.get("model") or self.model, replies, prompt_tokens, completion_tokens, self.finish_reason
            )
            return _with_details(response, self.token_details) if self.token_details else response

        return app

    async def _respond(self, body: dict[str, Any]) -> Response:
        """A Responses API answer: one reply, as a Response or (`stream: true`) its standard events."""
        if "n" in body:
            return _error(400, "Unknown parameter: 'n'.", "invalid_request_error", "n", "unknown_parameter")
        with self._lock:
            sample_no = self.samples_served
            self.samples_served += 1
        reply = self._reply(body, sample_no)
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
        prompt = " ".join([body.get("instructions") or "", *(content_text(item.get("content")) for item in items)])
        usage = Usage.of(count_tokens(prompt), _completion_tokens(reply))
        with self._lock:
            self.prompt_tokens_billed += usage.prompt_tokens
        text, calls = _text(reply), _tool_calls(reply)
        output = [message_item(text)] if text or not calls else []
        output += [function_call_item(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in calls]
        cut_off = self.finish_reason == "length" and not calls
        response = response_json(body, body.get("model") or self.model, output, usage, cut_off=cut_off)
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(self._response_events(response, self._pace(body)), media_type="text/event-stream")

    @staticmethod
    async def _response_events(response: dict[str, Any], pace: float) -> AsyncIterator[str]:
        """The response's standard events as OpenAI sends them (`event:` and `data:` lines, no [DONE])."""
        started, delta = asyncio.get_running_loop().time(), 0
        for event in stream_events(response):
            if event["type"] == "response.output_text.delta":
                delta += 1
                await _paced(started, delta, pace)
            yield f"event: {event['type']}\n{sse(event)}"

    async def _stream(
        self, model: str, replies: list[Reply], prompt_tokens: int, include_usage: bool, pace: float
    ) -> AsyncIterator[str]:
        """The replies as server-sent events: each choice a word per chunk, the choices in turn, a round of words
        `pace` seconds apart, so that a shorter choice finishes first. The tokens sent are counted in
        `completion_tokens_served`; a client that closes the stream before its end is counted in `aborted`."""
        envelope = {**completion_envelope(model), "object": "chat.completion.chunk"}

        def chunk(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> str:
            choice = {"index": index, "delta": delta, "finish_reason": finish_reason}
            return sse({**envelope, "choices": [choice]})

        def served(tokens: int) -> None:
            with self._lock:
                self.completion_tokens_served += tokens

        words = [re.findall(r"\s*\S+", _text(reply)) for reply in replies]
        started = asyncio.get_running_loop().time()
        try:
            for index in range(len(replies)):
                yield chunk(index, {"role": "assistant", "content": ""})
            for round_no in range(max(map(len, words)) + 1):
                await _paced(started, round_no, pace)
                for index, reply in enumerate(replies):
                    if round_no < len(words[index]):
                        served(count_tokens(words[index][round_no]))
                        yield chunk(index, {"content": words[index][round_no]})
                    elif round_no == len(words[index]):  # this choice's last chunk: its tool calls, then the end
                        if calls := _tool_calls(reply):
                            served(sum(count_tokens(c["function"]["arguments"]) for c in calls))
                            yield chunk(index, {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
                        yield chunk(index, {}, "tool_calls" if calls else self.finish_reason)
        except (asyncio.CancelledError, GeneratorExit):
            with self._lock:
                self.aborted += 1
            raise
        if include_usage:
            completion_tokens = sum(_completion_tokens(reply) for reply in replies)
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
            usage["total_tokens"] = prompt_tokens + completion_tokens
            yield sse({**envelope, "choices": [], "usage": {**usage, **self.token_details}})
        yield SSE_DONE

    def stats(self) -> dict[str, int]:
        """Counters, also served at GET /test/stats for a server in another process."""
        with self._lock:
            return {
                "calls": self.calls,
                "samples_served": self.samples_served,
                "errors_sent": self.errors_sent,
                "hangs": self.hangs,
                "prompt_tokens_billed": self.prompt_tokens_billed,
                "max_in_flight": self.max_in_flight,
                "aborted": self.aborted,
                "completion_tokens_served": self.completion_tokens_served,
                "n_requests": sum(1 for r in self.requests if int(r.get("n") or 1) > 1),
            }

    def start(self, port: int = 0) -> OpenAITestServer:
        self._threaded = ThreadedServer(self.app, port, startup_timeout_s=10).start()
        self.port = self._threaded.port
        return self

    def stop(self) -> None:
        if self._threaded is not None:
            self._threaded.stop()

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _error(status: int, message: str, kind: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return OpenAIError(status, message, kind=kind, param=param, code=code).response()


def _completion(
    model: str, replies: list[Reply], prompt_tokens: int, completion_tokens: int, finish_reason: str
) -> Response:
    """The response JSON; `bytes` replies are spliced in raw so the body can carry invalid UTF-8."""
    raw: dict[str, bytes] = {}
    choices = []
    for i, reply in enumerate(replies):
        message: dict[str, Any] = {"role": "assistant", "content": _text(reply)}
        if isinstance(reply, dict) and isinstance(reply.get("content"), list):
            message["content"] = reply["content"]  # content parts, as some compatible servers send them
        if isinstance(reply, bytes):
            message["content"] = marker = f"@@raw-{uuid.uuid4().hex}@@"
            raw[marker] = reply
        elif calls := _tool_calls(reply):
            message.update(content=_text(reply) or None, tool_calls=calls)
        finish = "tool_calls" if "tool_calls" in message else finish_reason
        choices.append({"index": i, "message": message, "finish_reason": finish})
    payload = {
        **completion_envelope(model),
        "object": "chat.completion",
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    body = json.dumps(payload).encode()
    for marker, data in raw.items():
        body = body.replace(marker.encode(), data)
    return Response(body, media_type="application/json")


def _with_details(response: Response, details: dict[str, dict[str, int]]) -> Response:
    payload = json.loads(response.body)
    payload["usage"].update(details)
    return Response(json.dumps(payload).encode(), media_type="application/json")


def main(argv: list[str] | None = None) -> None:
    """Run the server in its own process (benchmarks do, so the server's CPU is not the client's):
    prints its base URL, then serves until killed."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m aggregate_graph.testing.openai_server")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--reply", action="append", help="a scripted reply (repeat for several)")
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--n-mode", choices=["honour", "ignore", "reject"], default="honour")
    p.add_argument("--failure-rate", type=float, default=0.0)
    p.add_argument("--failure-status", type=int, default=500)
    args = p.parse_args(argv)
    server = OpenAITestServer(
        args.reply or ["The answer is 42."],
        latency_s=args.latency,
        n_mode=args.n_mode,
        failure_rate=args.failure_rate,
        failure_status=args.failure_status,
    )
    server.start(args.port)
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
