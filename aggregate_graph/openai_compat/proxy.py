"""Deprecated: the proxy moved to `aggregate_graph.serve.proxy`; this path is removed in the next release."""

import warnings

from aggregate_graph.serve.proxy import (
    MAX_SAMPLES_PER_REQUEST,
    UPSTREAM_CHECK_S,
    Proxy,
    ProxyConfig,
    RequestSlots,
    Scrubber,
    UpstreamClients,
    create_proxy_app,
    proxy_banner,
    proxy_error,
    serve_proxy,
    upstream_problem,
)

warnings.warn(
    "aggregate_graph.openai_compat.proxy moved to aggregate_graph.serve.proxy; the old path is removed in the next "
    "release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "MAX_SAMPLES_PER_REQUEST",
    "UPSTREAM_CHECK_S",
    "Proxy",
    "ProxyConfig",
    "RequestSlots",
    "Scrubber",
    "UpstreamClients",
    "create_proxy_app",
    "proxy_banner",
    "proxy_error",
    "serve_proxy",
    "upstream_problem",
]
