"""Test helpers that speak real protocols: an OpenAI-compatible HTTP server with scripted replies and faults,
and any ASGI app served on 127.0.0.1 from a background thread."""

from aggregate_graph.testing.openai_server import OpenAITestServer, tool_calls_reply
from aggregate_graph.testing.threaded import ThreadedServer, running

__all__ = ["OpenAITestServer", "ThreadedServer", "running", "tool_calls_reply"]
