"""End to end with the real embedded SmolLM2-135M-Instruct: the prebuilt graph and the CLI, offline.

SmolLM2-135M is far too weak to be judged on correctness; these tests check that real generations flow through
sampling, extraction, voting and the CLI, with `n` served by one multi-sequence generation.
"""

import subprocess
import sys

import pytest
from langchain_core.messages import HumanMessage

from aggregate_graph import AggregationError, SampleSet, build_aggregate_graph
from aggregate_graph.local import LocalChatModel

pytestmark = pytest.mark.slow
QUESTION = "What is 2 + 3? Reply with just the number."


def test_prebuilt_graph_on_the_embedded_model(smollm2_dir):
    model = LocalChatModel(model_path=str(smollm2_dir), max_new_tokens=24, seed=0)
    graph = build_aggregate_graph(model, n=3)
    try:
        s: SampleSet = graph.invoke({"messages": [HumanMessage(QUESTION)]})["sample_set"]
    except AggregationError as exc:  # the tiny model may state no number at all: the error must say so
        assert "no candidate stated an extractable final answer" in str(exc)
        s = exc.sample_set
    assert [c.index for c in s.candidates] == [0, 1, 2] and all(c.ok and c.text for c in s.candidates)
    assert {c.model for c in s.candidates} == {smollm2_dir.name}  # a model folder is named by its folder
    assert len({c.request_id for c in s.candidates}) == 1  # n=3 served by one generation
    usage = s.candidates[0].usage
    assert usage.prompt_tokens > 5 and usage.completion_tokens == pytest.approx(
        sum(c.usage.completion_tokens for c in s.candidates) / 3
    )


def test_cli_ask_with_the_embedded_model(smollm2_dir):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aggregate_graph.cli",
            "ask",
            QUESTION,
            "--n",
            "2",
            "--max-tokens",
            "16",
            "--model",
            f"local:{smollm2_dir}",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "[2/2] candidate" in done.stderr
    if done.returncode == 0:
        assert "Final answer:" in done.stdout and smollm2_dir.name in done.stdout
    else:
        assert done.returncode == 1 and "no candidate stated an extractable final answer" in done.stderr
