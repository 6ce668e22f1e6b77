"""Best-of-N: a reward function or reward model scores each candidate; the best one wins."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.registry import register
from aggregate_graph.errors import AggregationError, AggregatorOptionError
from aggregate_graph.reading.answers import normalize_answer
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet

Scorer = Callable[[SampleSet, Candidate], float] | Runnable[dict[str, Any], float]


def score_from_params(key: str) -> Callable[[SampleSet, Candidate], float]:
    """A scorer reading a reward already stored on the candidate, e.g. a reward model's score in a pool."""

    def score(_: SampleSet, candidate: Candidate) -> float:
        value = candidate.params.get(key)
        while isinstance(value, list):  # pools store rewards as [[score]]
            value = value[-1] if value else None
        if value is None:
            raise AggregationError(f"candidate {candidate.index} has no {key!r} score")
        return float(value)

    return score


@register
class BestOfN(Aggregator):
    """The successful candidate with the highest score (ties: the earliest). A Runnable scorer is invoked with
    `{"question", "text", "answer"}`; a plain function is called with `(sample_set, candidate)`."""

    name = "best_of_n"

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    @classmethod
    def from_options(cls, scorer: Scorer | str) -> BestOfN:
        """By name it needs its `scorer`: a function or Runnable, or the name of a reward stored in each
        candidate's params (`score_from_params`)."""
        if isinstance(scorer, str):
            return cls(score_from_params(scorer))
        if not callable(scorer) and not isinstance(scorer, Runnable):
            raise AggregatorOptionError(
                f"aggregator 'best_of_n': scorer= is a function, a Runnable or a params key, not "
                f"{type(scorer).__name__}",
                cls.name,
                "scorer",
            )
        return cls(scorer)

    def _score(self, sample_set: SampleSet, candidate: Candidate, config: RunnableConfig | None) -> float:
        if isinstance(self.scorer, Runnable):
            payload = {"question": sample_set.question, "text": candidate.text, "answer": candidate.answer}
            return float(self.scorer.invoke(payload, config))
        return float(self.scorer(sample_set, candidate))

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started = time.perf_counter()
        scored = [(self._score(sample_set, c, config), c) for c in sample_set.succeeded if c.text.strip()]
        if not scored:
            raise AggregationError("no successful candidate to score", sample_set)
        best_score, best = max(scored, key=lambda sc: (sc[0], -sc[1].index))
        return Aggregation(
            method=self.name,
            answer=normalize_answer(best.answer),
            text=best.text,
            support=[best.index],
            latency_s=time.perf_counter() - started,
            details={"scores": {str(c.index): s for s, c in scored}, "best_score": best_score},
        )
