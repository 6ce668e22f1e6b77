"""Voting on structured output: a JSON-mode or JSON-schema request is answered by the object most candidates
returned. Two candidates agree when their content parses to equal JSON values (compared as canonical JSON, so
key order and spacing do not matter); a candidate whose content is not JSON does not vote."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from langchain_core.runnables import RunnableConfig

from aggregate_graph.aggregators.base import Aggregator, plurality, stays_first
from aggregate_graph.aggregators.registry import register
from aggregate_graph.aggregators.tool_calls import canonical_json
from aggregate_graph.errors import AggregationError
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet

_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n\s*```$", re.DOTALL | re.IGNORECASE)
_NOT_JSON = object()


def parse_json_content(text: str) -> Any:
    """The JSON value a candidate's content holds (a ```json fence around it allowed), or `_NOT_JSON`."""
    text = text.strip()
    if fenced := _FENCE.match(text):
        text = fenced.group(1).strip()
    if not text:
        return _NOT_JSON
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


@register
class StructuredVote(Aggregator):
    """The JSON value most candidates returned, by exact equality of the parsed values. A tie goes to the value
    whose candidates landed first (as in `MajorityVote`: `plurality`). The aggregation's `text` is the content of
    the value's first candidate as it was written, and `answer` the value's canonical JSON. Raises `AggregationError`
    when no candidate's content parses as JSON."""

    name = "structured_vote"
    runs_chat_model = False
    votes_on_json = True

    @staticmethod
    def _choices(sample_set: SampleSet) -> dict[str, list[Candidate]]:
        choices: dict[str, list[Candidate]] = {}
        for candidate in sample_set.succeeded:
            if (value := parse_json_content(candidate.text)) is not _NOT_JSON:
                choices.setdefault(canonical_json(value), []).append(candidate)
        return choices

    def settled(self, sample_set: SampleSet, outstanding: int) -> bool:
        """Settled once the leading value's votes exceed the runner-up's by more than the outstanding candidates."""
        return stays_first({key: len(members) for key, members in self._choices(sample_set).items()}, outstanding)

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started = time.perf_counter()
        choices = self._choices(sample_set)
        if not choices:
            raise AggregationError(
                f"no candidate's content parses as JSON ({len(sample_set.candidates)} drawn, "
                f"{len(sample_set.failed)} failed); nothing to vote on",
                sample_set,
            )
        votes, tied = plurality(choices)
        winners = choices[tied[0]]
        voters = sum(len(members) for members in choices.values())
        return Aggregation(
            method=self.name,
            answer=tied[0],
            text=winners[0].text,
            votes=votes,
            support=[c.index for c in winners],
            tie=tied if len(tied) > 1 else None,
            latency_s=time.perf_counter() - started,
            details={"voters": voters, "abstained": len(sample_set.candidates) - voters},
        )
