"""A LangChain chat model over an `openai` client's own `responses.create`: how `wrap_openai` and the proxy draw
the candidates of a Responses API call (and ask a model-backed aggregator), one upstream call per candidate —
the Responses API has no `n`, so this model declares none and the graph sends parallel single calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import InvalidToolCall, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult

from aggregate_graph.drawing.replies import Reply, ReplyChoice
from aggregate_graph.openai_compat.client_model import ClientChatModel, read_tool_calls
from aggregate_graph.sample_set import Usage


class ResponseFailed(RuntimeError):
    """An upstream Response that came back with status "failed": the candidate failed, with the API's error."""


def _input(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as Responses input messages (an aggregator's prompt: system and user text)."""
    return [{"role": m["role"], "content": m.get("content") or ""} for m in convert_to_openai_messages(messages)]


def _tool_calls(response: Any) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """The `function_call` items as LangChain tool calls, id'd by their `call_id` (which the caller's
    `function_call_output` answers). Built-in tools ran on the server; a custom tool's input is free-form."""
    return read_tool_calls(
        {"id": item.call_id, "function": {"name": item.name, "arguments": item.arguments}}
        for item in response.output
        if item.type == "function_call"
    )


def _finish_reason(response: Any, has_calls: bool) -> str:
    """A Response's end in chat-completions terms, which the sample set records."""
    if has_calls:
        return "tool_calls"
    details = response.incomplete_details
    if response.status == "incomplete" and details is not None:
        return "length" if details.reason == "max_output_tokens" else str(details.reason)
    return "stop"


def _checked(response: Any) -> Any:
    if response.status == "failed":
        error = response.error
        raise ResponseFailed(f"{error.code}: {error.message}" if error is not None else "the response failed")
    return response


def _usage(response: Any) -> Usage | None:
    usage = response.usage
    return Usage.of(usage.input_tokens, usage.output_tokens) if usage is not None else None


class OpenAIResponsesChatModel(ClientChatModel):
    """Calls `create` (an unwrapped `client.responses.create`, sync or async) with `model`, the input items
    (`messages` when set, else the converted messages) and `request` (instructions, tools, text, reasoning, …);
    see `ClientChatModel`. A response's output text is the message's content and its `function_call` items its
    tool calls."""

    @property
    def _llm_type(self) -> str:
        return "openai-responses-client"

    def _body(self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.pop("stream", None)
        if stop:
            raise ValueError("the Responses API has no stop sequences")
        call = self._call()
        sent = call.messages if call.messages is not None else _input(messages)
        return {**call.request, **kwargs, "model": call.model, "input": sent}

    def _result(self, response: Any) -> ChatResult:
        response = _checked(response)
        calls, invalid = _tool_calls(response)
        finish = _finish_reason(response, bool(calls))
        usage = _usage(response)
        message = AIMessage(
            content=response.output_text,
            tool_calls=calls,
            invalid_tool_calls=invalid,
            response_metadata={"finish_reason": finish, "model_name": response.model},
            id=response.id,
            usage_metadata=UsageMetadata(
                input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens, total_tokens=usage.total_tokens
            )
            if usage is not None
            else None,
        )
        llm_output = {"token_usage": usage.model_dump() if usage is not None else None, "model_name": response.model}
        generation = ChatGeneration(message=message, generation_info={"finish_reason": finish})
        return ChatResult(generations=[generation], llm_output=llm_output)

    def _reply(self, response: Any) -> Reply:
        response = _checked(response)
        calls = [dict(call) for call in _tool_calls(response)[0]]
        choice = ReplyChoice(response.output_text, calls, response.model, _finish_reason(response, bool(calls)))
        return Reply([choice], _usage(response))
