"""aggregate-graph: sample several candidates in parallel with LangGraph and aggregate them."""

from aggregate_graph.aggregators import AggregationError, Aggregator, MajorityVote
from aggregate_graph.answers import equivalent, extract_answer, group_equivalent, normalize_answer
from aggregate_graph.graph import AdaptiveSampling, AggregateState, QuorumError, build_aggregate_graph
from aggregate_graph.log import export_sample_sets, log_sample_set, read_sample_sets
from aggregate_graph.models import build_pool, load_chat_model
from aggregate_graph.node import AggregateNode
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet, Usage
from aggregate_graph.sampling import CandidatePolicy, Sampler

# For checkpointers in strict mode (LANGGRAPH_STRICT_MSGPACK=true):
# JsonPlusSerializer(allowed_msgpack_modules=MSGPACK_TYPES) lets them restore this package's state.
MSGPACK_TYPES = [
    ("aggregate_graph.sample_set", name) for name in ("Aggregation", "Candidate", "SampleSet", "Usage")
] + [("aggregate_graph.sampling", "Draw")]

__all__ = [
    "MSGPACK_TYPES",
    "AdaptiveSampling",
    "AggregateNode",
    "AggregateState",
    "Aggregation",
    "AggregationError",
    "Aggregator",
    "Candidate",
    "CandidatePolicy",
    "MajorityVote",
    "QuorumError",
    "SampleSet",
    "Sampler",
    "Usage",
    "build_aggregate_graph",
    "build_pool",
    "equivalent",
    "export_sample_sets",
    "extract_answer",
    "group_equivalent",
    "load_chat_model",
    "log_sample_set",
    "normalize_answer",
    "read_sample_sets",
]
