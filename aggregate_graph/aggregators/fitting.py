"""Fitting a `WeightedVote`: each source's reliability, and each vote class's, from sample sets.

Supervised where the sets carry `gold`; otherwise without labels by one-coin Dawid–Skene EM (each source is right
with probability p, wrong answers spread over `spread` alternatives; the true answer of each set is the latent
variable). Both give the vote weight `weighted.weight_of_accuracy`. `aggregate-train weights` runs this on a log.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from aggregate_graph.aggregators.majority import is_voter
from aggregate_graph.aggregators.weighted import WeightedVote, log_odds, posterior, source_of, weight_of_accuracy
from aggregate_graph.reading.answers import equivalent, group_equivalent
from aggregate_graph.reading.kinds import SLIPPED, content_kind, vote_class
from aggregate_graph.sample_set import Candidate, SampleSet

PRIOR = (1.0, 1.0)  # Beta prior on each source's accuracy: a source seen a few times stays near the pooled rate


def fit_weighted_vote(
    sample_sets: Iterable[SampleSet],
    *,
    supervised: bool | None = None,
    spread: float = 2.0,
    iterations: int = 50,
    kinds: bool = True,
) -> WeightedVote:
    """Reliability per source from `sample_sets`: from `gold` where the sets carry it (`supervised=None`
    decides by whether any does), else by Dawid–Skene EM on the agreement between sources; and, with
    `kinds`, each vote class's (`kinds.vote_class`) at the average model, for the candidates of sources the fit
    never saw (`_class_reliability`: a logistic fit of right ~ model + class on those same labels)."""
    if spread <= 0:
        raise ValueError(f"spread must be positive, got {spread}")
    grouped = _grouped(sample_sets)
    if not grouped:
        raise ValueError("no sample set has a candidate with an answer: nothing to fit")
    labelled = any(g.labelled for g in grouped)
    supervised = labelled if supervised is None else supervised
    if supervised and not labelled:
        raise ValueError("supervised fitting needs sample sets with `gold`")
    # with kinds, slipped work votes as its class (`weight_of`): each source is fit on the rest of its work
    accuracy = _reliability(_ballots(grouped, _source_unless_slipped if kinds else source_of), supervised, spread,
                            iterations)  # fmt: skip
    credit = _credit(grouped, accuracy, supervised, spread) if kinds else []
    by_class = _class_reliability(grouped, credit, iterations) if kinds else {}
    slipped_work = accuracy.pop(_SLIPPED_VOTER, None)
    pooled_over = list(accuracy.values()) or [slipped_work]  # every voter slipped: the pool is their work's
    pooled = sum(p * n for p, n in pooled_over) / sum(n for _, n in pooled_over)
    return WeightedVote(
        {s: weight_of_accuracy(p, spread) for s, (p, _) in accuracy.items()},
        default_weight=weight_of_accuracy(pooled, spread),
        reliability={s: p for s, (p, _) in accuracy.items()},
        kind_weights={k: weight_of_accuracy(p, spread) for k, (p, _) in by_class.items()},
        kind_reliability={k: p for k, (p, _) in by_class.items()},
        spread=spread,
        method="supervised" if supervised else "unsupervised",
    )


@dataclass
class _Ballot:
    """One sample set as fitting sees it: the voters' keys (their sources) behind each answer class,
    and which class is gold."""

    classes: list[list[str]]
    labelled: bool  # the set has a gold answer
    gold_class: int | None  # None: no gold, or no class is right


@dataclass
class _Grouped:
    """One sample set's voters in answer classes, and which class is gold: grouping calls math-verify, so it is
    done once, then keyed by source (`_ballots`) and read by vote class (`_class_reliability`)."""

    classes: list[list[Candidate]]
    labelled: bool
    gold_class: int | None


def _grouped(sample_sets: Iterable[SampleSet]) -> list[_Grouped]:
    grouped = []
    for sample_set in sample_sets:
        voters = [c for c in sample_set.candidates if is_voter(c)]  # abstentions do not vote, nor train
        if not voters:
            continue
        classes = [[voters[i] for i in cls] for cls in group_equivalent([c.answer for c in voters])]
        gold_class = None
        if sample_set.gold is not None:
            gold_class = next((i for i, cls in enumerate(classes) if equivalent(cls[0].answer, sample_set.gold)), None)
        grouped.append(_Grouped(classes, sample_set.gold is not None, gold_class))
    return grouped


_SLIPPED_VOTER = "(slipped work)"  # never a source's name: `source_of` gives `model` or `model[params]`


def _source_unless_slipped(candidate: Candidate) -> str:
    return _SLIPPED_VOTER if content_kind(candidate) == SLIPPED else source_of(candidate)


def _ballots(grouped: list[_Grouped], key: Callable[[Candidate], str] = source_of) -> list[_Ballot]:
    return [_Ballot([[key(c) for c in cls] for cls in g.classes], g.labelled, g.gold_class) for g in grouped]


def _accuracies(ballots: list[_Ballot], credit: list[list[float]]) -> dict[str, tuple[float, int]]:
    """Each source's posterior-mean accuracy and vote count, given each class's probability of being right."""
    right: dict[str, float] = {}
    seen: dict[str, int] = {}
    for ballot, probs in zip(ballots, credit, strict=True):
        for sources, p in zip(ballot.classes, probs, strict=True):
            for s in sources:
                right[s] = right.get(s, 0.0) + p
                seen[s] = seen.get(s, 0) + 1
    a, b = PRIOR
    return {s: ((right[s] + a) / (seen[s] + a + b), seen[s]) for s in seen}


def _reliability(
    ballots: list[_Ballot], supervised: bool, spread: float, iterations: int
) -> dict[str, tuple[float, int]]:
    """Each key's accuracy and vote count: from the gold class of the labelled ballots, or by Dawid–Skene."""
    if not supervised:
        return _dawid_skene(ballots, spread, iterations) if ballots else {}
    labelled = [b for b in ballots if b.labelled]
    return _accuracies(labelled, [[1.0 if i == b.gold_class else 0.0 for i in range(len(b.classes))] for b in labelled])


