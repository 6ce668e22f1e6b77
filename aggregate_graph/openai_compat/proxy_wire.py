"""Deprecated: the proxy's wire format moved to `aggregate_graph.serve.proxy_wire`; this path is removed in the next
release."""

import warnings

from aggregate_graph.serve.proxy_wire import check_prompt_size, create_arguments, sse_events, stream_response

warnings.warn(
    "aggregate_graph.openai_compat.proxy_wire moved to aggregate_graph.serve.proxy_wire; the old path is removed in "
    "the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["check_prompt_size", "create_arguments", "sse_events", "stream_response"]
