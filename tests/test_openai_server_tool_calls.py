"""OpenAITestServer's scripted tool calls, through the real openai client and LangChain's ChatOpenAI."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from openai import OpenAI

from aggregate_graph.testing import tool_calls_reply
from tests.conftest import chat
from tests.test_openai_tools import streamed_answer

QUESTION = [{"role": "user", "content": "What is 6 times 7?"}]
MULTIPLY = tool_calls_reply(("multiply", {"a": 6, "b": 7}))


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def client(server: Any) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)


def test_openai_client_gets_tool_calls_on_every_one_of_n_choices(serve) -> None:
    server = serve([MULTIPLY])
    response = client(server).chat.completions.create(model="test-model", messages=QUESTION, n=3)
    assert len(response.choices) == 3
    for choice in response.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        [call] = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "multiply" and json.loads(call.function.arguments) == {"a": 6, "b": 7}
    assert len({c.message.tool_calls[0].id for c in response.choices}) == 3
    assert response.usage.completion_tokens > 0


def test_text_and_tool_call_replies_mix_and_string_arguments_pass_verbatim(serve) -> None:
    server = serve(["Plain text.", tool_calls_reply(("lookup", '{"q": "x"}'), ("multiply", {"a": 1}), content="Hmm")])
    response = client(server).chat.completions.create(model="test-model", messages=QUESTION, n=2)
    text, calls = response.choices
    assert (text.message.content, text.message.tool_calls, text.finish_reason) == ("Plain text.", None, "stop")
    assert calls.message.content == "Hmm" and calls.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in calls.message.tool_calls] == [
        ("lookup", '{"q": "x"}'),
        ("multiply", '{"a": 1}'),
    ]


def test_chat_openai_bind_tools_parses_the_tool_call(serve) -> None:
    server = serve([MULTIPLY])
    message = chat(server).bind_tools([multiply]).invoke("What is 6 times 7?")
    assert isinstance(message, AIMessage)
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("multiply", {"a": 6, "b": 7})]
    assert message.tool_calls[0]["id"].startswith("call_")
    [sent_tool] = server.requests[-1]["tools"]
    assert sent_tool["function"]["name"] == "multiply"


def test_reply_function_answers_once_the_tool_result_is_in_the_conversation(serve) -> None:
    def replies(body: dict[str, Any], sample_no: int) -> Any:
        if any(m["role"] == "tool" for m in body["messages"]):
            return "The answer is 42."
        return MULTIPLY

    server = serve(replies)
    model = chat(server).bind_tools([multiply])
    messages: list[Any] = [HumanMessage("What is 6 times 7?")]
    first = model.invoke(messages)
    [call] = first.tool_calls
    messages += [first, ToolMessage(str(multiply.invoke(call["args"])), tool_call_id=call["id"])]
    final = model.invoke(messages)
    assert final.content == "The answer is 42." and not final.tool_calls
    sent = server.requests[-1]["messages"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "multiply"
    assert sent[2] == {"role": "tool", "content": "42", "tool_call_id": call["id"]}
    assert server.calls == 2


def test_streaming_assembles_the_content_and_tool_call(serve) -> None:
    server = serve([tool_calls_reply(("multiply", {"a": 6, "b": 7}), content="Let me multiply.")])
    stream = client(server).chat.completions.create(
        model="test-model", messages=QUESTION, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usage = next(chunk.usage for chunk in reversed(chunks) if chunk.usage)
    content, calls, finish = streamed_answer(chunks)
    assert content == "Let me multiply." and finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [("multiply", {"a": 6, "b": 7})]
    assert calls[0]["id"].startswith("call_")
    assert usage.completion_tokens == 3 + 4  # three words of content, four of '{"a": 6, "b": 7}'


def test_chat_openai_streams_the_tool_call(serve) -> None:
    server = serve([MULTIPLY])
    chunks = list(chat(server, streaming=True).bind_tools([multiply]).stream("What is 6 times 7?"))
    message = chunks[0]
    for chunk in chunks[1:]:
        message += chunk
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("multiply", {"a": 6, "b": 7})]
    assert server.requests[-1]["stream"] is True
