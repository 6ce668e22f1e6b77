"""aggregate-graph: sample several candidates in parallel with LangGraph and aggregate them.

The face, importable from `aggregate_graph`; everything else is imported from the one module it lives in.

    build_aggregate_graph, AggregateState,      the prebuilt graph, its state, and the checkpoint serializer
    checkpoint_serde                            that restores that state
    AggregateNode, AggregatingChatModel,        the same as a node of your graph, as a chat model, and as a
    AggregationMiddleware                       middleware for `create_agent`
    Sampler, CandidatePolicy, AdaptiveSampling  where candidates come from, and how they are drawn
    SampleSet, Candidate, Aggregation           the data: what was asked, what came back, what was decided
    Aggregator, load_aggregator, register       the aggregators' base class, one by name, your own under a name
    wrap_openai, sample_sets_from               the same for code that calls `openai` directly
    extract_answer                              a candidate's final answer, as the votes read it
    AggregateGraphError, AggregationError,      what it raises on purpose
    QuorumError

Read top-down, the package follows one answer: question → candidates → sample set → aggregator → answer.

    models.py, draw_settings.py the chat model(s) a question goes to and their settings, and how candidates are
    sampling.py, n_support.py,  drawn (n requests, retries, deadlines, what each endpoint does with `n`, the
    retries.py, replies.py      `Reply` a candidate is built from)
    answers.py, answer_prose.py a candidate's final answer: extraction, abstentions, math equivalence
    sample_set.py               the one data type: question, candidates, aggregation
    aggregators/                SampleSet → Aggregation, one class each, declaring its registry name and how it is
                                built from options (`from_options`): votes (majority, weighted, tool calls,
                                structured, medoid, best-of-n) and model-backed ones (SSA, GSR, USC, recursive)
    registry.py                 the open registry every surface resolves an aggregator name through:
                                `register(name, factory)`, `load_aggregator`; trained_folder.py and trained/:
                                trained aggregators, the shipped SSA among them
    graph.py                    the prebuilt LangGraph graph that runs all of that; errors.py the exceptions
    node.py,                    the graph as a node for your graph, as a chat model, and as a middleware for
    aggregating_chat_model.py,  `create_agent`
    middleware.py

Around it, the integrations: openai_compat/ (`wrap_openai`: chat completions and the Responses API answered with
aggregations), serve/ (the one serving layer: the HTTP toolkit every server is built with, the OpenAI-compatible
proxy, and serve-aggregator's two engines behind one interface, engines.py: local, a model in this process, and
vLLM, in its own environment), local/ (a transformers model run in this process as a chat model, the embedded
SmolLM2 by default: "local" means that everywhere, in `--model local` and `--engine local` too), log.py (the
sample-set log; jsonl.py the one JSONL reader and writer), pools.py (the real sample pools, research data not
shipped with the package), cli.py, cli_serve.py and demo.py (the `aggregate-graph` command — `ask` there, its server
commands `serve-aggregator` and `proxy` in cli_serve.py — and the offline demo over the sample sets in data/;
cli_common.py: what the commands share with `aggregate-train`), testing/ (a scripted OpenAI-compatible server: chat
completions and the Responses API).
"""

from aggregate_graph.aggregating_chat_model import AggregatingChatModel
from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.answers import extract_answer
from aggregate_graph.draw_settings import AdaptiveSampling, CandidatePolicy, Sampler
from aggregate_graph.errors import AggregateGraphError, AggregationError, QuorumError
from aggregate_graph.graph import AggregateState, build_aggregate_graph, checkpoint_serde
from aggregate_graph.middleware import AggregationMiddleware
from aggregate_graph.node import AggregateNode
from aggregate_graph.openai_compat.chat_output import sample_sets_from
from aggregate_graph.openai_compat.wrap import wrap_openai
from aggregate_graph.registry import load_aggregator, register
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet

__all__ = [  # noqa: RUF022 - grouped as the table at the top, not sorted
    "build_aggregate_graph", "AggregateState", "checkpoint_serde",
    "AggregateNode", "AggregatingChatModel", "AggregationMiddleware",
    "Sampler", "CandidatePolicy", "AdaptiveSampling",
    "SampleSet", "Candidate", "Aggregation",
    "Aggregator", "load_aggregator", "register",
    "wrap_openai", "sample_sets_from",
    "extract_answer",
    "AggregateGraphError", "AggregationError", "QuorumError",
]  # fmt: skip
