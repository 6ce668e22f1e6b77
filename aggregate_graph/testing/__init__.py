"""Test helpers that speak real protocols: an OpenAI-compatible HTTP server with scripted replies and faults."""

from aggregate_graph.testing.openai_server import OpenAITestServer

__all__ = ["OpenAITestServer"]
