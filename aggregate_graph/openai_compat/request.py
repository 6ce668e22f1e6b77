"""Reading a chat-completions request as an aggregation plan: which options go to the candidates (`tools` and
`response_format` included: tool calls and JSON objects are voted on), which control the aggregation
(`extra_body={"aggregation": {...}}` or a `method/` model prefix), and which cannot be aggregated and are
refused rather than silently dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from openai import BadRequestError, NotGiven, Omit
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aggregate_graph.aggregators.registry import aggregator_names, registration
from aggregate_graph.errors import AggregateGraphError
from aggregate_graph.openai_compat.quorum_errors import http

OPTIONS_KEY = "aggregation"

# Options whose result cannot be aggregated from candidates' answers: the candidates' token log-probabilities,
# audio or a predicted output are not what the aggregated answer is made of. (Tool calls and structured output
# are voted on: `tools` and `response_format` go to every candidate.)
_REFUSED = {
    "logprobs": "log-probabilities",
    "top_logprobs": "log-probabilities",
    "audio": "audio output",
    "prediction": "predicted outputs",
}
_LEGACY = {"functions": "tools", "function_call": "tool_choice"}  # deprecated options and what replaced them
STRUCTURED_FORMATS = ("json_object", "json_schema")  # response_format types aggregated by `StructuredVote`


class RequestError(AggregateGraphError, BadRequestError, ValueError):
    """A request that cannot be aggregated as given, raised before anything is sent. It is the
    `openai.BadRequestError` the API would answer (status 400, `param` naming the offending field), so code
    that handles the client's errors handles it; and a ValueError."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        body = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
        request = http.Request("POST", "http://wrap-openai.invalid/v1/chat/completions")
        super().__init__(message, response=http.Response(400, request=request, json={"error": body}), body=body)


