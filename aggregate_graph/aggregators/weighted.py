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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.registry import register
from aggregate_graph.reading.kinds import SLIPPED, content_kind, vote_class
from aggregate_graph.sample_set import Candidate

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
SHIPPED_WEIGHTS = Path(__file__).parents[1] / "trained" / "ssa_smollm2" / "weights.json"
"""The weights shipped with the trained SSA, fit on the unreserved Faithful-CoT and GPT-3 problems: per source
for those pools' models, and per vote class (a bare answer, slipped work, checked work) for any other model."""


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


@register
class WeightedVote(MajorityVote):
    """Majority vote with per-source weights learned from sample sets (`fitting.fit_weighted_vote`), saved as a
    small JSON file.

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
    def from_options(cls, weights: str | Path | WeightedVote | None = None) -> WeightedVote:  # type: ignore[override]
        """By name: `weights` is a loaded vote, taken as it is, or the file `save` wrote; without it, the shipped
        weights (`SHIPPED_WEIGHTS`), whose vote classes weigh the candidates of any model."""
        if isinstance(weights, WeightedVote):
            return weights
        return cls.load(SHIPPED_WEIGHTS if weights is None else weights)

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

    def largest_weight(self) -> float:
        """The most a candidate not yet seen can weigh: the largest of the source, vote-class and default weights."""
        return max([self.default_weight, *self.source_weights.values(), *self.kind_weights.values()])

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
                f"{path}: no WeightedVote weights file there (make one with `aggregate-train weights`, or "
                "fitting.fit_weighted_vote(...).save)"
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


def log_odds(p: float, spread: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(spread * p / (1 - p))


def weight_of_accuracy(p: float, spread: float) -> float:
    """The vote weight of accuracy `p`: its log-odds, floored at `MIN_WEIGHT`."""
    return max(log_odds(p, spread), MIN_WEIGHT)


def posterior(scores: list[float]) -> list[float]:
    """Each answer class's probability of being right, from its weighted vote score (a softmax)."""
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]
