"""The public face: `aggregate_graph` exports about twenty names; every other name is imported from the one module
it lives in. 0.1.0 is unreleased, so a name that moved is gone from its old place: no shim module, no moved-name
table (a module-level `__getattr__`), and nothing in this repository imports it the old way."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import aggregate_graph
from aggregate_graph.aggregators import registry
from tests.test_docs import PAGES, read_blocks

ROOT = Path(__file__).parents[1]
FACE = {
    "build_aggregate_graph",
    "AggregateState",
    "AggregateNode",
    "AggregatingChatModel",
    "AggregationMiddleware",
    "AggregationOptions",
    "checkpoint_serde",
    "Sampler",
    "CandidatePolicy",
    "AdaptiveSampling",
    "SampleSet",
    "Candidate",
    "Aggregation",
    "Aggregator",
    "load_aggregator",
    "wrap_openai",
    "sample_sets_from",
    "extract_answer",
    "AggregateGraphError",
    "AggregationError",
    "QuorumError",
    "register",
}
# (module, name) → the module the name lives in now, for every name that moved before the first release
MOVED = {
    **{
        ("aggregate_graph", name): "aggregate_graph.aggregators"
        for name in (
            "BestOfN",
            "GSRAggregator",
            "MajorityVote",
            "Medoid",
            "RecursiveAggregator",
            "SSAAggregator",
            "SSAStyle",
            "USCAggregator",
            "WeightedVote",
        )
    },
    **{
        ("aggregate_graph", name): "aggregate_graph.reading.answers"
        for name in ("ABSTENTIONS", "equivalent", "group_equivalent", "normalize_answer", "stated_answer")
    },
    **{
        ("aggregate_graph", name): "aggregate_graph.log"
        for name in ("export_sample_sets", "log_sample_set", "read_sample_sets")
    },
    **{("aggregate_graph", name): "aggregate_graph.drawing.models" for name in ("build_pool", "load_chat_model")},
    **{
        ("aggregate_graph", name): "training.pools"
        for name in ("load_benchmark", "load_faithful_cot", "load_gpt3_solutions", "load_qwen_math", "pool_metrics")
    },
    ("aggregate_graph", "MSGPACK_TYPES"): "aggregate_graph.graph",
    ("aggregate_graph", "Usage"): "aggregate_graph.sample_set",
    ("aggregate_graph", "load_trained_aggregator"): "aggregate_graph.aggregators.trained",
    ("aggregate_graph.graph", "QuorumError"): "aggregate_graph.errors",
    ("aggregate_graph.graph", "AdaptiveSampling"): "aggregate_graph.drawing.settings",
    ("aggregate_graph.aggregators", "AggregationError"): "aggregate_graph.errors",
    ("aggregate_graph.aggregators.base", "AggregationError"): "aggregate_graph.errors",
    # modules renamed so that no two say the same (sampling / samplers, two chat_model, two errors)
    ("aggregate_graph.chat_model", "AggregatingChatModel"): "aggregate_graph.aggregating_chat_model",
    **{
        ("aggregate_graph.samplers", name): "aggregate_graph.drawing.settings"
        for name in ("AdaptiveSampling", "CandidatePolicy", "Sampler", "describe_model", "unbind")
    },
    **{
        ("aggregate_graph.openai_compat.errors", name): "aggregate_graph.openai_compat.quorum_errors"
        for name in ("QuorumAPIError", "QuorumRateLimitError", "upstream_error")
    },
    # the open registry's moves: trained folders got their own module
    **{
        ("aggregate_graph.registry", name): "aggregate_graph.aggregators.trained"
        for name in ("SHIPPED_SSA", "load_trained_aggregator", "read_trained_record", "AGGREGATOR_FILE")
    },
    ("aggregate_graph.registry", "local_model"): "aggregate_graph.drawing.models",
    ("aggregate_graph.log", "read_jsonl"): "aggregate_graph.jsonl",
    # the fixed name lists the open registry replaced
    ("aggregate_graph.registry", "AGGREGATOR_NAMES"): "aggregate_graph.aggregators.registry.aggregator_names()",
    ("aggregate_graph.registry", "MODEL_AGGREGATORS"): "aggregate_graph.aggregators.registry.registration()",
    ("aggregate_graph.openai_compat", "METHODS"): "aggregate_graph.aggregators.registry.aggregator_names()",
}
# modules moved into the subpackages that show the architecture (drawing, reading, aggregators, cli, training)
MOVED_MODULES = {
    "aggregate_graph.answers": "aggregate_graph.reading.answers",
    "aggregate_graph.answer_types": "aggregate_graph.reading.answer_types",
    "aggregate_graph.aggregators.kinds": "aggregate_graph.reading.kinds",
    "aggregate_graph.aggregators.arithmetic": "aggregate_graph.reading.arithmetic",
    "aggregate_graph.draw_settings": "aggregate_graph.drawing.settings",
    "aggregate_graph.sampling": "aggregate_graph.drawing.sampling",
    "aggregate_graph.models": "aggregate_graph.drawing.models",
    "aggregate_graph.registry": "aggregate_graph.aggregators.registry",
    "aggregate_graph.trained_folder": "aggregate_graph.aggregators.trained",
    "aggregate_graph.cli_common": "aggregate_graph.cli.common",
    "aggregate_graph.cli_serve": "aggregate_graph.cli.serve",
    "aggregate_graph.demo": "aggregate_graph.cli.demo",
    "aggregate_graph.pools": "training.pools",
    "aggregate_graph.serve.proxy": "aggregate_graph.openai_compat.proxy",
}
# Where this repository's Python lives, its pages' Python blocks aside
SOURCES = ["aggregate_graph", "tests", "examples", "benchmarks", "training"]


def test_the_face_is_the_listed_names():
    assert set(aggregate_graph.__all__) == FACE
    assert len(aggregate_graph.__all__) == len(FACE)


def test_the_face_imports_without_warnings():
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from aggregate_graph import *", namespace)
    assert namespace.keys() >= FACE


# moved names the old module itself uses, so imports from their home: there, a plain attribute of the module, not a shim
USED_THERE = {
    ("aggregate_graph.graph", "AdaptiveSampling"),
    ("aggregate_graph.graph", "QuorumError"),
    ("aggregate_graph.log", "read_jsonl"),
}
GONE = sorted(set(MOVED) - USED_THERE)


@pytest.mark.parametrize("module", sorted(MOVED_MODULES))
def test_a_moved_module_is_gone_from_its_old_place(module: str):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


@pytest.mark.parametrize(("module", "name"), GONE, ids=[f"{m}.{n}" for m, n in GONE])
def test_a_moved_name_is_gone_from_its_old_place(module: str, name: str):
    with pytest.raises(ImportError):
        exec(compile(f"from {module} import {name}", __file__, "exec"), {})


def test_no_module_hands_out_names_it_does_not_define():
    """No shim: no module of the package has a module-level `__getattr__` (a moved-name table)."""
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "aggregate_graph").rglob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    ]
    assert found == []


def test_a_name_that_never_lived_there_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        aggregate_graph.nonexistent  # noqa: B018
    with pytest.raises(ImportError):
        exec("from aggregate_graph.graph import nonexistent", {})
    namespace: dict[str, object] = {}
    exec("from aggregate_graph import cli", namespace)  # a submodule still falls through to the import system
    assert namespace["cli"] is importlib.import_module("aggregate_graph.cli")


def test_importing_the_package_loads_no_research_data_loader():
    """The research-data loaders (pools) are not imported with the package."""
    code = "import sys, aggregate_graph; print(sorted(m for m in sys.modules if m.startswith('training')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"


def _imports(source: str, where: str) -> list[tuple[str, str, str]]:
    """(where, module, name) of each absolute `from … import name` in `source`."""
    tree = ast.parse(source, where)
    return [
        (f"{where}:{node.lineno}", node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        for alias in node.names
    ]


def test_nothing_in_the_repository_imports_a_moved_name_the_old_way():
    found = [
        item
        for folder in SOURCES
        for path in sorted((ROOT / folder).rglob("*.py"))
        for item in _imports(path.read_text(), str(path.relative_to(ROOT)))
    ]
    for page in PAGES:
        for block in read_blocks(page):
            if block.lang == "python":
                found += _imports(block.code, block.where)
    assert [
        f"{where}: from {module} import {name}"
        for where, module, name in found
        if (module, name) in MOVED or module in MOVED_MODULES
    ] == []


def _examples(doc: str) -> list[str]:
    """The ```python blocks of a docstring's Example section, dedented."""
    _, _, example = doc.partition("Example:")
    return [textwrap.dedent(block) for block in re.findall(r"```python\n(.*?)```", example, re.S)]


@pytest.mark.parametrize(
    "name", [n for n in aggregate_graph.__all__ if inspect.isfunction(getattr(aggregate_graph, n))]
)
def test_each_public_function_says_its_args_and_returns_and_its_example_runs(name: str, monkeypatch) -> None:
    doc = inspect.getdoc(getattr(aggregate_graph, name)) or ""
    assert "Args:" in doc and "Returns:" in doc, f"{name}'s docstring needs Args: and Returns: sections"
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))  # an example's registration stays there
    for block in _examples(doc):
        exec(compile(block, f"<{name} example>", "exec"), {})
