from aggregate_graph.aggregators.base import AggregationError, Aggregator
from aggregate_graph.aggregators.majority import MajorityVote

__all__ = ["AggregationError", "Aggregator", "MajorityVote"]
