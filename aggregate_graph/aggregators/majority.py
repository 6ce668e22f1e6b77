"""Majority (plurality) vote over mathematically equivalent final answers."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from langchain_core.runnables import RunnableConfig

from aggregate_graph.aggregators.base import Aggregator, plurality, stays_first, tie_keys, tie_time
from aggregate_graph.aggregators.registry import register
from aggregate_graph.errors import AggregationError
from aggregate_graph.reading.answers import group_equivalent, groups_at_once, normalize_answer
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet

Weights = Mapping[str, float] | Callable[[Candidate], float]


def is_voter(candidate: Candidate) -> bool:
    """Whether a candidate takes part in a vote: it succeeded and stated an answer (an abstention has none)."""
    return candidate.ok and candidate.answer is not None and candidate.abstention is None


def abstentions_of(sample_set: SampleSet) -> dict[str, str]:
    """The abstaining candidates of a set: index (as a string) → reason, e.g. `{"3": "unknown"}`."""
    return {str(c.index): c.abstention for c in sample_set.candidates if c.ok and c.abstention is not None}


def wins_every_tie(choices: Mapping[str, list[Candidate]], landed: set[int], outstanding: int) -> bool:
    """One vote per candidate: whether the leading choice stays the winner whatever the `outstanding` candidates
    answer, counting the ties it would win. A tie goes to the choice whose candidates landed first, then to the
    lowest index (`tie_keys`): an outstanding candidate lands no earlier than the latest landed (`Settling`
    stamps landings in order), at an index not `landed` (the lowest free one at least), so a challenger the
    outstanding votes bring level loses the tie when the leader's place comes before both the challenger's and
    theirs."""
    votes, tied = plurality(choices)
    leader = tied[0]
    runner_up = max((v for key, v in votes.items() if key != leader), default=0.0)  # or a new answer's 0
    if runner_up + outstanding > votes[leader]:  # passed outright, whatever the ties: no need to place them
        return False
    keys = tie_keys(choices)
    challengers = [(votes[key], keys[key]) for key in choices if key != leader]
    if outstanding:
        voters = [c for members in choices.values() for c in members]
        lowest_out = next(i for i in range(len(landed) + 1) if i not in landed)
        theirs = (max(map(tie_time(voters), voters)), lowest_out)  # the earliest place an outstanding one can take
        challengers = [(count, min(key, theirs)) for count, key in challengers] + [(0.0, theirs)]  # a new answer too
    return all(
        count + outstanding < votes[leader] or (count + outstanding == votes[leader] and keys[leader] < key)
        for count, key in challengers
    )


@register
class MajorityVote(Aggregator):
    """The answer most candidates agree on, equivalence decided by `answers.group_equivalent`.

    `weights` scales each candidate's vote: a mapping from model name to weight, or a function of the
    candidate. A tie goes to the class with the earliest landing among its members (`Candidate.landed_at`, on a
    set the graph drew) or, on a set without landing times, the lowest candidate index (the order of the request,
    so reruns agree); the tied answers are reported in `Aggregation.tie`.
    Candidates that failed, stated no extractable answer or abstained ("The answer is unknown.": `answer` None,
    the reason in `Candidate.abstention`) do not vote; `details["abstentions"]` maps each abstainer's index (a
    string, as in JSON) to its reason.
    """

    name = "majority"  # the name every surface selects it by (load_aggregator, wrap_openai, the CLI)
    runs_chat_model = False
    votes_on_json = True  # a plain vote: on structured output, the vote of the parsed JSON values

    @classmethod
    def from_options(cls) -> MajorityVote:
        """By name it takes no options: a vote weighted by its sources is `weighted`."""
        return cls()

    def __init__(self, weights: Weights | None = None) -> None:
        self.weights = weights

    def _weight(self, candidate: Candidate) -> float:
        if self.weights is None:
            return 1.0
        if callable(self.weights):
            return float(self.weights(candidate))
        return float(self.weights.get(candidate.model, 1.0))

    def largest_weight(self) -> float | None:
        """The most one candidate's vote can weigh (None: unbounded, a function of the candidate)."""
        if self.weights is None:
            return 1.0
        if callable(self.weights):
            return None
        return max([1.0, *map(float, self.weights.values())])  # a model not in the mapping weighs 1

    def _choices(self, voters: list[Candidate]) -> dict[str, list[Candidate]]:
        classes = [[voters[i] for i in cls] for cls in group_equivalent([c.answer for c in voters])]
        # equivalent answers share a class, and equal normal forms are equivalent: the keys are distinct
        return {normalize_answer(cls[0].answer) or "": cls for cls in classes}

    def settled(self, sample_set: SampleSet, outstanding: int) -> bool:
        """Settled once the leading answer's votes exceed the runner-up's by more than the outstanding candidates
        could carry (each at most `largest_weight`): waiting for them cannot change the answer. Unweighted, it is
        also settled where they could at most bring a challenger level with the leader and the tie would go to the
        leader (`wins_every_tie`)."""
        voters = [c for c in sample_set.candidates if is_voter(c)]
        if not voters or (largest := self.largest_weight()) is None:
            return False
        choices = self._choices(voters)
        votes = {key: sum(self._weight(c) for c in members) for key, members in choices.items()}
        if stays_first(votes, outstanding * largest):
            return True
        landed = {c.index for c in sample_set.candidates}
        return self.weights is None and wins_every_tie(choices, landed, outstanding)

    async def aaggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        """On the event loop where the vote takes microseconds (`groups_at_once`: less than the ~0.2 ms a thread
        costs), else in a thread: comparing numbers and expressions by value may take sympy and math-verify
        seconds on first sight, and a weight function is the caller's own code."""
        answers = [c.answer for c in sample_set.candidates if is_voter(c)]
        if not callable(self.weights) and groups_at_once(answers):
            return self.aggregate(sample_set, config)
        return await super().aaggregate(sample_set, config)

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started = time.perf_counter()
        voters = [c for c in sample_set.candidates if is_voter(c)]
        abstentions = abstentions_of(sample_set)
        if not voters:
            failed = len(sample_set.failed)
            why = (
                f", {len(abstentions)} abstained: {', '.join(sorted(set(abstentions.values())))}" if abstentions else ""
            )
            raise AggregationError(
                f"no candidate stated an extractable final answer ({len(sample_set.candidates)} drawn, "
                f"{failed} failed{why}); nothing to vote on",
                sample_set,
            )
        choices = self._choices(voters)
        votes, tied = plurality(choices, self._weight)
        winner = choices[tied[0]][0]
        return Aggregation(
            method=self.name,
            answer=normalize_answer(winner.answer),
            text=winner.text,
            votes=votes,
            support=[c.index for c in choices[tied[0]]],
            tie=tied if len(tied) > 1 else None,
            latency_s=time.perf_counter() - started,
            details={
                "voters": len(voters),
                "abstained": len(sample_set.candidates) - len(voters),
                "abstentions": abstentions,
            },
        )
