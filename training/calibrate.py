"""`aggregate-train calibrate`: a choice SSA's temperature and deferral threshold, fit on validation problems.

The model runs once (threshold 0) on held-out problems drawn as users have them: each of several LMs' own
candidates with sources anonymised (k from one model), mixed-source sets, and the GPT-3 systems' sets. The
temperature and the vote's weight (the model's probabilities times the vote's, each to a power) minimise the
negative log-likelihood of the right option; the threshold is the confidence below which
the vote decides, chosen to maximise the mean gain over the vote across those rows while no row falls below it.
All three are written into the model folder's aggregator.json (the runtime reads them there) and the table into
calibration.json / calibration.md. The reserved problems are never read here.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.aggregators.choice import choice_distribution
from aggregate_graph.aggregators.trained import AGGREGATOR_FILE, load_trained_aggregator
from aggregate_graph.errors import AggregationError
from aggregate_graph.reading.answers import equivalent
from training.data import load_sample_sets, one_model, write_json
from training.evaluate import subset
from training.export import base_model_of
from training.pools import is_reserved, reserved_questions

# 0.5 … 4.0 by 0.1, then to 10 by 0.5: a small model's letter probabilities can be far overconfident (the shipped
# SSA's fit landed on 4.0, the old top)
TEMPERATURES = [round(0.5 + 0.1 * i, 1) for i in range(36)] + [4.5 + 0.5 * i for i in range(12)]
THRESHOLDS = [round(0.02 * i, 2) for i in range(51)]  # 0 … 1
VOTE_WEIGHTS = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0]  # how much the vote's own probabilities count beside the model's


@dataclass
class CalibrateConfig:
    model_dir: str = field(metadata={"help": "the trained choice SSA (sft's output or an export); updated in place"})
    validation_sets: str = field(
        metadata={
            "help": "held-out sample sets: build's validation_sets.jsonl, a pool of problems the model never trained "
            "on (zeroeval_build for a model built without it), or several joined by +"
        }
    )
    lms: list[str] = field(
        default_factory=lambda: ["code002", "text002", "text003", "gpt-3.5-turbo"],
        metadata={"help": "one row each: that LM's own candidates, sources anonymised"},
    )
    base_model: str | None = field(
        default=None, metadata={"help": "the adapter's base model (default: the one it records, or SmolLM2)"}
    )
    k: int = 5
    draws: int = 3
    dtype: str = "auto"
    concurrency: int = 1
    seed: int = 0


@dataclass
class _Outcome:
    """One set's decision inputs: the model's letter log-probability per answer (None: the model was skipped),
    whether each answer is right, and whether the vote is."""

    logprobs: dict[str, float] | None
    vote: dict[str, float] | None
    right: dict[str, bool]
    vote_right: bool
    majority_right: bool  # what the acceptance compares with: the plain vote, every candidate one vote


def rows_of(sets: list[SampleSet], config: CalibrateConfig, rng: random.Random) -> dict[str, list[SampleSet]]:
    """The validation rows, each a list of k-sets (draws × problems, candidates in a random order): per LM, its own
    candidates with sources anonymised; per pool, its mixed-source sets."""
    rows: dict[str, list[SampleSet]] = {}
    for lm in config.lms:
        own = [one_model(s, lm) for s in sets]
        rows[f"{lm}, anonymised"] = [subset(s, config.k, rng, True) for _ in range(config.draws)
                                     for s in own if len(s.candidates) > 1]  # fmt: skip
    for source in sorted({str(s.metadata.get("source", "sets")) for s in sets}):
        mixed = [
            s for s in sets if s.metadata.get("source", "sets") == source and len({c.model for c in s.candidates}) > 1
        ]
        rows[f"{source}, mixed sources"] = [subset(s, config.k, rng, True) for _ in range(config.draws) for s in mixed]
    return {name: row for name, row in rows.items() if row}


def outcome(sample_set: SampleSet, result: Any, vote: Any) -> _Outcome:
    details = result.details
    logprobs = details.get("choice_logprobs") if details.get("parse_status") != "skipped" else None
    answers = list(logprobs) if logprobs else [result.answer]
    return _Outcome(
        logprobs=logprobs,
        vote=details.get("vote_shares") if logprobs else None,
        right={a: equivalent(a, sample_set.gold) for a in answers},
        vote_right=equivalent(vote.answer, sample_set.gold),
        majority_right=equivalent(MajorityVote().invoke(sample_set).answer, sample_set.gold),
    )


def outcomes_of(
    aggregator: Any, sets: list[SampleSet], concurrency: int = 1, desc: str | None = None
) -> list[tuple[SampleSet, _Outcome]]:
    """Each set with its `_Outcome` under `aggregator` (a choice SSA loaded uncalibrated: temperature 1, threshold
    0) and the vote it reads (its `fallback`); a set where no candidate stated an answer is left out, as neither
    the model nor the vote decides it."""
    results = aggregator.batch(sets, config={"max_concurrency": concurrency}, return_exceptions=True)
    out = []
    for s, result in zip(sets, tqdm(results, desc=desc, leave=False), strict=True):
        if isinstance(result, AggregationError):
            continue
        if isinstance(result, Exception):
            raise result
        out.append((s, outcome(s, result, aggregator.fallback.invoke(s))))
    return out


def decides_right(o: _Outcome, temperature: float, threshold: float, vote_weight: float = 0.0) -> bool:
    """Whether the set's decision at these settings is right: the model's top option at or above `threshold`,
    else (and where the model was skipped) the vote's."""
    if not o.logprobs:
        return o.vote_right
    probs = choice_distribution(o.logprobs, temperature, o.vote, vote_weight)
    best = max(probs, key=lambda a: probs[a])
    return o.right[best] if probs[best] >= threshold and threshold < 1 else o.vote_right


