"""The serving layer: every OpenAI-compatible HTTP server of this package, and what they share.

    http.py              the toolkit each server is built with: OpenAI-shaped errors, the bearer-key check, the
                         body read under a size limit, server-sent events, loopback-only without a key
    proxy.py             `aggregate-graph proxy`: chat completions and Responses API calls answered with
                         aggregations of an upstream's candidates (`wrap_openai` behind a shared server's limits)
    proxy_wire.py        what the proxy reads and streams on the wire
    engines.py           the interface of the engines that serve a model (`aggregate-graph serve-aggregator`):
                         each declares its name, the flags only it takes and its `serve(...) -> int`; `ENGINES`
    local.py             the local engine: `LocalChatModel` in this process, on the CPU (the `serve` extra)
    vllm.py              the vLLM engine: builds, starts and supervises vLLM's OpenAI server from its own environment

This module holds the constants and the model-folder rule they share, and imports none of them: the command line
reads the engines' flags without importing fastapi, uvicorn or torch, and each server loads only its own needs.
The test server (`aggregate_graph.testing`) is built with the same toolkit.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_SERVED_NAME = "aggregator"
SMOLLM2 = "smollm2"
"""The model folder argument that means the embedded SmolLM2-135M-Instruct."""
DEFAULT_MAX_BODY_BYTES = 1_000_000
"""The request body every server here takes by default (a chat request is a few kB; a long prompt, a few hundred);
larger ones get 413."""


def resolve_model_dir(model_dir: str | Path) -> Path:
    """`model_dir` as a folder; the word `smollm2` is the embedded model, converted on first use."""
    if str(model_dir) == SMOLLM2:
        from aggregate_graph.local import smollm2_path

        return smollm2_path()
    return Path(model_dir)


__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_SERVED_NAME", "SMOLLM2", "resolve_model_dir"]
