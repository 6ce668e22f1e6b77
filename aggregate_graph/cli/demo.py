"""`python -m aggregate_graph.cli.demo [--aggregators NAME …]`: majority vote against the trained aggregators on six
real GSM8K problems, offline, in seconds.

Each problem comes with five real LLM answers (Faithful-CoT's code-davinci, text-davinci, gpt-3.5-turbo and
gpt-4 runs; how they were chosen is in `aggregate_graph/data/README.md`). On four of them most of the five agree
on a wrong answer while a minority is right: majority vote cannot recover that answer; an aggregator that has
learned which sources to trust (weighted vote) or that reads the candidates (the trained SSA) can. The data and
the trained SSA ship inside the package, so nothing here needs `../shared/data` or the network.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from importlib.resources import as_file, files
from typing import TextIO

from langchain_core.runnables import Runnable

from aggregate_graph.aggregators.llm import LLMAggregator
from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.registry import load_aggregator
from aggregate_graph.aggregators.trained import SHIPPED_SSA, WEIGHTS_FILE
from aggregate_graph.aggregators.weighted import source_of
from aggregate_graph.cli.common import quiet_libraries
from aggregate_graph.errors import AggregationError
from aggregate_graph.log import read_sample_sets
from aggregate_graph.reading.answers import equivalent
from aggregate_graph.sample_set import SampleSet

DEMO_DATA = "faithful_cot_demo.jsonl"
AGGREGATORS = {"majority": "majority", "ssa": "trained SSA", "weighted": "weighted vote"}
"""Command-line name → the label printed, in the order the demo shows them."""
QUESTION_CHARS, LINE_WIDTH = 180, 100
INTRO = """\
aggregate-graph draws several answers to one question and aggregates them into one.
Here: six real GSM8K problems, five real LLM answers to each (offline, shipped with the package). On four of
them most answers agree on a wrong number while one or two are right: majority vote cannot recover those;
the weighted vote (which sources to trust) and the trained SSA (a small model that reads the answers) can.
"""


def load_demo_sets() -> list[SampleSet]:
    """The six bundled sample sets (package data, so this works from an installed wheel too)."""
    with as_file(files("aggregate_graph") / "data" / DEMO_DATA) as path:
        return list(read_sample_sets(path))


def _shorten(question: str, limit: int = QUESTION_CHARS) -> str:
    """Head and tail of a long question: the tail is where a GSM8K question says what it asks for."""
    text = " ".join(question.split())
    if len(text) <= limit:
        return text
    half = (limit - 3) // 2
    return f"{text[:half].rsplit(' ', 1)[0]} … {text[-half:].split(' ', 1)[-1]}"


def _mark(answer: str | None, gold: str | None) -> str:
    return "✓" if equivalent(answer, gold) else "✗"


def run_demo(sample_sets: Sequence[SampleSet], aggregators: Mapping[str, Runnable], out: TextIO) -> dict[str, int]:
    """Print each problem with its candidates, every aggregator's pick and the gold answer, then each aggregator's
    latency and a summary line. Returns how many problems each aggregator got right, by label."""
    right = dict.fromkeys(aggregators, 0)
    seconds = dict.fromkeys(aggregators, 0.0)
    # One column layout for every problem: candidates (indented under their problem), aggregators, gold.
    names = [f"  {source_of(c)}" for s in sample_sets for c in s.candidates]
    width = max(len(name) for name in [*names, *aggregators, "gold"])
    for number, sample_set in enumerate(sample_sets, 1):
        gold = sample_set.gold
        print(f"\n[{number}/{len(sample_sets)}] GSM8K test #{sample_set.metadata.get('problem_id')}", file=out)
        print(
            textwrap.fill(_shorten(sample_set.question), LINE_WIDTH, initial_indent="  Q: ", subsequent_indent="     "),
            file=out,
        )
        for c in sample_set.candidates:
            print(f"  {'  ' + source_of(c):<{width}} {c.answer or '(none)':>10} {_mark(c.answer, gold)}", file=out)
        for label, aggregator in aggregators.items():
            started = time.perf_counter()
            try:
                result = aggregator.invoke(sample_set)
            except AggregationError as exc:  # counts as wrong, and says why instead of stopping the demo
                seconds[label] += time.perf_counter() - started
                print(f"  {label:<{width}} {'—':>10} ✗  ({exc})", file=out)
                continue
            seconds[label] += time.perf_counter() - started
            ok = equivalent(result.answer, gold)
            right[label] += ok
            # How many candidates back the pick is the point: a right pick backed by a minority beats the vote.
            note = f"backed by {len(result.support)} of {len(sample_set.candidates)}"
            if result.tie:
                note += f", tie between {', '.join(result.tie)} broken by candidate order"
            status, fallback = result.details.get("parse_status"), result.details.get("fallback")
            if status == "skipped":
                note += ", one answer: the model was not asked"
            elif status == "deferred" and result.details.get("threshold", 0) >= 1:
                note += f", {fallback} decided (threshold 1: the vote always does)"
            elif status == "deferred":
                confidence = result.details.get("confidence")
                unsure = "no log-probabilities" if confidence is None else f"{confidence:.0%}"
                note += f", model unsure ({unsure} on {result.details['choice']}): {fallback} decided"
            elif fallback:
                note += f", model output unusable: fell back to {fallback}"
            if probs := result.details.get("choice_probs"):
                note += ", model: " + ", ".join(f"{a} {p:.0%}" for a, p in sorted(probs.items(), key=lambda x: -x[1]))
            print(f"  {label:<{width}} {result.answer or '—':>10} {'✓' if ok else '✗'}  ({note})", file=out)
        print(f"  {'gold':<{width}} {gold or '—':>10}", file=out)
    n = len(sample_sets)
    oracle = sum(any(equivalent(c.answer, s.gold) for c in s.candidates) for s in sample_sets)
    latency = ", ".join(f"{label} {1000 * seconds[label] / max(n, 1):.1f} ms" for label in aggregators)
    print(f"\nlatency per problem: {latency}", file=out)
    summary = ", ".join(f"{label} right {right[label]}/{n}" for label in aggregators)
    print(f"summary: {summary} (some candidate right: {oracle}/{n})", file=out)
    return right


def check_trained_folder(names: Sequence[str]) -> None:
    """Raises FileNotFoundError when an aggregator in `names` needs the shipped folder and it is missing."""
    if (missing := [AGGREGATORS[n] for n in names if n != "majority"]) and not SHIPPED_SSA.is_dir():
        raise FileNotFoundError(
            f"{' and '.join(missing)} cannot run: the trained SSA folder {SHIPPED_SSA} is missing (it ships with "
            "the package); run with --aggregators majority to see majority vote alone"
        )


def build_aggregators(names: Sequence[str], out: TextIO) -> dict[str, Runnable]:
    """The chosen aggregators by label. The trained ones load from the package's shipped folder, which must
    exist: a demo that silently skipped them would not show what it claims to."""
    check_trained_folder(names)
    aggregators: dict[str, Runnable] = {}
    for name in AGGREGATORS:
        if name not in names:
            continue
        if name == "majority":
            aggregators[AGGREGATORS[name]] = MajorityVote()
        elif name == "weighted":
            aggregators[AGGREGATORS[name]] = load_aggregator("weighted", weights=SHIPPED_SSA / WEIGHTS_FILE)
        else:
            started = time.perf_counter()
            ssa = load_aggregator("ssa")
            from aggregate_graph.local import LocalChatModel  # torch: only when the SSA runs

            # The embedded model loads on its first call; loading it here keeps that one-off cost out of the
            # per-problem latency, and reports it on its own.
            if isinstance(ssa, LLMAggregator) and isinstance(ssa.model, LocalChatModel):
                ssa.model.load()
            print(f"{AGGREGATORS[name]}: loaded {SHIPPED_SSA.name} in {time.perf_counter() - started:.1f} s", file=out)
            aggregators[AGGREGATORS[name]] = ssa
    return aggregators


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aggregate_graph.cli.demo",
        description="Majority vote against the trained aggregators on six real GSM8K problems (offline).",
    )
    parser.add_argument(
        "--aggregators",
        nargs="+",
        choices=list(AGGREGATORS),
        default=list(AGGREGATORS),
        metavar="NAME",
        help=f"which aggregators to run, of {', '.join(AGGREGATORS)} (default: all)",
    )
    args = parser.parse_args(argv)
    quiet_libraries()  # a demo's output is the demo: no loading bars or deprecation notices
    try:
        check_trained_folder(args.aggregators)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(INTRO)
    aggregators = build_aggregators(args.aggregators, sys.stdout)
    run_demo(load_demo_sets(), aggregators, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
