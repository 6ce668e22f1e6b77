"""`standard_reply`: answers read off the request (its tools' schemas, its response format, the user's last turn)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aggregate_graph.testing.standard_replies import standard_reply


def _tool(name: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }
    return {"type": "function", "function": {"name": name, "description": name, "parameters": schema}}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _call(reply: Any) -> tuple[str, dict[str, Any]]:
    assert isinstance(reply, dict), reply
    (call,) = reply["tool_calls"]
    return call["name"], call["arguments"]


MAGIC = _tool("magic_function", {"input": {"type": "integer", "exclusiveMinimum": -1000, "exclusiveMaximum": 1000}})
WEATHER = _tool("get_weather", {"location": {"type": "string"}})
ADDER = _tool("my_adder_tool", {"a": {"type": "integer"}, "b": {"type": "integer"}})
CUSTOMER = _tool("unicode_customer", {"customer_name": {"type": "string"}, "description": {"type": "string"}})


@pytest.mark.parametrize(
    ("prompt", "tools", "choice", "expected"),
    [
        ("What is the value of magic_function(3)? Use the tool.", [MAGIC], None, ("magic_function", {"input": 3})),
        (
            "What is the weather in San Francisco, CA?",
            [MAGIC, WEATHER],
            None,
            ("get_weather", {"location": "San Francisco, CA"}),
        ),
        ("What is 3 + 4", [ADDER], "required", ("my_adder_tool", {"a": 3, "b": 4})),
        ("Hello!", [MAGIC, WEATHER], "required", ("magic_function", {"input": 0})),
        (
            "Hello!",
            [MAGIC, WEATHER],
            {"type": "function", "function": {"name": "get_weather"}},
            ("get_weather", {"location": "Location"}),
        ),
        (
            "Create a customer named '你好啊集团' (Hello Group) - a Chinese technology company",
            [CUSTOMER],
            "required",
            ("unicode_customer", {"customer_name": "你好啊集团", "description": "a Chinese technology company"}),
        ),
    ],
)
def test_a_tool_is_called_with_arguments_from_the_request(
    prompt: str, tools: list[dict[str, Any]], choice: Any, expected: tuple[str, dict[str, Any]]
) -> None:
    body: dict[str, Any] = {"messages": _user(prompt), "tools": tools}
    if choice is not None:
        body["tool_choice"] = choice
    assert _call(standard_reply(body)) == expected


def test_text_when_no_tool_is_asked_for_and_after_a_tool_result() -> None:
    assert standard_reply({"messages": _user("Hello"), "tools": [ADDER]}) == "Hello! How can I help you today?"
    history = [
        *_user("What is 1 + 2"),
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "my_adder_tool"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"result": 3})},
    ]
    assert standard_reply({"messages": history, "tools": [ADDER]}) == "The result is 3."
    history[-1]["content"] = "Error: Missing required argument 'b'."
    assert standard_reply({"messages": history}) == "my_adder_tool returned: Error: Missing required argument 'b'."


def test_json_for_a_schema_or_for_the_keys_a_prompt_names() -> None:
    schema = {
        "type": "object",
        "properties": {
            "setup": {"type": "string", "description": "question to set up a joke"},
            "punchline": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "answer to resolve the joke"},
        },
        "required": ["setup", "punchline"],
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "Joke", "schema": schema}}
    joke = json.loads(
        standard_reply({"messages": _user("Tell me a joke about cats."), "response_format": response_format})
    )
    assert joke == {
        "setup": "Question to set up a joke about cats",
        "punchline": "Answer to resolve the joke about cats",
    }
    setup_only = standard_reply(
        {"messages": _user("The setup to a joke, no punchline."), "response_format": response_format}
    )
    assert json.loads(setup_only)["punchline"] is None
    prompt = "Tell me a joke about dogs. Return a JSON with 'setup' and 'punchline' keys."
    assert json.loads(standard_reply({"messages": _user(prompt), "response_format": {"type": "json_object"}})) == {
        "setup": "Setup about dogs",
        "punchline": "Punchline about dogs",
    }


def test_stop_cuts_the_text_and_the_same_request_gets_the_same_reply() -> None:
    assert standard_reply({"messages": _user("hi"), "stop": ["you"]}) == "Hello! How can I help "
    assert (
        standard_reply({"messages": _user("What is 6 * 7?")}, 0)
        == standard_reply({"messages": _user("What is 6 * 7?")}, 1)
        == "6 * 7 = 42."
    )
