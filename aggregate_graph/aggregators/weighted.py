"""WeightedVote: a vote in which each source counts by its learned reliability.

A *source* is what produced a candidate: its model plus its prompt and sampling params (`source_of`). Reliability
is fit from logged sample sets: supervised where they carry `gold`, and otherwise without labels by one-coin
Dawid–Skene EM (each source is right with probability p, wrong answers spread over `spread` alternatives; the
true answer of each set is the latent variable). Both give the same vote weight, the log-odds
`log(spread · p / (1 − p))`, which is the optimal weight for independent voters under that model (kept positive:
`MIN_WEIGHT`).

The same fit, keyed by each candidate's *vote class* (`kinds.vote_class`: a bare answer, work with an arithmetic
slip, or work whose equations hold, by how many of them could be checked: none, one, two or more) instead of its
source, weighs the candidates whose source it never saw — a user's own model sampled n times, where every
candidate has the same unknown source and only what the text looks like tells them apart.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aggregate_graph.aggregators.kinds import SLIPPED, content_kind, vote_class
from aggregate_graph.aggregators.majority import MajorityVote, is_voter
from aggregate_graph.answers import equivalent, group_equivalent
from aggregate_graph.registry import register
from aggregate_graph.sample_set import Candidate, SampleSet

# 2 added the content kinds' weights; 3 the `slipped` kind, with each source fit on its work without slips (a
# reader of version 2 would give slipped work its source's weight: it refuses the file instead); 4 keys them by
# vote class (`kinds.VOTE_CLASSES`) instead of content kind (an older reader would weigh all work by default)
FORMAT_VERSION = 4
READS_VERSIONS = (1, 2, 3, 4)
# The params that say how a candidate was asked for. Others are per-sample records (a pool's `is_correct` or
# `score` verdicts, rewards) that must never name a source: they would leak the label into the vote.
SOURCE_PARAMS = ("prompt", "system_prompt", "temperature", "top_p")
# A fit weight stays positive. A source or kind right less often than 1 / (1 + spread) has negative log-odds, and a
# set of it alone (one weak model sampled n times, or n bare answers: right 23% of the time) would then vote for
# the answer the fewest candidates gave. Floored, it still counts least; cross-fit on the unreserved problems, the
# floor also raised the weighted vote on the 30-config pool (83.9% -> 84.4%) and the GPT-3 pool (54.0% -> 55.4%).
MIN_WEIGHT = 0.01
PRIOR = (1.0, 1.0)  # Beta prior on each source's accuracy: a source seen a few times stays near the pooled rate


def source_of(candidate: Candidate) -> str:
    """The candidate's source: `model` plus the params it was sampled with (`SOURCE_PARAMS`), e.g.
    `gpt4[prompt=COT]`; a system prompt is hashed."""
    parts = []
    for key, value in sorted(candidate.params.items()):
        if key not in SOURCE_PARAMS:
            continue
        if key == "system_prompt" and isinstance(value, str):
            value = hashlib.sha256(value.encode()).hexdigest()[:8]
        parts.append(f"{key}={value}")
    return f"{candidate.model}[{','.join(parts)}]" if parts else candidate.model


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


@register
class WeightedVote(MajorityVote):
    """Majority vote with per-source weights learned from sample sets (`fit`), saved as a small JSON file.

    A candidate whose source was never seen in fitting gets its vote class's weight (`kind_weights`, fit beside
    the sources, keyed by `kinds.VOTE_CLASSES`; files before version 4 keep one per content kind), else
    `default_weight`, the weight of the pooled accuracy over all sources (over their work without slips, when
    kinds are fit); so a set of unseen sources is decided by what its candidates' work
    looks like, and without kind weights as plain majority vote would decide it. Work with an arithmetic slip
    weighs as the `slipped` class, whatever its source.
    """

    name = "weighted"
    votes_on_json = False  # structured output is voted unweighted (StructuredVote)

    @classmethod
    def from_options(cls, weights: str | Path | WeightedVote) -> WeightedVote:  # type: ignore[override]
        """By name it needs its `weights`: a loaded vote, taken as it is, or the file `save` wrote."""
        return weights if isinstance(weights, WeightedVote) else cls.load(weights)

    def __init__(
        self,
        weights: Mapping[str, float] | None = None,
        *,
        default_weight: float = 1.0,
        reliability: Mapping[str, float] | None = None,
        kind_weights: Mapping[str, float] | None = None,
        kind_reliability: Mapping[str, float] | None = None,
        spread: float = 2.0,
        method: Literal["supervised", "unsupervised", "given"] = "given",
    ) -> None:
        self.source_weights = dict(weights or {})
        self.default_weight = float(default_weight)
        self.reliability = dict(reliability or {})
        self.kind_weights = dict(kind_weights or {})
        self.kind_reliability = dict(kind_reliability or {})
        self.spread = float(spread)
        self.method = method
        super().__init__(weights=self.weight_of)

    def weight_of(self, candidate: Candidate) -> float:
        """Work with an arithmetic slip weighs as `slipped` work does, whatever its source; otherwise the
        candidate's source's weight; for a source never seen, its vote class's; else the default."""
        cls = vote_class(candidate) if self.kind_weights else None
        if cls == SLIPPED and SLIPPED in self.kind_weights:
            return self.kind_weights[SLIPPED]
        weight = self.source_weights.get(source_of(candidate))
        if weight is None and cls is not None:
            weight = self.kind_weights.get(cls)
            if weight is None:  # files before version 4 keep one weight per content kind (version 2: no `slipped`)
                kind = content_kind(candidate)
                weight = self.kind_weights.get(kind if kind in self.kind_weights else content_kind(
                    candidate, check_arithmetic=False))  # fmt: skip
        return self.default_weight if weight is None else weight

    @classmethod
    def fit(
        cls,
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
        return cls(
            {s: _weight(p, spread) for s, (p, _) in accuracy.items()},
            default_weight=_weight(pooled, spread),
            reliability={s: p for s, (p, _) in accuracy.items()},
            kind_weights={k: _weight(p, spread) for k, (p, _) in by_class.items()},
            kind_reliability={k: p for k, (p, _) in by_class.items()},
            spread=spread,
            method="supervised" if supervised else "unsupervised",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "aggregate_graph.WeightedVote",
            "version": FORMAT_VERSION,
            "method": self.method,
            "spread": self.spread,
            "default_weight": self.default_weight,
            "sources": {
                s: {"weight": w, "reliability": self.reliability.get(s)} for s, w in sorted(self.source_weights.items())
            },
            "kinds": {
                k: {"weight": w, "reliability": self.kind_reliability.get(k)}
                for k, w in sorted(self.kind_weights.items())
            },
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> WeightedVote:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path}: no WeightedVote weights file there (make one with WeightedVote.fit and .save)"
            ) from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a WeightedVote weights file (invalid JSON: {exc})") from None
        if not isinstance(data, dict) or data.get("format") != "aggregate_graph.WeightedVote":
            raise ValueError(f"{path}: not a WeightedVote weights file (no `format: aggregate_graph.WeightedVote`)")
        if data.get("version") not in READS_VERSIONS:
            raise ValueError(f"{path}: weights file version {data.get('version')}, this package reads {READS_VERSIONS}")
        sources, kinds = data.get("sources", {}), data.get("kinds", {})  # version 1 has no kinds
        return cls(
            {s: float(v["weight"]) for s, v in sources.items()},
            default_weight=float(data["default_weight"]),
            reliability={s: v["reliability"] for s, v in sources.items() if v.get("reliability") is not None},
            kind_weights={k: float(v["weight"]) for k, v in kinds.items()},
            kind_reliability={k: v["reliability"] for k, v in kinds.items() if v.get("reliability") is not None},
            spread=float(data.get("spread", 2.0)),
            method=data.get("method", "given"),
        )


def _log_odds(p: float, spread: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(spread * p / (1 - p))


def _weight(p: float, spread: float) -> float:
    """The vote weight of accuracy `p`: its log-odds, floored at `MIN_WEIGHT`."""
    return max(_log_odds(p, spread), MIN_WEIGHT)


def posterior(scores: list[float]) -> list[float]:
    """Each answer class's probability of being right, from its weighted vote score (a softmax)."""
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


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
    weights = {s: _log_odds(p, spread) for s, (p, _) in accuracy.items()}
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
        weights = {s: _log_odds(p, spread) for s, (p, _) in accuracy.items()}
        credit = [posterior([sum(weights[s] for s in sources) for sources in b.classes]) for b in ballots]
        updated = _accuracies(ballots, credit)
        settled = max(abs(updated[s][0] - accuracy[s][0]) for s in updated) < 1e-6
        accuracy = updated
        if settled:
            break
    return accuracy
