"""aggregate-graph: sample several candidates in parallel with LangGraph and aggregate them.

Read top-down, the package follows one answer: question → candidates → sample set → aggregator → answer.

    models.py, samplers.py,     the chat model(s) a question goes to and their settings, and how candidates are
    sampling.py, n_support.py,  drawn (n requests, retries, deadlines, what each endpoint does with `n`, the
    retries.py, replies.py      `Reply` a candidate is built from)
    answers.py                  a candidate's final answer: extraction, abstentions, math equivalence
    sample_set.py               the one data type: question, candidates, aggregation
    aggregators/                SampleSet → Aggregation: votes (majority, weighted, tool calls, structured,
                                medoid) and model-backed ones (SSA, GSR, USC, recursive)
    graph.py                    the prebuilt LangGraph graph that runs all of that; errors.py its exceptions
    node.py, chat_model.py,     the graph as a node for your graph, as a chat model, and as a middleware for
    middleware.py               `create_agent`

Around it, the integrations: openai_compat/ (`wrap_openai` and the proxy, for chat completions and the Responses
API), serve/ (serving an aggregator model: vLLM, or the local CPU engine), local/ (the embedded SmolLM2),
registry.py and trained/ (named and trained aggregators), pools.py (the real sample pools), log.py (the sample-set
log), cli.py and demo.py (the `aggregate-graph` command and the offline demo; cli_common.py: what it shares with
`aggregate-train`: one-line errors, `--debug`, `--version`), testing/ (a scripted OpenAI-compatible server: chat
completions and the Responses API).
"""

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from aggregate_graph.aggregators import (
    AggregationError,
    Aggregator,
    BestOfN,
    GSRAggregator,
    MajorityVote,
    Medoid,
    RecursiveAggregator,
    SSAAggregator,
    SSAStyle,
    USCAggregator,
    WeightedVote,
)
from aggregate_graph.answers import (
    ABSTENTIONS,
    equivalent,
    extract_answer,
    group_equivalent,
    normalize_answer,
    stated_answer,
)
from aggregate_graph.chat_model import AggregatingChatModel
from aggregate_graph.errors import AggregateGraphError
from aggregate_graph.graph import MSGPACK_TYPES, AggregateState, QuorumError, build_aggregate_graph
from aggregate_graph.log import export_sample_sets, log_sample_set, read_sample_sets
from aggregate_graph.middleware import AggregationMiddleware
from aggregate_graph.models import build_pool, load_chat_model
from aggregate_graph.node import AggregateNode
from aggregate_graph.openai_compat import sample_sets_from, wrap_openai
from aggregate_graph.pools import load_benchmark, load_faithful_cot, load_gpt3_solutions, load_qwen_math, pool_metrics
from aggregate_graph.registry import load_aggregator, load_trained_aggregator
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet, Usage
from aggregate_graph.samplers import AdaptiveSampling, CandidatePolicy, Sampler


def checkpoint_serde(*extra: tuple[str, ...]) -> JsonPlusSerializer:
    """A checkpoint serializer that restores this package's state types (plus `extra` ones) without warnings,
    also under LANGGRAPH_STRICT_MSGPACK: `InMemorySaver(serde=checkpoint_serde())`."""
    return JsonPlusSerializer(allowed_msgpack_modules=[*MSGPACK_TYPES, *extra])


__all__ = [
    "ABSTENTIONS",
    "MSGPACK_TYPES",
    "AdaptiveSampling",
    "AggregateGraphError",
    "AggregateNode",
    "AggregateState",
    "AggregatingChatModel",
    "Aggregation",
    "AggregationError",
    "AggregationMiddleware",
    "Aggregator",
    "BestOfN",
    "Candidate",
    "CandidatePolicy",
    "GSRAggregator",
    "MajorityVote",
    "Medoid",
    "QuorumError",
    "RecursiveAggregator",
    "SSAAggregator",
    "SSAStyle",
    "SampleSet",
    "Sampler",
    "USCAggregator",
    "Usage",
    "WeightedVote",
    "build_aggregate_graph",
    "build_pool",
    "checkpoint_serde",
    "equivalent",
    "export_sample_sets",
    "extract_answer",
    "group_equivalent",
    "load_aggregator",
    "load_benchmark",
    "load_chat_model",
    "load_faithful_cot",
    "load_gpt3_solutions",
    "load_qwen_math",
    "load_trained_aggregator",
    "log_sample_set",
    "normalize_answer",
    "pool_metrics",
    "read_sample_sets",
    "sample_sets_from",
    "stated_answer",
    "wrap_openai",
]
