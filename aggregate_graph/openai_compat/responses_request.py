"""Reading a Responses API request (`responses.create`, `POST /v1/responses`) as an aggregation plan.

The Responses API has no `n`: each candidate is one upstream Responses call carrying the caller's `instructions`,
`input` items (messages, `function_call`, `function_call_output`, …), `tools`, `text.format`, `reasoning`,
`max_output_tokens` and the rest unchanged. What cannot be aggregated is refused with a 400 naming the fix, never
dropped: server-side state (`previous_response_id`, `conversation`, `store: true`, `background`) — the aggregated
response is made here and stored nowhere upstream — and token log-probabilities.
"""

from __future__ import annotations

from typing import Any

from aggregate_graph.openai_compat.request import (
    OPTIONS_KEY,
    Plan,
    RequestAggregation,
    RequestError,
    as_dict,
    check_method,
    check_structured_method,
    last_user_text,
    method_prefix,
    pop_stream,
)

_OFF = f'extra_body={{"{OPTIONS_KEY}": {{"enabled": false}}}}'
# Server-side state the aggregated response cannot take part in: (field, why, what to do instead)
_STATEFUL = {
    "previous_response_id": "an aggregated response is made from several upstream responses and stored nowhere, so "
    "there is no previous response to continue; send the whole conversation in `input` (the output items of the "
    "last response, then the new turn)",
    "conversation": "an aggregated response cannot be added to a stored conversation; send the whole conversation "
    "in `input`",
    "store": "an aggregated response is not stored (it could not be retrieved or continued); send store=false or "
    "leave it out",
    "background": "an aggregated response is answered in the request, not run in the background; leave background out",
}
_LOGPROBS_INCLUDE = "message.output_text.logprobs"
# Tools whose calls can be aggregated: function calls are voted on (as plans); the built-in tools run on the
# server within each candidate call, whose answer text is what is voted on. Any other tool (custom, computer,
# shell, apply_patch, local_shell, MCP approvals, image generation) answers with items for the caller to act on,
# which no vote here covers: refused rather than dropped from the answer.
AGGREGATED_TOOLS = ("function", "web_search", "web_search_preview", "file_search", "code_interpreter")


def _refuse_stateful(kwargs: dict[str, Any]) -> None:
    for key, why in _STATEFUL.items():
        value = kwargs.get(key)
        if value in (None, False, "", {}):
            continue
        raise RequestError(f"{key!r} cannot be aggregated: {why}", param=key)


def _refuse_logprobs(kwargs: dict[str, Any]) -> None:
    if kwargs.get("top_logprobs") or _LOGPROBS_INCLUDE in (kwargs.get("include") or []):
        param = "top_logprobs" if kwargs.get("top_logprobs") else "include"
        raise RequestError(
            f"{param!r} asks for log-probabilities, which cannot be aggregated from candidate answers; send the "
            f"request with {_OFF} to call the model directly",
            param=param,
        )


def _refuse_unvoted_tools(kwargs: dict[str, Any]) -> None:
    tools = kwargs.get("tools") or []
    for tool in tools if isinstance(tools, list | tuple) else []:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind not in AGGREGATED_TOOLS:
            raise RequestError(
                f"tools: a {kind!r} tool's calls cannot be aggregated (function calls are voted on, and the "
                f"built-in {', '.join(AGGREGATED_TOOLS[1:])} tools run within each candidate); send the request "
                f"with {_OFF} to call the model directly",
                param="tools",
            )


def plan_responses_request(options: RequestAggregation, kwargs: dict[str, Any]) -> Plan:
    """The plan for an aggregated Responses call (`kwargs` without our options), or a RequestError saying what
    cannot be aggregated. The plan's `messages` are the caller's input items (a string input is one user
    message) and its `params` every other option, sent to each candidate call as they are."""
    kwargs = dict(kwargs)
    model = kwargs.pop("model", None)
    if not isinstance(model, str) or not model:
        raise RequestError("model is required", param="model")
    if "n" in kwargs or "n" in (kwargs.get("extra_body") or {}):
        raise RequestError(
            f"the Responses API has no 'n'; the number of candidates is set with "
            f'extra_body={{"{OPTIONS_KEY}": {{"n": ...}}}} (each is its own upstream call)',
            param="n",
        )
    raw = kwargs.pop("input", None)
    if isinstance(raw, str) and raw.strip():
        items: list[dict[str, Any]] = [{"role": "user", "content": raw}]
    elif isinstance(raw, list | tuple) and raw:
        items = [as_dict(item) for item in raw]
        if not all(isinstance(item, dict) for item in items):
            raise RequestError("input: each item must be an object", param="input")
    else:
        raise RequestError("input must be a non-empty string or list of items", param="input")
    _refuse_stateful(kwargs)
    _refuse_logprobs(kwargs)
    _refuse_unvoted_tools(kwargs)
    question = last_user_text(items, param="input")
    method_from_model, model = method_prefix(model)
    method = check_method(options.method or method_from_model)
    text = kwargs.get("text")
    if text is not None and not isinstance(text, dict):
        raise RequestError("text must be an object", param="text")
    format_type = ((text or {}).get("format") or {}).get("type")
    check_structured_method(method, format_type, "text.format", options.method is not None)
    stream = pop_stream(kwargs)
    kwargs.pop("stream_options", None)  # obfuscation padding of one upstream stream: nothing to pass on
    return Plan(
        model=model,
        messages=items,
        question=question,
        method=method,
        n=options.n,
        min_candidates=options.min_candidates,
        choices=1,
        stream=stream,
        include_usage=False,
        params=kwargs,
        api="responses",
    )