def _credit(
    grouped: list[_Grouped], accuracy: Mapping[str, tuple[float, int]], supervised: bool, spread: float
) -> list[list[float] | None]:
    """Each set's answer classes' probability of being right: 1 for the gold class where a set is labelled (None
    for an unlabelled set in a supervised fit), else the posterior under the sources' fit weights."""
    if supervised:
        return [[float(i == g.gold_class) for i in range(len(g.classes))] if g.labelled else None for g in grouped]
    weights = {s: log_odds(p, spread) for s, (p, _) in accuracy.items()}
    return [posterior([sum(weights[_source_unless_slipped(c)] for c in cls) for cls in g.classes]) for g in grouped]


def _class_reliability(
    grouped: list[_Grouped], credit: list[list[float] | None], iterations: int = 50
) -> dict[str, tuple[float, int]]:
    """Each vote class's accuracy at the average model, and its vote count: a logistic fit of `right ~ model +
    class` over every voter (the answer classes' `credit` as labels), read at the count-weighted mean model.

    Pooled over models, a class's rate would carry the strength of the models that write it: the GPT-3 systems
    write arithmetic-heavy work and are mostly wrong, which put `checked` below `unchecked`, though within every
    LM's own work the more of it checks, the more often it is right. A user's n samples come from one model, so
    what a class adds over its own model's rate is what tells them apart."""
    cells: dict[tuple[str, str], list[float]] = {}  # (model, class) -> [right, seen]
    seen_by_model: dict[str, float] = {}
    seen_by_class: dict[str, float] = {}
    for g, probs in zip(grouped, credit, strict=True):
        if probs is None:  # unlabelled, in a supervised fit
            continue
        for members, p in zip(g.classes, probs, strict=True):
            for c in members:
                model, cls = c.model or "", vote_class(c)
                cell = cells.setdefault((model, cls), [0.0, 0.0])
                cell[0] += p
                cell[1] += 1
                seen_by_model[model] = seen_by_model.get(model, 0.0) + 1
                seen_by_class[cls] = seen_by_class.get(cls, 0.0) + 1
    if not cells:
        return {}
    model_effect = dict.fromkeys(seen_by_model, 0.0)
    class_effect = dict.fromkeys(seen_by_class, 0.0)
    # Newton steps on the model effects, then the class effects, with a unit L2 prior on each; the effects of one
    # side do not touch each other, so each side's steps are taken together
    for _ in range(iterations):
        for effects, side in ((model_effect, 0), (class_effect, 1)):
            gradient = {key: -value for key, value in effects.items()}
            curvature = dict.fromkeys(effects, 1.0)
            for (m, k), (right, seen) in cells.items():
                p = _sigmoid(model_effect[m] + class_effect[k])
                gradient[(m, k)[side]] += right - seen * p
                curvature[(m, k)[side]] += seen * p * (1 - p)
            for key in effects:
                effects[key] += gradient[key] / curvature[key]
    average = sum(model_effect[m] * n for m, n in seen_by_model.items()) / sum(seen_by_model.values())
    return {k: (_sigmoid(average + class_effect[k]), int(n)) for k, n in seen_by_class.items()}


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _dawid_skene(ballots: list[_Ballot], spread: float, iterations: int) -> dict[str, tuple[float, int]]:
    """One-coin Dawid–Skene EM: start from each class's vote share, then alternate source accuracies (M-step)
    and each set's posterior over its answer classes under the weighted vote (E-step) until they settle."""
    credit = [[len(c) / sum(map(len, b.classes)) for c in b.classes] for b in ballots]
    accuracy = _accuracies(ballots, credit)
    for _ in range(iterations):
        weights = {s: log_odds(p, spread) for s, (p, _) in accuracy.items()}
        credit = [posterior([sum(weights[s] for s in sources) for sources in b.classes]) for b in ballots]
        updated = _accuracies(ballots, credit)
        settled = max(abs(updated[s][0] - accuracy[s][0]) for s in updated) < 1e-6
        accuracy = updated
        if settled:
            break
    return accuracy
