"""What each model endpoint does with `n`, and whether it refuses streamed requests, learned once per process.

Asking for n samples in one request bills the prompt once, but servers differ: some return n choices
(honoured), some return one whatever n is (ignored), some answer 400 (refused). Probing on every call costs a
wasted request and its latency each time, so the first answer is remembered per endpoint — the server's URL
and the model — for the life of the process; `forget()` clears it (e.g. after a server is upgraded). So is an
endpoint's refusal to stream (`stream_candidates`): OpenAI answers a streamed request 400, naming `stream`, for a
model the organisation may not stream, and older Azure OpenAI api-versions refuse the `stream_options` that asks
for a streamed request's usage.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Literal

from aggregate_graph.errors import is_transient
from aggregate_graph.sample_set import Candidate

NMode = Literal["honoured", "ignored", "refused"]

_modes: dict[tuple[str, str, str], NMode] = {}
_refuses_stream: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def endpoint(model: Any, model_name: str) -> tuple[str, str, str]:
    """The chat model's class, the server it sends to (the base URL when it has one) and the model it names."""
    base_url = (
        getattr(model, "endpoint", None) or getattr(model, "openai_api_base", None) or getattr(model, "base_url", None)
    )
    return type(model).__qualname__, str(base_url or ""), model_name


def n_mode(key: tuple[str, str, str]) -> NMode | None:
    """What the endpoint was seen to do with `n`; None until it was asked."""
    return _modes.get(key)


def learn(key: tuple[str, str, str], mode: NMode) -> None:
    """Record what the endpoint did. A refusal is final; "honoured" never overrides "ignored" (a server that
    ignored n once would waste the request again)."""
    with _lock:
        if _modes.get(key) not in ("refused", "ignored"):
            _modes[key] = mode


def forget() -> None:
    with _lock:
        _modes.clear()
        _refuses_stream.clear()


# Older Azure OpenAI api-versions' answer to `stream_options`: an error message naming no `param`
_UNKNOWN_STREAM_OPTIONS = re.compile(
    r"(?:unrecognized request argument supplied|unknown parameter)\W*stream_options\b", re.I
)


def is_stream_refusal(exc: BaseException) -> bool:
    """A 400 whose error names the `stream` parameter — the endpoint will not stream this request's model (OpenAI,
    for organisations not verified to stream it) — or `stream_options`, which older Azure OpenAI api-versions do
    not know: they say so in the message, "Unrecognized request argument supplied: stream_options", with no
    `param`. Either answers the same request unstreamed. A 400 about anything else is not one, though its message
    may quote the request (vLLM's validation errors do), `stream_options` and all."""
    if getattr(exc, "status_code", None) != 400:
        return False
    param = getattr(exc, "param", None)
    if param is not None:
        return param in ("stream", "stream_options")
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return isinstance(message, str) and _UNKNOWN_STREAM_OPTIONS.match(message.strip()) is not None


def learn_stream_refused(key: tuple[str, str, str]) -> None:
    with _lock:
        _refuses_stream.add(key)


def refuses_stream(key: tuple[str, str, str]) -> bool:
    """Whether the endpoint was seen to refuse a streamed request (`is_stream_refusal`)."""
    return key in _refuses_stream


def after_failed_n(exc: BaseException) -> Literal["fail", "singles", "probe"]:
    """What to do when a request for n > 1 samples failed. A transient failure: ask for the samples one by one,
    each with its own attempts, so that partial failure leaves survivors instead of all-or-nothing. A refused
    key, permission or model: nothing (n single requests would be refused n times). Any other refusal (400,
    422…) may or may not be about `n`: one single request tells, before n of them are sent."""
    if is_transient(exc):
        return "singles"
    return "fail" if getattr(exc, "status_code", None) in (401, 403, 404) else "probe"


def n_was_refused(probe: Candidate, exc: BaseException) -> bool | None:
    """After an `n` request failed with `exc`, what one single request says: True when it succeeded (the
    endpoint refuses `n`), False when it failed the same way (the request itself is refused, e.g. too long),
    None when it failed otherwise (no verdict)."""
    if probe.ok:
        return True
    same = probe.error_status is not None and probe.error_status == getattr(exc, "status_code", None)
    return False if same else None
