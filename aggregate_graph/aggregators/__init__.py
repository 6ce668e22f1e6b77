from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.best_of_n import BestOfN, score_from_params
from aggregate_graph.aggregators.choice import SSAChoiceAggregator, render_choice_prompt
from aggregate_graph.aggregators.fitting import fit_weighted_vote
from aggregate_graph.aggregators.gsr import GSRAggregator, parse_gsr_output, render_gsr_prompt
from aggregate_graph.aggregators.llm import LLMAggregator
from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.medoid import Medoid
from aggregate_graph.aggregators.recursive import RecursiveAggregator
from aggregate_graph.aggregators.ssa import SSAAggregator, SSAStyle, parse_ssa_output, render_ssa_prompt
from aggregate_graph.aggregators.structured import StructuredVote
from aggregate_graph.aggregators.tool_calls import canonical_json, tool_plan, vote_tool_calls
from aggregate_graph.aggregators.usc import USCAggregator, parse_usc_choice, render_usc_prompt
from aggregate_graph.aggregators.weighted import WeightedVote, source_of

__all__ = [
    "Aggregator",
    "BestOfN",
    "GSRAggregator",
    "LLMAggregator",
    "MajorityVote",
    "Medoid",
    "RecursiveAggregator",
    "SSAAggregator",
    "SSAChoiceAggregator",
    "SSAStyle",
    "StructuredVote",
    "USCAggregator",
    "WeightedVote",
    "canonical_json",
    "fit_weighted_vote",
    "parse_gsr_output",
    "parse_ssa_output",
    "parse_usc_choice",
    "render_choice_prompt",
    "render_gsr_prompt",
    "render_ssa_prompt",
    "render_usc_prompt",
    "score_from_params",
    "source_of",
    "tool_plan",
    "vote_tool_calls",
]
