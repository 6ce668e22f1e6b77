"""Recursive self-aggregation (arXiv 2509.26626): a population of solutions is refined in rounds, each new
member aggregating a random K-subset of the previous population; the final population is majority-voted."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.llm import shown_candidates
from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.registry import load_aggregator, register
from aggregate_graph.errors import AggregatorOptionError
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet, Usage


@register
class RecursiveAggregator(Aggregator):
    """`base` (typically a `GSRAggregator`) turns K candidates into one refined solution.

    population: members per round (default: the successful candidates); subset: K; rounds: refinement
    rounds. Costs population × rounds calls of `base`. `details["populations"]` has each round's answers.
    """

    name = "recursive"

    def __init__(
        self,
        base: Runnable[SampleSet, Aggregation],
        population: int | None = None,
        subset: int = 3,
        rounds: int = 2,
        seed: int = 0,
    ) -> None:
        if subset < 1 or rounds < 1 or (population is not None and population < 1):
            raise ValueError("population, subset and rounds must be at least 1")
        self.base, self.population, self.subset, self.rounds, self.seed = base, population, subset, rounds, seed

    @classmethod
    def from_options(
        cls,
        model: Any = None,
        *,
        base: Runnable[SampleSet, Aggregation] | str = "gsr",
        population: int | None = None,
        subset: int = 3,
        rounds: int = 2,
        seed: int = 0,
        **base_options: Any,
    ) -> RecursiveAggregator:
        """By name: `base` is an aggregator, or a name loaded with `model` and the other options (default
        `gsr`, which needs the model)."""
        if isinstance(base, str):
            base = load_aggregator(base, model=model, **base_options)
        elif base_options:
            raise AggregatorOptionError(
                f"aggregator 'recursive': {', '.join(base_options)} would go to a base loaded by name, but base= "
                "is an aggregator already",
                cls.name,
                next(iter(base_options)),
            )
        return cls(base, population=population, subset=subset, rounds=rounds, seed=seed)

    def _subsets(self, sample_set: SampleSet, members: list[Candidate], rng: random.Random) -> list[SampleSet]:
        size = self.population or len(members)
        picks = [rng.sample(members, min(self.subset, len(members))) for _ in range(size)]
        return [
            SampleSet(
                question=sample_set.question,
                candidates=[m.model_copy(update={"index": i}) for i, m in enumerate(pick)],
            )
            for pick in picks
        ]

    @staticmethod
    def _members(results: list[Aggregation]) -> list[Candidate]:
        return [Candidate(index=i, text=r.text, answer=r.answer, model="recursive") for i, r in enumerate(results)]

    def _finish(self, sample_set: SampleSet, members: list[Candidate], history: list, usage: Usage, started: float):
        final = MajorityVote().invoke(SampleSet(question=sample_set.question, candidates=members))
        # `support` names the last population's members, not the set's candidates: it is left empty
        details = {"populations": history, "calls": len(members) * self.rounds}
        spent = {"method": self.name, "support": [], "usage": usage, "latency_s": time.perf_counter() - started}
        return final.model_copy(update={**spent, "details": details})

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started, rng, usage, history = time.perf_counter(), random.Random(self.seed), Usage(), []
        members = shown_candidates(sample_set, self.population)
        for _ in range(self.rounds):
            results = [self.base.invoke(s, config) for s in self._subsets(sample_set, members, rng)]
            usage = sum((r.usage for r in results if r.usage), usage)
            members = self._members(results)
            history.append([r.answer for r in results])
        return self._finish(sample_set, members, history, usage, started)

    async def aaggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started, rng, usage, history = time.perf_counter(), random.Random(self.seed), Usage(), []
        members = shown_candidates(sample_set, self.population)
        for _ in range(self.rounds):
            subsets = self._subsets(sample_set, members, rng)
            results = list(await asyncio.gather(*(self.base.ainvoke(s, config) for s in subsets)))
            usage = sum((r.usage for r in results if r.usage), usage)
            members = self._members(results)
            history.append([r.answer for r in results])
        return self._finish(sample_set, members, history, usage, started)