class RequestAggregation(BaseModel):
    """Per-request control, sent as `extra_body={"aggregation": {...}}` (or a JSON body field `aggregation`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="false: the request goes to the model as it is")
    n: int | None = Field(default=None, ge=1, description="candidates to draw (default: the wrapper's n)")
    method: str | None = Field(default=None, description="a registered aggregator's name (`aggregator_names()`)")
    min_candidates: int | None = Field(default=None, ge=1, description="fewer successful candidates is an error")


@dataclass
class Plan:
    """An aggregated request: `choices` independent aggregations of `n` candidates each. The caller's
    `messages` go to every candidate request unchanged; `question` (the last user turn's text) is what the
    sample set and the aggregator see."""

    model: str
    messages: list[dict[str, Any]]
    question: str
    method: str | None
    n: int | None
    min_candidates: int | None
    choices: int
    stream: bool
    include_usage: bool
    params: dict[str, Any] = field(default_factory=dict)
    api: Literal["chat", "responses"] = "chat"  # chat completions, or the Responses API (`responses_request`)
    streamed_response: bool = False  # asked through `with_streaming_response`: the stream in a response stand-in

    @property
    def structured(self) -> bool:
        """Whether the request asks for JSON (`response_format`, or the Responses API's `text.format`, of type
        json_object / json_schema): the candidates' parsed objects are voted on."""
        text = self.params.get("text")
        response_format = text.get("format") if isinstance(text, dict) else self.params.get("response_format")
        return _format_type(response_format) in STRUCTURED_FORMATS


def _format_type(response_format: Any) -> Any:
    return response_format.get("type") if isinstance(response_format, dict) else None


def given(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The options the caller really set: openai's NOT_GIVEN / omit sentinels dropped."""
    return {k: v for k, v in kwargs.items() if not isinstance(v, NotGiven | Omit)}


def split_options(kwargs: dict[str, Any]) -> tuple[RequestAggregation, dict[str, Any]]:
    """Our options out of `extra_body`, and the request without them (the rest of `extra_body` stays)."""
    kwargs = given(kwargs)
    extra = kwargs.get("extra_body")
    if extra is None or OPTIONS_KEY not in extra:
        return RequestAggregation(), kwargs
    if not isinstance(extra, dict):
        raise RequestError("extra_body must be a JSON object", param="extra_body")
    extra = dict(extra)
    raw = extra.pop(OPTIONS_KEY)
    try:
        options = RequestAggregation.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in (OPTIONS_KEY, *first["loc"]))
        raise RequestError(f"{where}: {first['msg']}", param=where) from None
    rest = {**kwargs, "extra_body": extra} if extra else {k: v for k, v in kwargs.items() if k != "extra_body"}
    return options, rest


def check_structured_method(method: str | None, format_type: Any, field: str, named_in_options: bool) -> None:
    """Structured output is aggregated by vote on the candidates' parsed JSON (`StructuredVote`): a method that
    is not such a vote (its class's `votes_on_json`) does not apply."""
    if method is None or format_type not in STRUCTURED_FORMATS or registration(method).votes_on_json:
        return
    votes = " or ".join(n for n in aggregator_names() if registration(n).votes_on_json)
    raise RequestError(
        f"structured output ({field} {format_type!r}) is aggregated by vote on the candidates' parsed JSON; method "
        f"{method!r} does not apply (use {votes}, or name no method)",
        param="method" if named_in_options else "model",
    )


def method_prefix(model: str) -> tuple[str | None, str]:
    """`ssa/gpt-4o-mini` → ("ssa", "gpt-4o-mini"). Only known method names count: served model names such as
    `meta-llama/Llama-3.1-8B` contain slashes too."""
    head, sep, rest = model.partition("/")
    return (head, rest) if sep and head in aggregator_names() and rest else (None, model)


def content_text(content: Any) -> str:
    """A message's text: its string content, or its text parts (chat's `text`, the Responses API's `input_text`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text")
        )
    return ""


def last_user_text(messages: list[dict[str, Any]], param: str = "messages") -> str:
    """The text of the last user message (chat messages, or Responses input items): the question the candidates
    answer."""
    for message in reversed(messages):
        if message.get("role") != "user" or message.get("type", "message") != "message":
            continue
        if text := content_text(message.get("content")).strip():
            return text
        break
    raise RequestError(
        f"{param}: the last user message has no text; aggregation compares answers to a text question "
        f'(send it with extra_body={{"{OPTIONS_KEY}": {{"enabled": false}}}} to call the model directly)',
        param=param,
    )


def as_dict(message: Any) -> Any:
    """A message as JSON, as the openai client sends it: the `choices[0].message` of a response, appended to the
    conversation as OpenAI's tool-calling guide does, is a pydantic model."""
    if isinstance(message, BaseModel):
        return message.model_dump(mode="json", exclude_unset=True, exclude=getattr(message, "__api_exclude__", None))
    return message


def check_method(method: str | None) -> str | None:
    if method is not None and method not in (names := aggregator_names()):
        raise RequestError(f"unknown aggregation method {method!r}; use one of {', '.join(names)}", param="method")
    return method


def pop_stream(kwargs: dict[str, Any]) -> bool:
    """The request's `stream` flag, taken out of `kwargs` (the candidates' requests are not streamed)."""
    stream = kwargs.pop("stream", None) or False
    if not isinstance(stream, bool):
        raise RequestError(f"stream must be a boolean, got {stream!r}", param="stream")
    return stream


def _positive_int(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"{param} must be a positive integer, got {value!r}", param=param)
    return value


def plan_request(options: RequestAggregation, kwargs: dict[str, Any]) -> Plan:
    """The plan for an aggregated request (`kwargs` without our options), or a RequestError saying what
    cannot be aggregated."""
    kwargs = dict(kwargs)
    model = kwargs.pop("model", None)
    if not isinstance(model, str) or not model:
        raise RequestError("model is required", param="model")
    messages = kwargs.pop("messages", None)
    if not isinstance(messages, list | tuple) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    messages = [as_dict(m) for m in messages]
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise RequestError("messages: each message must be an object with a 'role'", param="messages")
    question = last_user_text(messages)
    for key, replacement in _LEGACY.items():
        if kwargs.get(key) not in (None, [], {}):
            raise RequestError(
                f"{key!r} is the deprecated form of {replacement!r}; send {replacement!r}, whose calls are aggregated "
                "by voting on the candidates' tool calls",
                param=key,
            )
    for key, what in _REFUSED.items():
        if kwargs.get(key) in (None, False, [], {}):
            continue
        raise RequestError(
            f"{key!r} asks for {what}, which cannot be aggregated from candidate answers; send the request "
            f'with extra_body={{"{OPTIONS_KEY}": {{"enabled": false}}}} to call the model directly',
            param=key,
        )
    if "audio" in (kwargs.get("modalities") or []):
        raise RequestError("audio output cannot be aggregated", param="modalities")
    method_from_model, model = method_prefix(model)
    method = check_method(options.method or method_from_model)
    response_format = kwargs.get("response_format")
    check_structured_method(method, _format_type(response_format), "response_format", options.method is not None)
    choices = 1 if (n := kwargs.pop("n", None)) is None else _positive_int(n, "n")
    stream = pop_stream(kwargs)
    stream_options = kwargs.pop("stream_options", None) or {}
    if not isinstance(stream_options, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    if stream and choices > 1:
        raise RequestError("stream=True gives one aggregated answer; use n=1, or stream=False for n answers", "n")
    return Plan(
        model=model,
        messages=messages,
        question=question,
        method=method,
        n=options.n,
        min_candidates=options.min_candidates,
        choices=choices,
        stream=stream,
        include_usage=bool(stream_options.get("include_usage")),
        params=kwargs,
    )
