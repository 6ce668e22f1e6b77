"""LangChain's standard unit tests (`langchain-tests`' `ChatModelUnitTests`) for the chat models: construction
with the standard parameters, `bind_tools` and `with_structured_output` where declared, the tracing parameters.
Nothing here sends a request or loads weights."""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI
from langchain_tests.unit_tests import ChatModelUnitTests

from aggregate_graph import AggregatingChatModel
from aggregate_graph.local import LocalChatModel


class TestAggregatingChatModelUnit(ChatModelUnitTests):
    """Tool calling, `tool_choice` and structured output are declared by the class itself (its `bind_tools` takes
    `tool_choice`; `with_structured_output` goes through it)."""

    @property
    def chat_model_class(self) -> type[AggregatingChatModel]:
        return AggregatingChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        # a candidate client that is never called: no server needed
        return {"model": ChatOpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", model="test-model"), "n": 3}


class TestLocalChatModelUnit(ChatModelUnitTests):
    """The embedded SmolLM2: text only (no `bind_tools`, hence no structured output); weights load on first use."""

    @property
    def chat_model_class(self) -> type[LocalChatModel]:
        return LocalChatModel

    @property
    def supports_model_override(self) -> bool:
        return False  # one embedded model: a per-call `model` option is refused
