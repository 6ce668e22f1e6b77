"""The wrapped client's other entry points: `chat.completions.parse` and `responses.parse` aggregate through the
patched `create`s; every other method that makes a model answer (legacy `completions`, `responses.compact`, the
beta Responses preview, Assistants runs, agent and realtime sessions) is refused with a `RequestError` unless the
call turns aggregation off — refused, never silently sent unaggregated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from openai import NOT_GIVEN, omit
from openai.lib._parsing import parse_chat_completion, type_to_response_format_param, validate_input_tools
from openai.lib._parsing._responses import parse_response, type_to_text_format_param

try:  # openai's conversion of pydantic_function_tool()s into Responses tools, used by its own responses.parse
    from openai.lib._response_resources import _make_tools
except ImportError:  # openai 3.30 and earlier (3.45 has moved it): beside the resource
    from openai.resources.responses.responses import _make_tools  # type: ignore[attr-defined,no-redef]

from aggregate_graph.openai_compat.request import OPTIONS_KEY, RequestError, given, split_options

_OFF = f'extra_body={{"{OPTIONS_KEY}": {{"enabled": False}}}}'

# Entry points that make the model answer but whose answer is not a chat completion of candidates: refused
# unless aggregation is off for the call, and then sent as they are. (path on the client, methods, what to use)
_NOT_AGGREGATED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("completions", ("create",), "the legacy completions API is not aggregated; use chat.completions.create"),
    ("responses", ("compact",), "a compaction summarizes one conversation; it is not aggregated"),
    (
        "beta.responses",
        ("create", "compact"),
        "the beta Responses preview is not aggregated; use responses.create (or .parse / .stream)",
    ),
    (
        "beta.threads",
        ("create_and_run", "create_and_run_poll", "create_and_run_stream"),
        "Assistants runs are not aggregated; use chat.completions.create",
    ),
    (
        "beta.threads.runs",
        (
            "create",
            "create_and_poll",
            "create_and_stream",
            "stream",
            "submit_tool_outputs",
            "submit_tool_outputs_and_poll",
            "submit_tool_outputs_stream",
        ),
        "Assistants runs are not aggregated; use chat.completions.create",
    ),
    (
        "beta.agents.sessions",
        ("create", "stream"),
        "agent sessions are not aggregated; use chat.completions.create with tools",
    ),
    (
        "beta.agents.sessions.events",
        ("create",),
        "agent sessions are not aggregated; use chat.completions.create with tools",
    ),
    ("live", ("create",), "a live session is one model's output, not an aggregation"),
)
# Sessions over a websocket: one model's live output, and no extra_body to turn aggregation off with.
_SESSIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("responses", ("connect",)),
    ("beta.responses", ("connect",)),
    ("realtime", ("connect",)),
    ("beta.realtime", ("connect",)),
    ("live", ("connect",)),
)


def resource(client: Any, path: str) -> Any:
    """`client.a.b` for "a.b", or None where this openai version has no such resource."""
    obj = client
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def forget_raw_wrappers(chat_resource: Any) -> None:
    """`with_raw_response` / `with_streaming_response` are cached wrappers around the methods as they were when
    first used: drop them, so that the next use wraps the patched methods."""
    for name in ("with_raw_response", "with_streaming_response"):
        vars(chat_resource).pop(name, None)


_Prepared = tuple[dict[str, Any], Callable[[Any], Any]]  # the `create` body, and how its answer is parsed


def _patch_parse(
    resource: Any,
    create: Callable[..., Any],
    is_async: bool,
    prepare: Callable[[dict[str, Any]], _Prepared],
    path: str,
) -> None:
    """`resource.parse` (the client's `path`) through the patched `create`: `prepare` turns the call into the
    body to aggregate and the parser of the aggregated answer, as openai's own `parse` parses one. With
    aggregation off, openai's own."""
    original = getattr(resource, "parse", None)
    if original is None:
        return

    def planned(kwargs: dict[str, Any]) -> _Prepared | None:
        options, rest = split_options(kwargs)
        if not options.enabled:
            return None
        if rest.get("stream"):
            raise RequestError(f"parse() does not stream; use {path}.stream()", param="stream")
        return prepare(kwargs)

    if is_async:

        async def aparse(**kwargs: Any) -> Any:
            if (plan := planned(kwargs)) is None:
                return await original(**split_options(kwargs)[1])
            body, parse_answer = plan
            return parse_answer(await create(**body))

        patched: Callable[..., Any] = aparse
    else:

        def parse(**kwargs: Any) -> Any:
            if (plan := planned(kwargs)) is None:
                return original(**split_options(kwargs)[1])
            body, parse_answer = plan
            return parse_answer(create(**body))

        patched = parse
    resource.parse = functools.wraps(original)(patched)


def _chat_parse_request(kwargs: dict[str, Any]) -> _Prepared:
    """`chat.completions.parse(response_format=Model, tools=[pydantic_function_tool(...)])`: the model becomes a
    json_schema response format (so the candidates' JSON objects are voted on) and the voted answer is parsed
    into it; function tools' arguments are parsed too."""
    response_format = kwargs.get("response_format", NOT_GIVEN)
    tools = validate_input_tools(kwargs.get("tools", NOT_GIVEN))
    headers = {"X-Stainless-Helper-Method": "chat.completions.parse", **(kwargs.get("extra_headers") or {})}
    body = {**kwargs, "response_format": type_to_response_format_param(response_format), "extra_headers": headers}
    return body, lambda answer: parse_chat_completion(
        response_format=response_format, input_tools=tools, chat_completion=answer
    )


def _responses_parse_request(kwargs: dict[str, Any]) -> _Prepared:
    """`responses.parse(text_format=Model, tools=[pydantic_function_tool(...)])`: the model becomes the
    `text.format` json_schema (so the candidates' JSON objects are voted on) and the voted answer is parsed into
    it — or into `parse_as` (None: read as plain text), as openai's `parse` decides."""
    body = given(kwargs)
    text_format = body.pop("text_format", omit)
    parse_as = body.pop("parse_as", omit)
    if text_format is not omit:
        if "format" in (body.get("text") or {}):
            raise TypeError("Cannot mix and match text.format with text_format")
        body["text"] = {**(body.get("text") or {}), "format": type_to_text_format_param(text_format)}
    if "verbosity" in body:  # a field of parse's body that create() has no argument for
        body["extra_body"] = {**(body.get("extra_body") or {}), "verbosity": body.pop("verbosity")}
    tools = _make_tools(body.get("tools", omit))
    if tools is not omit:
        body["tools"] = tools
    output_format = omit if parse_as is None else parse_as if parse_as is not omit else text_format
    return body, lambda answer: parse_response(text_format=output_format, input_tools=tools, response=answer)


def patch_parse(completions: Any, create: Callable[..., Any], is_async: bool) -> None:
    """`chat.completions.parse` aggregates through the patched `create` (`_chat_parse_request`)."""
    _patch_parse(completions, create, is_async, _chat_parse_request, "chat.completions")


def patch_responses_parse(responses: Any, create: Callable[..., Any], is_async: bool) -> None:
    """`responses.parse` aggregates through the patched `create` (`_responses_parse_request`)."""
    _patch_parse(responses, create, is_async, _responses_parse_request, "responses")


def refuse_unaggregated(client: Any) -> None:
    """Every other entry point that makes the model answer raises `RequestError` (what to use instead), unless
    the call turns aggregation off: then it goes, as it is, through an unwrapped copy of the client (whose own
    helpers, e.g. `create_and_poll` calling `create`, are not patched)."""
    copy = client.copy
    unwrapped: list[Any] = []

    def plain() -> Any:
        if not unwrapped:
            unwrapped.append(copy())
        return unwrapped[0]

    def refusing(path: str, name: str, method: Callable[..., Any], alternative: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            options, rest = split_options(kwargs)
            if options.enabled:
                raise RequestError(
                    f"{path}.{name}() on a client wrapped by wrap_openai: {alternative}. To send it unaggregated, "
                    f"turn aggregation off for the call ({_OFF}).",
                    param="aggregation",
                )
            return getattr(resource(plain(), path), name)(*args, **rest)

        return functools.wraps(method)(call)

    def session(path: str, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise RequestError(
                f"{path}.{name}() on a client wrapped by wrap_openai: a realtime session is one model's live "
                "output, which cannot be aggregated. Open it with a client that is not wrapped.",
                param="aggregation",
            )

        return functools.wraps(method)(call)

    for path, names, alternative in _NOT_AGGREGATED:
        if (found := resource(client, path)) is not None:
            for name in names:
                if (method := getattr(found, name, None)) is not None:
                    setattr(found, name, refusing(path, name, method, alternative))
            forget_raw_wrappers(found)
    for path, names in _SESSIONS:
        if (found := resource(client, path)) is not None:
            for name in names:
                if (method := getattr(found, name, None)) is not None:
                    setattr(found, name, session(path, name, method))
