"""Serving an aggregator model over the OpenAI chat-completions API (`aggregate-graph serve-aggregator`).

Two engines: `aggregate_graph.serve.vllm` builds and runs the `vllm serve` command (GPU; vLLM lives in its
own environment), and `aggregate_graph.serve.local` is a CPU server over `LocalChatModel` (needs the `serve`
extra). This module holds what both share and imports neither, so each engine loads only its own needs.
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
