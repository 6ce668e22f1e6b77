"""Aggregators are LangChain Runnables from a SampleSet to an Aggregation, so any of them (majority vote,
prompted or trained models) drops into the graph, or is called on a logged sample set, the same way."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import run_in_executor

from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet

__all__ = ["Aggregator", "plurality", "stays_first", "tie_keys", "tie_time"]


class Aggregator(Runnable[SampleSet, Aggregation], ABC):
    """Base class: implement `aggregate` (and `aaggregate` when there is real async work)."""

    name: str | None = None
    votes_on_json: ClassVar[bool] = False  # chosen by name for structured output, which StructuredVote decides
    # whether deciding may run a chat model whose tokens a streamed call shows (`reasoning_content`): a streamed call
    # of an aggregator that runs none reads no chat model events, so that its candidate requests stay unobserved
    # and can go straight to the client (`RepliesDirectly`), streamed and closed once settled (`stream_candidates`)
    runs_chat_model: ClassVar[bool] = True

    @abstractmethod
    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation: ...

    async def aaggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        return await run_in_executor(config, self.aggregate, sample_set, config)

    def settled(self, sample_set: SampleSet, outstanding: int) -> bool:
        """Whether `outstanding` more candidates, however they answer, can no longer change what this aggregator
        decides on `sample_set` (the candidates landed so far): then the graph cancels their requests and decides
        now (`AggregationOptions.settle`). False by default: an aggregator that reads every candidate waits for all.

        Args:
            sample_set: the candidates landed so far, their answers read.
            outstanding: how many candidates are still out.
        """
        return False

    def invoke(self, input: SampleSet, config: RunnableConfig | None = None, **kwargs: Any) -> Aggregation:
        return self._call_with_config(self._checked(self.aggregate), input, config, **kwargs)

    async def ainvoke(self, input: SampleSet, config: RunnableConfig | None = None, **kwargs: Any) -> Aggregation:
        return await self._acall_with_config(self._checked_async(self.aaggregate), input, config, **kwargs)

    @staticmethod
    def _checked(fn: Any) -> Any:
        def call(sample_set: SampleSet, config: RunnableConfig) -> Aggregation:
            return fn(_as_sample_set(sample_set), config)

        return call

    @staticmethod
    def _checked_async(fn: Any) -> Any:
        async def call(sample_set: SampleSet, config: RunnableConfig) -> Aggregation:
            return await fn(_as_sample_set(sample_set), config)

        return call


def _as_sample_set(value: Any) -> SampleSet:
    if isinstance(value, SampleSet):
        return value
    if isinstance(value, dict):
        return SampleSet.model_validate(value)
    raise TypeError(f"aggregators take a SampleSet (or its dict form), got {type(value).__name__}")


def stays_first(votes: Mapping[str, float], outstanding: float) -> bool:
    """Whether the leading choice of `votes` stays first (alone, so no tie-break is needed) whatever choice
    `outstanding` more votes go to, a new one included: its lead over the runner-up is more than they carry."""
    if not votes:
        return False
    first, second, *_ = [*sorted(votes.values(), reverse=True), 0.0]
    return first - second > outstanding + 1e-9


def plurality(
    choices: Mapping[str, Sequence[Candidate]], weight: Callable[[Candidate], float] = lambda _: 1.0
) -> tuple[dict[str, float], list[str]]:
    """The votes of each choice (its candidates' summed weights) and the choices tied for first, the winner
    first: a tie goes to the choice whose candidates landed first (`tie_keys`). Every vote in this package —
    answers, tool plans, JSON objects — is decided here."""
    votes = {key: float(sum(weight(c) for c in members)) for key, members in choices.items()}
    best = max(votes.values())
    tied = [key for key, v in votes.items() if math.isclose(v, best)]
    if len(tied) > 1:
        tied.sort(key=tie_keys(choices).__getitem__)
    return votes, tied


def tie_keys(choices: Mapping[str, Sequence[Candidate]]) -> dict[str, tuple[float, int]]:
    """Each choice's place in a tie, the lowest first: the earliest landing among its candidates
    (`Candidate.landed_at`, as `tie_time` counts it), then the lowest index. Landing order lets a settled vote
    decide once the candidates still out could at most tie: they land later, and lose."""
    time = tie_time([c for members in choices.values() for c in members])
    return {key: min((time(c), c.index) for c in members) for key, members in choices.items()}


def tie_time(voters: Sequence[Candidate]) -> Callable[[Candidate], float]:
    """How a tie counts a candidate's landing: its `landed_at` where every voter has one (a set the graph drew),
    else 0 for all, so that a set built by hand, or a pool, ties by index alone (the order of the request, so
    reruns agree)."""
    if all(c.landed_at is not None for c in voters):
        return lambda c: cast(float, c.landed_at)
    return lambda c: 0.0
