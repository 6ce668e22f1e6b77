"""LangChain's standard integration tests (`langchain-tests`' `ChatModelIntegrationTests`) for the chat models.

`AggregatingChatModel` draws its candidates from the real `ChatOpenAI` client against the project's real HTTP
server (`OpenAITestServer`), whose replies (`standard_reply`) answer each request from what it asks, as a model
would: plain text, tool calls with arguments for the tool's schema, JSON for a `response_format`. The same
request gets the same reply, so the n candidates agree and the vote (on the text, the tool-call plan or the
parsed JSON) is decided by all of them. Plain `ChatOpenAI` on the same server runs the same suite first, as the
baseline that shows the server answers every standard request as a real model does. `LocalChatModel` runs the
embedded SmolLM2-135M on CPU (marked `slow`, like the other tests of the real model).

Declared capabilities are the true ones: what a class does not declare, the suite skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langchain_tests.integration_tests import ChatModelIntegrationTests
from pydantic import BaseModel, Field

from aggregate_graph import AggregatingChatModel
from aggregate_graph.local import LocalChatModel
from aggregate_graph.testing import OpenAITestServer
from aggregate_graph.testing.standard_replies import standard_reply

MODEL = "test-model"


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAITestServer]:
    """One real server for the module's suites, answering like a model (`standard_reply`)."""
    with OpenAITestServer(standard_reply, model=MODEL) as started:
        yield started


def _chat_openai(server: OpenAITestServer) -> ChatOpenAI:
    # stream_usage: the usage chunk OpenAI sends on request (stream_options.include_usage); ChatOpenAI asks for
    # it by default only from api.openai.com.
    return ChatOpenAI(base_url=server.base_url, api_key="test", model=MODEL, max_retries=0, stream_usage=True)


class _OnServer:
    """Makes the module's server known to `chat_model_params` (a property, which cannot take fixtures)."""

    server: OpenAITestServer

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _server(cls, server: OpenAITestServer) -> None:
        cls.server = server


class TestChatOpenAIOnTestServer(_OnServer, ChatModelIntegrationTests):
    """The baseline: the real OpenAI client on the test server passes the whole suite."""

    @property
    def chat_model_class(self) -> type[ChatOpenAI]:
        return ChatOpenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"base_url": self.server.base_url, "api_key": "test", "model": MODEL, "stream_usage": True}

    @property
    def supports_json_mode(self) -> bool:
        return True  # the server answers `response_format` json_object with a JSON object

    @property
    def model_override_value(self) -> str:
        return "test-model-override"  # the server answers under the model a request names


class TestAggregatingChatModelStandard(_OnServer, ChatModelIntegrationTests):
    """n = 3 candidates from ChatOpenAI on the test server, majority vote. Tool calling, `tool_choice` and
    structured output (through tool calling) are declared by the class itself (`bind_tools` with `tool_choice`).
    JSON mode is not: `with_structured_output` is LangChain's default, which ignores `method`, so
    `method="json_mode"` would run as tool calling (JSON output is voted on when `response_format` is bound)."""

    @property
    def chat_model_class(self) -> type[AggregatingChatModel]:
        return AggregatingChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": _chat_openai(self.server), "n": 3}

    @property
    def model_override_value(self) -> str:
        return "test-model-override"  # a call's `model` option is bound to the candidates' requests


@pytest.mark.slow
class TestLocalChatModelStandard(ChatModelIntegrationTests):
    """The embedded SmolLM2-135M: text in, text out (no tools), usage on invoke and on the last streamed chunk."""

    smollm2_dir: Path

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _weights(cls, smollm2_dir: Path) -> None:
        cls.smollm2_dir = smollm2_dir

    @property
    def chat_model_class(self) -> type[LocalChatModel]:
        return LocalChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        # a few tokens per reply keep the suite short; seeded, so each run decodes the same replies
        return {"model_path": str(self.smollm2_dir), "max_new_tokens": 24, "seed": 0, "dtype": "float32"}

    @property
    def supports_model_override(self) -> bool:
        return False  # one embedded model: a per-call `model` option is refused


class Joke(BaseModel):
    """Joke to tell user."""

    setup: str = Field(description="question to set up a joke")
    punchline: str = Field(description="answer to resolve the joke")


@tool
def get_weather(location: str) -> str:
    """Get the weather at a location."""
    return "It's sunny."


def test_the_candidates_agree_so_each_vote_is_decided_by_all(server: OpenAITestServer) -> None:
    """The suite's requests are decided by a vote of all three candidates: the tool-call plan, the structured
    output through tool calling, the JSON of a `response_format`, and a stated answer in text."""
    model = AggregatingChatModel(_chat_openai(server), n=3)
    calls = [
        (model.bind_tools([get_weather]), "What is the weather in San Francisco, CA?", "tool_call_vote"),
        (model.bind_tools([Joke], tool_choice="Joke"), "Tell me a joke about cats.", "tool_call_vote"),
        (
            model.bind(response_format={"type": "json_object"}),
            "Return JSON with 'setup' and 'punchline'.",
            "structured_vote",
        ),
        (model, "What is 3 + 4", "majority"),
    ]
    for runnable, prompt, method in calls:
        aggregation = runnable.invoke(prompt).response_metadata["sample_set"]["aggregation"]
        assert aggregation["support"] == [0, 1, 2], (prompt, aggregation)
        assert aggregation["method"] == method
        assert list(aggregation["votes"].values()) == [3.0]
