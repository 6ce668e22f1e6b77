"""Responses API output, as JSON: a `Response` object's output items and envelope, and the standard server-sent
events that stream one (`response.created` … `response.completed`). The aggregated Responses of `wrap_openai` and
the proxy are built here from a sample set, and the test server builds its scripted ones with the same functions,
so both speak the one wire format the `openai` client and the OpenAI Agents SDK parse.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from openai._models import construct_type
from openai.types.responses import Response, ResponseStreamEvent

from aggregate_graph.openai_compat.chat_output import SAMPLE_SETS_FIELD, finish_reason
from aggregate_graph.openai_compat.request import Plan
from aggregate_graph.sample_set import SampleSet, Usage

# Request fields a Response echoes back, with the API's defaults where a request leaves them out.
_ECHOED: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "reasoning": None,
    "temperature": None,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": None,
    "truncation": "disabled",
}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(text: str) -> dict[str, Any]:
    """An assistant message output item holding `text`."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed", "content": [part]}


def function_call_item(name: str, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    """A `function_call` output item (`arguments` is the JSON text the model wrote)."""
    return {
        "type": "function_call",
        "id": new_id("fc"),
        "call_id": call_id or f"call_{uuid.uuid4().hex[:24]}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def response_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_json(
    request: dict[str, Any], model: str, output: list[dict[str, Any]], usage: Usage, *, cut_off: bool = False
) -> dict[str, Any]:
    """A completed Response (or an incomplete one, `cut_off` by `max_output_tokens`) answering `request`."""
    echoed = {key: request.get(key) if request.get(key) is not None else default for key, default in _ECHOED.items()}
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "incomplete" if cut_off else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut_off else None,
        "error": None,
        "output": output,
        "usage": response_usage(usage),
        **echoed,
    }


def _pieces(text: str) -> list[str]:
    """Text deltas as a model streams them: a word (with its leading space) at a time; joined, they are `text`."""
    pieces = re.findall(r"\s*\S+", text)
    if not pieces:
        return [text] if text else []
    pieces[-1] += text[len(text.rstrip()) :]
    return pieces


def stream_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The standard events that stream `response` (JSON), each with its `sequence_number`: created, in progress,
    each output item added / its text or arguments in deltas / done, then completed (or incomplete)."""
    number = 0

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal number
        number += 1
        return {"type": kind, "sequence_number": number - 1, **fields}

    opening = {k: v for k, v in response.items() if k != SAMPLE_SETS_FIELD}  # the closing event carries them
    opening.update(status="in_progress", output=[], usage=None, incomplete_details=None)
    yield event("response.created", response=opening)
    yield event("response.in_progress", response=opening)
    for index, item in enumerate(response["output"]):
        where = {"item_id": item.get("id"), "output_index": index}
        if item["type"] == "message":
            yield event(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            for part_index, part in enumerate(item["content"]):
                at = {**where, "content_index": part_index}
                yield event("response.content_part.added", **at, part={**part, "text": ""})
                for piece in _pieces(part.get("text", "")):
                    yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
                yield event("response.output_text.done", **at, text=part.get("text", ""), logprobs=[])
                yield event("response.content_part.done", **at, part=part)
        elif item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            yield event("response.function_call_arguments.delta", **where, delta=item["arguments"])
            yield event(
                "response.function_call_arguments.done", **where, arguments=item["arguments"], name=item["name"]
            )
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event(f"response.{'incomplete' if response['status'] == 'incomplete' else 'completed'}", response=response)


def aggregated_response(plan: Plan, sample_set: SampleSet) -> Response:
    """The Response for an aggregated Responses call: the answer's text as a message, the voted tool plan as
    `function_call` items (each with the call id its candidate's server gave), every candidate's and the
    aggregator's usage summed, and the sample set in an extra `sample_sets` field (`sample_sets_from`)."""
    aggregation = sample_set.aggregation
    output = [message_item(aggregation.text)] if aggregation.text or not aggregation.tool_calls else []
    for call in aggregation.tool_calls:
        arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
        output.append(function_call_item(call["name"], arguments, call.get("id")))
    payload = response_json(
        plan.params, plan.model, output, sample_set.usage, cut_off=finish_reason(sample_set) == "length"
    )
    # built as the openai client builds what a server sends (not validated): the echoed request fields may hold
    # values newer than this openai's types, which the upstream accepted
    return construct_type(type_=Response, value={**payload, SAMPLE_SETS_FIELD: [sample_set.model_dump(mode="json")]})


def typed_events(response: Response) -> list[Any]:
    """`stream_events` of a typed Response, as the typed events the `openai` client yields; the sample sets ride
    on the closing event's response, as on the Response itself."""
    payload = response.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return [construct_type(type_=ResponseStreamEvent, value=event) for event in stream_events(payload)]
