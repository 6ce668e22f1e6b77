"""Voting on what the candidates chose to do: call tools — each distinct plan is one choice — or answer now.

Two candidates agree on a plan when they call the same tools with equal arguments. Arguments compare as
canonical JSON, and the calls of a plan as a set: the tool node runs them all, whatever their order. A
structured-output request made through tool calling is voted on the same way, i.e. on the parsed object.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from aggregate_graph.aggregators.base import plurality
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet

ANSWER_NOW = "answer now"


def canonical_json(value: Any) -> str:
    """One spelling per JSON value: keys sorted, no spaces, so equal objects compare equal as strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def tool_plan(tool_calls: Sequence[dict[str, Any]]) -> str:
    """The plan's vote key: the set of (tool, arguments) it calls, call ids ignored."""
    calls = sorted(canonical_json({"name": c.get("name"), "args": c.get("args") or {}}) for c in tool_calls)
    return "[" + ",".join(calls) + "]"


def _choice(candidate: Candidate) -> str | None:
    if candidate.tool_calls:
        return tool_plan(candidate.tool_calls)
    return ANSWER_NOW if candidate.text.strip() else None  # an empty reply chose nothing


def tool_choices(sample_set: SampleSet) -> dict[str, list[Candidate]]:
    """The candidates of each choice: a tool plan (`tool_plan`), or `ANSWER_NOW`."""
    choices: dict[str, list[Candidate]] = {}
    for candidate in sample_set.succeeded:
        if (key := _choice(candidate)) is not None:
            choices.setdefault(key, []).append(candidate)
    return choices


def vote_tool_calls(sample_set: SampleSet) -> tuple[Aggregation | None, dict[str, float]]:
    """The winning tool plan's aggregation (None when answering now won, or no candidate called a tool) and
    the votes of every choice ({} when no candidate called a tool). A tie goes to the choice whose
    candidates landed first, as in `MajorityVote` (`plurality`)."""
    started = time.perf_counter()
    choices = tool_choices(sample_set)
    if all(key == ANSWER_NOW for key in choices):
        return None, {}
    votes, tied = plurality(choices)
    if tied[0] == ANSWER_NOW:
        return None, votes
    winners = choices[tied[0]]
    return (
        Aggregation(
            method="tool_call_vote",
            answer=None,
            text=winners[0].text,
            tool_calls=winners[0].tool_calls,
            votes=votes,
            support=[c.index for c in winners],
            tie=tied if len(tied) > 1 else None,
            latency_s=time.perf_counter() - started,
        ),
        votes,
    )


def answering(sample_set: SampleSet) -> SampleSet:
    """The sample set without the candidates that called tools: what an answer aggregator reads once
    answering now has won the vote."""
    if not any(c.tool_calls for c in sample_set.candidates):
        return sample_set
    return sample_set.model_copy(update={"candidates": [c for c in sample_set.candidates if not c.tool_calls]})
