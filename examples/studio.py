"""The graphs that langgraph.json registers for LangGraph's server: `langgraph dev` and LangGraph Studio.

    pip install -U "langgraph-cli[inmem]"
    langgraph dev                 # from the repository root: Studio opens on the graphs below

- `aggregate`: the prebuilt graph (`build_aggregate_graph`): n candidates, majority vote, the sample set in state.
- `tutor`: the multi-turn math tutor of examples/math_tutor.py (greets, solves with votes, hints, checks).

Both run on the embedded SmolLM2 by default: offline, on the CPU, its weights loaded on the first run (importing
this module loads nothing). Environment variables (langgraph.json's "env", or a .env file) choose another model:

    AGGREGATE_GRAPH_STUDIO_MODEL     a model spec ("local", "openai:gpt-4o-mini"), or the served model's name
    AGGREGATE_GRAPH_STUDIO_BASE_URL  an OpenAI-compatible server (vLLM, ...); its key in OPENAI_API_KEY
    AGGREGATE_GRAPH_STUDIO_N         candidates per answer (default 3)

The graphs are compiled without a checkpointer or store: the server supplies its own (threads, memory).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# `langgraph dev` puts its working folder on sys.path; a deployment that loads this file by path may not.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from aggregate_graph import build_aggregate_graph  # noqa: E402
from examples.math_tutor import build, chat_model  # noqa: E402

MODEL = os.environ.get("AGGREGATE_GRAPH_STUDIO_MODEL", "local")
BASE_URL = os.environ.get("AGGREGATE_GRAPH_STUDIO_BASE_URL") or None
N = int(os.environ.get("AGGREGATE_GRAPH_STUDIO_N", "3"))

model = chat_model(MODEL, BASE_URL)  # one instance for both graphs: the embedded model's weights load once

aggregate = build_aggregate_graph(model, n=N, name="aggregate")
tutor = build(model, n=N, name="tutor")
