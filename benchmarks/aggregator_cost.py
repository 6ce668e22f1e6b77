"""What each model-free aggregator costs per sample set, for the "choose an aggregator" table of
docs/aggregators.md: majority, weighted (the shipped weights), medoid and structured_vote, timed on the same
real sets in one run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/aggregator_cost.py [--sets 300]

The sets are one LM's five Faithful-CoT candidates (gpt-3.5-turbo, the five prompts, sources anonymised) on the
unreserved GSM8K problems; structured_vote reads each candidate's answer as a JSON object. The model-backed
aggregators' costs are measured by benchmarks/ssa_inference.py (the shipped SSA) and benchmarks/aggregator.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from aggregate_graph.aggregators.registry import load_aggregator
from aggregate_graph.sample_set import SampleSet
from training.data import one_model
from training.pools import is_reserved, load_faithful_cot

NAMES = ("majority", "weighted", "medoid", "structured_vote")


def as_json(sample_set: SampleSet) -> SampleSet:
    """The set with each candidate's answer as a JSON object, as a structured-output request's would be."""
    candidates = [c.model_copy(update={"text": json.dumps({"answer": c.answer})}) for c in sample_set.candidates]
    return sample_set.model_copy(update={"candidates": candidates})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=300)
    args = parser.parse_args()
    sets = [one_model(s, "gpt-3.5-turbo") for s in load_faithful_cot() if not is_reserved(s)][: args.sets]
    print(f"{len(sets)} sets of {len(sets[0].candidates)} candidates (gpt-3.5-turbo × 5 prompts, anonymised)")
    print(f"{'aggregator':<16} {'median ms/set':>14} {'p90 ms/set':>11} {'÷ majority':>11}")
    medians = {}
    for name in NAMES:
        aggregator = load_aggregator(name)
        inputs = [as_json(s) for s in sets] if name == "structured_vote" else sets
        times = []
        for sample_set in inputs:
            started = time.perf_counter()
            aggregator.invoke(sample_set)
            times.append((time.perf_counter() - started) * 1000)
        medians[name] = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{name:<16} {medians[name]:>14.2f} {p90:>11.2f} {medians[name] / medians['majority']:>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
