from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from langchain_openai import ChatOpenAI

from aggregate_graph.testing import OpenAITestServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2, converted once per test session into a temporary cache."""
    from aggregate_graph.local import smollm2_path

    return smollm2_path(tmp_path_factory.mktemp("aggregate_graph_cache"))


@pytest.fixture(autouse=True)
def _forget_earlier_servers() -> None:
    """A test may get an earlier test's server port: what endpoints did with `n` is remembered per process, and
    ChatOpenAI keeps one async HTTP client per base URL whose pooled connections belong to the event loop that
    opened them (a closed one by now)."""
    from langchain_openai.chat_models import _client_utils

    from aggregate_graph.drawing.n_support import forget

    forget()
    _client_utils._cached_async_httpx_client.cache_clear()


@pytest.fixture
def restored_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For a CLI's main() run in-process: it quiets the libraries through os.environ and the warnings filters
    (both come back after the test), and AGGREGATE_GRAPH_DEBUG must not leak in from the caller's shell."""
    monkeypatch.delenv("AGGREGATE_GRAPH_DEBUG", raising=False)
    with patch.dict(os.environ), warnings.catch_warnings():
        yield


@pytest.fixture
def serve() -> Iterator[Callable[..., OpenAITestServer]]:
    """Start real OpenAI-compatible servers on 127.0.0.1; all are stopped at the end of the test."""
    started: list[OpenAITestServer] = []

    def start(*args: Any, **kwargs: Any) -> OpenAITestServer:
        server = OpenAITestServer(*args, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def chat(server: OpenAITestServer, model: str = "test-model", **kwargs: Any) -> ChatOpenAI:
    """The real LangChain OpenAI client against a test server; retries are the graph's, not the client's."""
    return ChatOpenAI(base_url=server.base_url, api_key="test-key", model=model, max_retries=0, **kwargs)


def joined_by_message(streamed: list[tuple[Any, dict[str, Any]]]) -> list[tuple[str, str]]:
    """`stream_mode="messages"` output as (text, node) per message: the chunks of one message joined."""
    joined: dict[str, list[Any]] = {}
    for chunk, meta in streamed:
        joined.setdefault(chunk.id, ["", meta["langgraph_node"]])[0] += chunk.text
    return [(text, node) for text, node in joined.values()]
