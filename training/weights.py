"""`aggregate-train weights`: fit a `WeightedVote` (per-source reliability) from logged sample sets.

Supervised where the sets carry `gold`, else unsupervised (Dawid–Skene EM on agreement between sources), and the
same per vote class (a bare answer, slipped work, work by how much of its arithmetic checks) for candidates of
sources it never saw; e.g. from the runtime's own store log exported with `export_sample_sets` — no labels
needed. Writes the small JSON file that `WeightedVote.load`, `load_aggregator("weighted", weights=…)` and
`aggregate-graph ask --aggregator weighted` read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from aggregate_graph.aggregators.fitting import fit_weighted_vote
from training.data import PROBLEMS_HELP, Problems, load_sample_sets


@dataclass
class WeightsConfig:
    sample_sets: str = field(metadata={"help": "sample-set JSONL (e.g. the runtime's exported log) or a pool name"})
    output: str = field(metadata={"help": "the weights file to write (JSON)"})
    problems: Problems = field(default="all", metadata={"help": PROBLEMS_HELP})
    supervision: Literal["auto", "supervised", "unsupervised"] = field(
        default="auto", metadata={"help": "auto: supervised when any set has a gold answer"}
    )
    spread: float = field(default=2.0, metadata={"help": "how many ways wrong answers spread (the vote's prior)"})
    kinds: bool = field(
        default=True, metadata={"help": "also weigh vote classes, for the candidates of sources never seen"}
    )
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.spread <= 0:
            raise ValueError(f"spread must be positive, got {self.spread}")


def fit_weights(config: WeightsConfig) -> dict[str, Any]:
    """Fit, save to `output`, and return a summary: method, sources and the weights, strongest first."""
    sets = load_sample_sets(config.sample_sets, config.limit, config.problems)
    supervised = None if config.supervision == "auto" else config.supervision == "supervised"
    vote = fit_weighted_vote(sets, supervised=supervised, spread=config.spread, kinds=config.kinds)
    vote.save(config.output)
    ranked = sorted(vote.source_weights.items(), key=lambda item: -item[1])
    return {
        "output": config.output,
        "method": vote.method,
        "sample_sets": len(sets),
        "sources": len(ranked),
        "default_weight": vote.default_weight,
        "weights": dict(ranked),
        "kind_weights": dict(sorted(vote.kind_weights.items(), key=lambda item: -item[1])),
    }
