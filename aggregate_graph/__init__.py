"""aggregate-graph: sample several candidates in parallel with LangGraph and aggregate them.

The face, importable from `aggregate_graph`; everything else is imported from the one module it lives in.

    build_aggregate_graph, AggregateState,      the prebuilt graph, its state, and the checkpoint serializer
    checkpoint_serde                            that restores that state
    AggregateNode, AggregatingChatModel,        the same as a node of your graph, as a chat model, and as a
    AggregationMiddleware                       middleware for `create_agent`
    AggregationOptions                          how candidates are drawn and aggregated: one type, every surface
    Sampler, CandidatePolicy, AdaptiveSampling  where candidates come from, and how they are drawn
    SampleSet, Candidate, Aggregation           the data: what was asked, what came back, what was decided
    Aggregator, load_aggregator, register       the aggregators' base class, one by name, your own under a name
    wrap_openai, sample_sets_from               the same for code that calls `openai` directly
    extract_answer                              a candidate's final answer, as the votes read it
    AggregateGraphError, AggregationError,      what it raises on purpose
    QuorumError

Read top-down, the package follows one answer: question → candidates → sample set → aggregator → answer; each
folder is one step, and imports point down this list only.

    drawing/            where a question goes and how its n candidates come back: `Sampler` and its policies,
                        chat models by name, the draws (n requests or one with `n`), retries, deadlines
    reading/            what each candidate's reply says: answer types, final answers, math equivalence, and
                        the look of its work (arithmetic slips, vote classes)
    sample_set.py       the one data type: question, candidates, aggregation; errors.py the exception tree
    aggregators/        SampleSet → Aggregation, one class each, registered by name (registry.py: every surface
                        resolves names there): votes (majority, weighted and its fitting, tool calls, structured,
                        medoid, best-of-n) and model-backed ones (SSA, GSR, USC, recursive); trained.py and
                        trained/: trained aggregator folders, the shipped SSA among them
    options.py          `AggregationOptions`: the one options type every surface takes, validated once
    graph.py, state.py  the prebuilt LangGraph graph, its state and the checkpoint serializer that restores it;
    node.py             the same graph as a node of your graph
    aggregating_chat_model.py, middleware.py, streaming.py
                        the graph as a LangChain chat model and as a middleware for `create_agent`, and how
                        either streams (answer chunks, progress events)
    log.py, jsonl.py    the sample-set log, and the one JSONL reader and writer

Around it, the integrations: openai_compat/ (`wrap_openai`: chat completions and the Responses API answered with
aggregations, and `aggregate-graph proxy`, the same over HTTP), serve/ (serving a model: the HTTP toolkit every
server is built with, and serve-aggregator's two engines behind one interface, local and vLLM), local/ (a
transformers model run in this process as a chat model, the embedded SmolLM2 by default: "local" means that
everywhere, in `--model local` and `--engine local` too), cli/ (the `aggregate-graph` command, its server commands
and the offline demo), testing/ (a scripted OpenAI-compatible server). The research-data loaders (the pools in
`../shared/data`) live in `training.pools`, outside the runtime.
"""

from aggregate_graph.aggregating_chat_model import AggregatingChatModel
from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.registry import load_aggregator, register
from aggregate_graph.drawing.settings import AdaptiveSampling, CandidatePolicy, Sampler
from aggregate_graph.errors import AggregateGraphError, AggregationError, QuorumError
from aggregate_graph.graph import build_aggregate_graph
from aggregate_graph.middleware import AggregationMiddleware
from aggregate_graph.node import AggregateNode
from aggregate_graph.openai_compat.chat_output import sample_sets_from
from aggregate_graph.openai_compat.wrap import wrap_openai
from aggregate_graph.options import AggregationOptions
from aggregate_graph.reading.answers import extract_answer
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet
from aggregate_graph.state import AggregateState, checkpoint_serde

__all__ = [  # noqa: RUF022 - grouped as the table at the top, not sorted
    "build_aggregate_graph", "AggregateState", "checkpoint_serde",
    "AggregateNode", "AggregatingChatModel", "AggregationMiddleware", "AggregationOptions",
    "Sampler", "CandidatePolicy", "AdaptiveSampling",
    "SampleSet", "Candidate", "Aggregation",
    "Aggregator", "load_aggregator", "register",
    "wrap_openai", "sample_sets_from",
    "extract_answer",
    "AggregateGraphError", "AggregationError", "QuorumError",
]  # fmt: skip
