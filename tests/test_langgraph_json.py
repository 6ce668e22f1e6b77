"""langgraph.json: each registered graph loads the way `langgraph dev` loads it (the file by path, under a
module name of its own), is a graph the server accepts (compiled, no checkpointer or store of its own), has
input and output schemas with `messages` for Studio's forms, and runs with the persistence the server adds.
None of this runs the embedded model: it must load lazily, and the runs here go to a scripted server."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.pregel import Pregel
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from aggregate_graph import SampleSet, checkpoint_serde
from examples import math_tutor

ROOT = Path(__file__).parents[1]
CONFIG = json.loads((ROOT / "langgraph.json").read_text())
STUDIO_ENV = ("AGGREGATE_GRAPH_STUDIO_MODEL", "AGGREGATE_GRAPH_STUDIO_BASE_URL", "AGGREGATE_GRAPH_STUDIO_N")


def load(graph_id: str) -> tuple[Any, Any]:
    """As langgraph-api's `_graph_from_spec`: import "path.py:attr" from its file, then call it if it is a factory.
    Returns the module and the graph."""
    path, _, attr = CONFIG["graphs"][graph_id].rpartition(":")
    modname = path.replace("/", "__").replace(".py", "").replace(" ", "_").lstrip(".")
    spec = importlib.util.spec_from_file_location(modname, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    spec.loader.exec_module(module)
    graph = module.__dict__[attr]
    if callable(graph) and not isinstance(graph, Pregel):
        graph = graph({"configurable": {}})
    return module, graph


def load_graph(graph_id: str) -> Any:
    return load(graph_id)[1]


def scripted(body: dict[str, Any], sample_no: int) -> str:
    """The tutor's solver says 12 for 15% of 80 and 42 for 7 times 6."""
    question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return "The answer is 12." if "15%" in question else "7 * 6 = 42.\nThe answer is 42."


@pytest.fixture
def studio_env(monkeypatch):
    for name in STUDIO_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_config_names_the_package_and_both_graphs():
    assert CONFIG["dependencies"] == ["."]
    assert set(CONFIG["graphs"]) == {"aggregate", "tutor"}
    for target in CONFIG["graphs"].values():
        path, _, attr = target.rpartition(":")
        assert path.startswith("./") and (ROOT / path).is_file() and attr.isidentifier()


@pytest.mark.parametrize("graph_id", ["aggregate", "tutor"])
def test_each_graph_loads_as_the_server_loads_it(graph_id, studio_env):
    graph = load_graph(graph_id)
    assert isinstance(graph, Pregel)
    # `langgraph dev` refuses a graph compiled with its own checkpointer or store: the server supplies them
    assert not isinstance(graph.checkpointer, BaseCheckpointSaver) and not isinstance(graph.store, BaseStore)
    assert graph.name == graph_id
    for schema in (graph.get_input_jsonschema(), graph.get_output_jsonschema()):
        assert "messages" in schema["properties"]
        json.dumps(schema)  # Studio receives it as JSON


@pytest.mark.parametrize("graph_id", ["aggregate", "tutor"])
def test_graphs_default_to_the_embedded_model_loaded_lazily(graph_id, studio_env):
    from aggregate_graph.local import LocalChatModel

    module, _ = load(graph_id)
    assert isinstance(module.model, LocalChatModel) and module.model.max_new_tokens == 96
    assert module.model._model is None  # weights load on the first run, not at import


def test_the_tutor_input_form_asks_for_messages_only(studio_env):
    assert list(load_graph("tutor").get_input_jsonschema()["properties"]) == ["messages"]


def test_registered_graphs_run_with_the_servers_persistence(serve, studio_env):
    """With AGGREGATE_GRAPH_STUDIO_BASE_URL the graphs use a served model; the server adds a checkpointer."""
    server = serve(scripted)
    studio_env.setenv("AGGREGATE_GRAPH_STUDIO_BASE_URL", server.base_url)
    studio_env.setenv("AGGREGATE_GRAPH_STUDIO_MODEL", "test-model")
    persistence = {"checkpointer": InMemorySaver(serde=checkpoint_serde()), "store": InMemoryStore()}
    tutor = load_graph("tutor").copy(update=persistence)  # what the server does with a registered graph
    config = {"configurable": {"thread_id": "t1"}}
    tutor.invoke({"messages": [HumanMessage("What is 15% of 80?")]}, config)
    out = tutor.invoke({"messages": [HumanMessage("Is it 12?")]}, config)
    assert out["messages"][0].content == "What is 15% of 80?"  # the thread was kept
    assert out["messages"][-1].content.startswith("Yes, 12 is right!")
    assert server.requests[0]["messages"][0]["content"] == math_tutor.SOLVE_PROMPT

    aggregate = load_graph("aggregate").copy(update=persistence)
    out = aggregate.invoke({"messages": [HumanMessage("What is 7 times 6?")]}, {"configurable": {"thread_id": "a"}})
    assert SampleSet.model_validate(out["sample_set"]).aggregation.answer == "42" and server.requests[-1]["n"] == 3


def test_the_module_loads_from_anywhere_without_loading_the_model(tmp_path):
    """A fresh interpreter outside the repository, with no PYTHONPATH (a deployment loading the file by path):
    both graphs load, and neither torch nor the model weights are touched."""
    script = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("examples__studio", {str(ROOT / "examples" / "studio.py")!r})
module = importlib.util.module_from_spec(spec)
sys.modules["examples__studio"] = module
spec.loader.exec_module(module)
print(json.dumps({{"graphs": [module.aggregate.name, module.tutor.name], "torch": "torch" in sys.modules}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and k not in STUDIO_ENV}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"graphs": ["aggregate", "tutor"], "torch": False}