def accuracy(outcomes: list[_Outcome], temperature: float, threshold: float, vote_weight: float = 0.0) -> float:
    correct = sum(decides_right(o, temperature, threshold, vote_weight) for o in outcomes)
    return 100.0 * correct / max(len(outcomes), 1)


def fit_temperature(rows: dict[str, list[_Outcome]]) -> tuple[float, float]:
    """The temperature and vote weight of least negative log-likelihood of the right option over every row's sets
    (the threshold is then `choose`'s)."""
    outcomes = [o for outs in rows.values() for o in outs]
    return min(((t, w) for t in TEMPERATURES for w in VOTE_WEIGHTS), key=lambda tw: nll(outcomes, *tw))


def nll(outcomes: list[_Outcome], temperature: float, vote_weight: float = 0.0) -> float:
    total, count = 0.0, 0
    for o in outcomes:
        if o.logprobs and any(o.right.values()):
            probs = choice_distribution(o.logprobs, temperature, o.vote, vote_weight)
            total -= math.log(max(sum(p for a, p in probs.items() if o.right[a]), 1e-12))
            count += 1
    return total / max(count, 1)


def choose(
    rows: dict[str, list[_Outcome]], temperature: float, vote_weight: float
) -> tuple[float, dict[str, dict[str, float]]]:
    """The threshold with the largest mean gain over the vote across rows among those where no row loses (1.0,
    always the vote, when none qualifies), and each row's accuracy at it."""
    votes = {name: 100.0 * np.mean([o.vote_right for o in outs]) for name, outs in rows.items()}
    best, best_gain = 1.0, 0.0
    for threshold in THRESHOLDS:
        # Rounded: the two percentages of one count differ in the last bits (np.mean vs a division), and a
        # 2e-14 "gain" must not pick a threshold over always-the-vote.
        gains = [round(accuracy(outs, temperature, threshold, vote_weight) - votes[name], 9)
                 for name, outs in rows.items()]  # fmt: skip
        if min(gains) >= 0 and float(np.mean(gains)) > best_gain:
            best, best_gain = threshold, float(np.mean(gains))
    table = {
        name: {
            "sets": len(outs),
            "majority": 100.0 * np.mean([o.majority_right for o in outs]),
            "vote": votes[name],
            "model_alone": accuracy(outs, temperature, 0.0),
            "with_vote": accuracy(outs, temperature, 0.0, vote_weight),
            "calibrated": accuracy(outs, temperature, best, vote_weight),
            "reached_model": 100.0 * np.mean([o.logprobs is not None for o in outs]),
        }
        for name, outs in rows.items()
    }
    return best, table


def markdown(table: dict[str, dict[str, float]], temperature: float, vote_weight: float, threshold: float) -> str:
    lines = [f"Validation (never reserved problems): temperature {temperature}, vote weight {vote_weight}, "
             f"threshold {threshold}", "",
             "| row | sets | majority % | vote % | model alone % | model × vote % | shipped (deferring) % "
             "| reached the model % |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in table.items():
        lines.append(f"| {name} | {r['sets']} | {r['majority']:.1f} | {r['vote']:.1f} | {r['model_alone']:.1f} "
                     f"| {r['with_vote']:.1f} "
                     f"| {r['calibrated']:.1f} | {r['reached_model']:.0f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def calibrate(config: CalibrateConfig) -> dict[str, Any]:
    """Fit and record the temperature and threshold; returns the validation table."""
    import json

    folder = Path(config.model_dir)
    record = json.loads((folder / AGGREGATOR_FILE).read_text(encoding="utf-8"))
    if record.get("format") != "ssa-choice":
        raise ValueError(f"{folder}: calibrate is for the choice SSA (format ssa-choice), not {record.get('format')!r}")
    reserved = reserved_questions()
    sets = [s for s in load_sample_sets(config.validation_sets) if s.gold is not None]
    if any(is_reserved(s, reserved) for s in sets):
        raise ValueError(f"{config.validation_sets} holds reserved problems: calibrate on validation problems only")
    base = config.base_model or base_model_of(folder, None)
    if base is not None and not Path(base).is_dir():  # a hub name recorded by peft: the embedded SmolLM2's
        base = None
    aggregator = load_trained_aggregator(folder, base_model=base, dtype=config.dtype, temperature=1.0, threshold=0.0)
    rows = {
        name: [o for _, o in outcomes_of(aggregator, row_sets, config.concurrency, name)]
        for name, row_sets in rows_of(sets, config, random.Random(config.seed)).items()
    }
    temperature, vote_weight = fit_temperature(rows)
    threshold, table = choose(rows, temperature, vote_weight)
    record |= {"temperature": temperature, "vote_weight": vote_weight, "threshold": threshold}
    write_json(folder / AGGREGATOR_FILE, record)
    result = {"temperature": temperature, "vote_weight": vote_weight, "threshold": threshold, "rows": table,
              "config": asdict(config)}  # fmt: skip
    write_json(folder / "calibration.json", result)
    (folder / "calibration.md").write_text(markdown(table, temperature, vote_weight, threshold), encoding="utf-8")
    return result
