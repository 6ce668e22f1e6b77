"""The representative candidate when there is nothing to vote on (small talk, prose, an aggregator that could
not decide): the medoid, the successful candidate whose text is most like all the others'.

Better than "the first one": the first to arrive is the fastest, not the most typical, and an outlier (a
refusal, a ramble) is the least like the rest.
"""

from __future__ import annotations

import re
import time
from itertools import pairwise

from langchain_core.runnables import RunnableConfig

from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.registry import register
from aggregate_graph.errors import AggregationError
from aggregate_graph.sample_set import Aggregation, SampleSet

_WORD = re.compile(r"\w+")


def _shingles(text: str) -> frozenset[str]:
    """Words and word pairs: pairs keep some order, so two texts of the same words said differently differ."""
    words = _WORD.findall(text.lower())
    return frozenset(words) | frozenset(f"{a} {b}" for a, b in pairwise(words))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two shingle sets; two empty texts are alike."""
    return len(a & b) / len(a | b) if a or b else 1.0


@register
class Medoid(Aggregator):
    """Picks the successful candidate with the highest total similarity to the other successful ones (ties:
    the lowest index). Its `answer` is that candidate's extracted answer, if any. Raises `AggregationError`
    only when no candidate succeeded with any text."""

    name = "medoid"
    runs_chat_model = False

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started = time.perf_counter()
        texts = [c for c in sample_set.succeeded if c.text.strip()]
        if not texts:
            raise AggregationError(
                f"every candidate failed or said nothing ({len(sample_set.candidates)} drawn, "
                f"{len(sample_set.failed)} failed); there is no answer to give",
                sample_set,
            )
        shingles = [_shingles(c.text) for c in texts]
        scores = [sum(similarity(s, t) for j, t in enumerate(shingles) if j != i) for i, s in enumerate(shingles)]
        best = max(range(len(texts)), key=lambda i: (scores[i], -texts[i].index))
        chosen = texts[best]
        return Aggregation(
            method=self.name,
            answer=chosen.answer,
            text=chosen.text,
            support=[chosen.index],
            latency_s=time.perf_counter() - started,
            details={"mean_similarity": scores[best] / max(1, len(texts) - 1), "candidates_with_text": len(texts)},
        )
