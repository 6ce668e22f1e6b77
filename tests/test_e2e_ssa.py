"""End to end: candidates from an OpenAI-compatible server, SSAAggregator backed by the local engine serving the
real SmolLM2 over HTTP (what vLLM serves in production), in the prebuilt graph.

The untrained SmolLM2 does not write the `<answer>` format, so greedy decoding here takes the flagged-fallback
path; the parsed path over the same protocol is covered in test_aggregators.py, and with a trained model by the
training pipeline's test.
"""

import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from aggregate_graph import build_aggregate_graph
from aggregate_graph.aggregators import SSAAggregator
from aggregate_graph.serve.local import create_app
from aggregate_graph.testing import running
from tests.conftest import chat

pytestmark = pytest.mark.slow


def test_graph_with_ssa_on_the_local_engine(serve, smollm2_dir):
    candidates = serve(["6 * 7 = 42.\n#### 42", "6 + 7 = 13.\n#### 13", "Six sevens: \\boxed{42}"])
    with running(create_app(smollm2_dir)) as url:
        aggregator_model = ChatOpenAI(
            base_url=url, api_key="unused", model="aggregator", max_tokens=24, temperature=0, max_retries=0
        )
        graph = build_aggregate_graph(chat(candidates), n=3, aggregator=SSAAggregator(aggregator_model, k=3))
        out = graph.invoke({"messages": [HumanMessage("What is 6 times 7?")]})
    agg = out["sample_set"].aggregation
    assert agg.method == "ssa" and agg.details["candidates_shown"] == [0, 1, 2]
    assert agg.details["raw_output"].strip() and agg.usage.prompt_tokens > 100 and agg.usage.completion_tokens > 0
    if agg.details["parse_status"] == "parsed":
        assert agg.answer is not None and "fallback" not in agg.details
    else:  # flagged, never silent: the majority's answer, and the record says why
        assert agg.details["fallback"] == "majority" and agg.answer == "42" and agg.votes == {"42": 2.0, "13": 1.0}
    assert (
        out["messages"][-1].response_metadata["sample_set"]["aggregation"]["details"]["parse_status"]
        == (agg.details["parse_status"])
    )
