"""The OpenAI surface: `wrap_openai` patches an `openai` client to answer with aggregations, and the proxy
(`aggregate-graph proxy`) serves the same over the OpenAI HTTP API."""

from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from aggregate_graph.openai_compat.errors import QuorumAPIError
from aggregate_graph.openai_compat.request import METHODS, AggregationOptions, RequestError
from aggregate_graph.openai_compat.responses import sample_sets_from
from aggregate_graph.openai_compat.wrap import wrap_openai

__all__ = [
    "METHODS",
    "AggregationOptions",
    "OpenAIClientChatModel",
    "QuorumAPIError",
    "RequestError",
    "sample_sets_from",
    "wrap_openai",
]
