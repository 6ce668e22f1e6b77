"""The aggregators on modern models' answers: ZeroEval MATH level 5, build split (`id % 4 == 1`, 180 problems).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/zeroeval_vote.py [--draws 4] [--ssa-draws 1]
        [--ssa FOLDER] [--validation-of DATA_DIR] [--recalibrate] [--verifier FOLDER [--verifier-dtype float32]]
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/zeroeval_vote.py --report --ssa-draws 4     (the final report)

The SSA's time per set is measured with torch's threads as a user gets them (every core by default): on a 2-core
AVX2-only CPU, 1.0 s a set with both, 1.6-1.7 s with OMP_NUM_THREADS=1.

Sets of five replies from the 43 LLMs of 2024: five random models per problem (`--draws` sets each, seeded), and
five random models of the ten strongest (ranked by accuracy on this split). Accuracy (%) of majority vote,
WeightedVote with the shipped weights (no ZeroEval model among its sources: the vote classes weigh them),
WeightedVote fit without labels on these very sets (Dawid–Skene on agreement between the models), and the shipped
SSA in-process (`--ssa-draws` sets per problem, with its time per set) beside the vote it reads (its own
WeightedVote), with 95% bootstrap intervals of each one's gain over majority on the same sets. `--ssa` evaluates
another trained folder; `--validation-of` keeps only the problems that `aggregate-train build` held out for
validation in DATA_DIR (a model trained on the other build problems is judged on those). `--recalibrate` also
runs the SSA uncalibrated (temperature 1, no deferral) on the same sets and refits its temperature, vote weight
and threshold on these problems the way `aggregate-train calibrate` fits them (`training.calibrate`), cross-fit
over two halves of the problems (each half decided with the settings fit on the other), so that the gain a
calibration on modern models' answers would buy is measured on problems it was not fit on; it also prints the
decisions at the fitted temperature without deferring (threshold 0), which calibrate's rule may refuse.
`--verifier` scores every candidate with a per-candidate verifier trained by `build --format verify`
(`training.verifier`) and adds beta times its Yes/No log-odds to each candidate's vote weight, on top of the
verifier's own WeightedVote (fit with labels on its train problems), of plain majority and of WeightedVote fit
without labels on the row's sets, beta cross-fit over two halves of the problems (one split with intervals, and the
average and range over 20 random splits); it prints the verifier's AUC over the candidates, the verifier alone (the
candidate it rates highest) and its time per set.

`--report` reads the report split (`id % 4 == 3`, 180 problems) instead, once, for the final report of what is
shipped: the strongest models are ranked on the build split, a further row gives WeightedVote fit with labels on
the build problems (a user's graded log of the same models), and no label of the report problems is read to fit or
choose anything (the vote fit without labels is fit on the report sets' agreement, as a user fits it on an
unlabelled log; `--validation-of`, `--recalibrate` and `--verifier` are refused). Without it the report split is
not read. The SSA's line also gives its gain over the vote fit without labels.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import defaultdict
from pathlib import Path

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import MajorityVote, SSAStyle, WeightedVote, fit_weighted_vote
from aggregate_graph.aggregators.registry import load_aggregator
from aggregate_graph.aggregators.trained import AGGREGATOR_FILE, SHIPPED_SSA, WEIGHTS_FILE, load_trained_aggregator
from aggregate_graph.drawing.models import local_model
from aggregate_graph.errors import AggregationError
from aggregate_graph.log import read_sample_sets
from aggregate_graph.reading.answers import equivalent
from training.calibrate import choose, decides_right, fit_temperature, outcomes_of
from training.pools import load_zeroeval
from training.verifier import best_verified, verified_vote, verifier_scores

BETAS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
SPLITS = 20  # random splits of the problems into halves: one split's beta moves with how ~22 problems fall


def five_of(sample_set: SampleSet, models: list[str], rng: random.Random) -> SampleSet:
    chosen = set(rng.sample(models, 5))
    picked = [c for c in sample_set.candidates if c.model in chosen]
    candidates = [c.model_copy(update={"index": i}) for i, c in enumerate(picked)]
    return sample_set.model_copy(update={"candidates": candidates, "requested_n": len(candidates)})


def right(aggregator, sample_set: SampleSet) -> tuple[bool, float]:
    started = time.perf_counter()
    try:
        answer = aggregator.invoke(sample_set).answer
    except AggregationError:
        answer = None
    return answer is not None and equivalent(answer, sample_set.gold), time.perf_counter() - started


def gain_interval(wins: list[bool], base: list[bool], rng: random.Random) -> str:
    diffs = [int(a) - int(b) for a, b in zip(wins, base, strict=True)]
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return f"{100 * statistics.fmean(diffs):+.1f} [{100 * means[50]:+.1f}, {100 * means[1949]:+.1f}]"


def shuffled_halves(problems: list[str], rng: random.Random) -> list[set[str]]:
    """`problems` shuffled in place by `rng` and split into two halves, the settings of each fit on the other."""
    rng.shuffle(problems)
    return [set(problems[: len(problems) // 2]), set(problems[len(problems) // 2 :])]


def cross_fit(folder: str, rows: dict[str, list[SampleSet]], rng: random.Random) -> None:
    """The SSA in `folder` uncalibrated on each row's sets, then decided with settings fit on the other half of the
    problems (`training.calibrate`'s fit, over both rows), against its own vote on the same sets."""
    raw = load_trained_aggregator(folder, temperature=1.0, threshold=0.0)
    outcomes = {label: [(s.id, o) for s, o in outcomes_of(raw, sets, desc=label)] for label, sets in rows.items()}
    halves = shuffled_halves(sorted({problem for outs in outcomes.values() for problem, _ in outs}), rng)
    # per row and set: right as calibrated (the fit threshold), right with no deferral (threshold 0), vote right
    decided: dict[str, list[tuple[bool, bool, bool]]] = defaultdict(list)
    for held, fit_on in (halves, halves[::-1]):
        fit_rows = {label: [o for problem, o in outs if problem in fit_on] for label, outs in outcomes.items()}
        temperature, vote_weight = fit_temperature(fit_rows)
        threshold, _ = choose(fit_rows, temperature, vote_weight)
        print(
            f"fit on {len(fit_on)} problems: temperature {temperature}, vote weight {vote_weight}, "
            f"threshold {threshold}"
        )
        for label, outs in outcomes.items():
            decided[label] += [(decides_right(o, temperature, threshold, vote_weight),
                                decides_right(o, temperature, 0.0, vote_weight), o.vote_right)
                               for problem, o in outs if problem in held]  # fmt: skip
    for label, triples in decided.items():
        wins, undeferred, vote = ([t[i] for t in triples] for i in range(3))
        print(
            f"{label}: {len(triples)} sets; its own vote {100 * statistics.fmean(vote):.1f}; recalibrated (cross-fit) "
            f"{100 * statistics.fmean(wins):.1f}, over its own vote {gain_interval(wins, vote, rng)}; the same "
            f"without deferring {100 * statistics.fmean(undeferred):.1f}, {gain_interval(undeferred, vote, rng)}"
        )


def auc(positive: list[float], negative: list[float]) -> float:
    """The chance that a right candidate scores above a wrong one (ties count half)."""
    pairs = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return pairs / max(len(positive) * len(negative), 1)


def decided_by_halves(
    scored: list[tuple[SampleSet, dict[int, float]]], grid: dict[float, list[bool]], halves: list[set[str]]
) -> tuple[list[bool], list[float]]:
    """Each set right or wrong as decided with the beta that did best on the other half's problems; the two betas."""
    wins, betas = [False] * len(scored), []
    for held, fit_on in (halves, halves[::-1]):
        fit = [i for i, (s, _) in enumerate(scored) if s.id in fit_on]
        betas.append(max(BETAS, key=lambda b: (sum(grid[b][i] for i in fit), -b)))
        for i, (s, _) in enumerate(scored):
            if s.id in held:
                wins[i] = grid[betas[-1]][i]
    return wins, betas


def verifier_report(folder: str, pools: dict[str, list[SampleSet]], rng: random.Random, dtype: str = "auto") -> None:
    """The verifier in `folder` on every row's sets: its scores (one batch of calls per set, each candidate scored
    once over the draws), then the vote with beta times its log-odds added, beta cross-fit by halves of the problems."""
    style = SSAStyle.from_dict(json.loads((Path(folder) / AGGREGATOR_FILE).read_text(encoding="utf-8"))["style"])
    model = local_model(None, folder, max_tokens=1, dtype=dtype)
    own = WeightedVote.load(Path(folder) / WEIGHTS_FILE).weight_of
    cache: dict[tuple[str, str], float] = {}  # by set and model: the draws share candidates
    correct: dict[tuple[str, str], bool] = {}
    seconds = []
    for label, pool in pools.items():
        scored = []
        for s in pool:
            missing = s.model_copy(update={"candidates": [c for c in s.candidates if (s.id, c.model) not in cache]})
            if missing.candidates:
                started = time.perf_counter()
                fresh = verifier_scores(model, missing, style)
                if len(missing.candidates) == len(s.candidates):  # a whole set scored: its time is a set's
                    seconds.append(time.perf_counter() - started)
                cache.update({(s.id, c.model): fresh[c.index] for c in missing.candidates if c.index in fresh})
                correct.update({(s.id, c.model): bool(c.params["correct"]) for c in missing.candidates})
            scores = {c.index: cache[(s.id, c.model)] for c in s.candidates if (s.id, c.model) in cache}
            scored.append((s, scores))
        problems = sorted({s.id for s, _ in scored})
        stream = random.Random(f"halves of {label}")  # its own stream: the printed intervals do not move the splits
        splits = [shuffled_halves(problems, stream) for _ in range(SPLITS)]  # each shuffles the last one's order
        print(f"\nverifier, {label}: {len(scored)} sets")
        majority = [right(MajorityVote(), s)[0] for s, _ in scored]
        unlabelled = fit_weighted_vote([s.model_copy(update={"gold": None}) for s in pool], supervised=False)
        bases = {"its own vote": own, "majority": None, "weighted without labels": unlabelled.weight_of}
        for base_label, base in bases.items():
            # right or wrong at every beta, per set; then each half decided with the beta that did best on the other
            grid = {b: [right(verified_vote(base, scores, b), s)[0] for s, scores in scored] for b in BETAS}
            plain = grid[0.0]
            decided = [decided_by_halves(scored, grid, halves) for halves in splits]
            wins, betas = decided[0]
            print(f"  {base_label}: beta {betas[0]} and {betas[1]}, each fit on the other half of the problems")
            print(
                f"  {base_label} {100 * statistics.fmean(plain):.1f}; + verifier (cross-fit) "
                f"{100 * statistics.fmean(wins):.1f}, over {base_label} {gain_interval(wins, plain, rng)}"
                + (f", over majority {gain_interval(wins, majority, rng)}" if base is not None else "")
            )
            gains = sorted(100 * (statistics.fmean(w) - statistics.fmean(plain)) for w, _ in decided)
            print(
                f"  {base_label}, {SPLITS} splits into halves: over {base_label} {statistics.fmean(gains):+.1f} on "
                f"average (from {gains[0]:+.1f} to {gains[-1]:+.1f}; +1 or more in {sum(g >= 1 for g in gains)})"
            )
        alone = [right(best_verified(scores), s)[0] for s, scores in scored]
        print(f"  verifier alone (best of five) {100 * statistics.fmean(alone):.1f}, over majority "
              f"{gain_interval(alone, majority, rng)}")  # fmt: skip
    right_scores = [v for key, v in cache.items() if correct[key]]
    wrong_scores = [v for key, v in cache.items() if not correct[key]]
    print(
        f"\nverifier AUC over {len(cache)} candidates: {auc(right_scores, wrong_scores):.3f}; "
        f"{statistics.median(seconds):.2f} s median, {sorted(seconds)[int(0.9 * len(seconds))]:.2f} s p90 per set"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=4)
    parser.add_argument("--ssa-draws", type=int, default=1)
    parser.add_argument("--ssa", metavar="FOLDER", help="a trained SSA folder (default: the shipped SSA)")
    parser.add_argument("--validation-of", metavar="DATA_DIR", help="only the problems DATA_DIR's build validates on")
    parser.add_argument("--recalibrate", action="store_true", help="also refit the calibration here, cross-fit")
    parser.add_argument("--verifier", metavar="FOLDER", help="a per-candidate verifier (build --format verify)")
    parser.add_argument("--verifier-dtype", default="auto", help="the verifier's dtype (auto: bfloat16 where fast)")
    parser.add_argument("--report", action="store_true", help="the report split (id %% 4 == 3): the final report")
    args = parser.parse_args()
    if not 1 <= args.ssa_draws <= args.draws:
        parser.error(f"--ssa-draws must be between 1 and --draws ({args.draws}); got {args.ssa_draws}")
    if args.report and (args.validation_of or args.recalibrate or args.verifier):
        parser.error("--report reports what is shipped: no label of the report split fits or chooses anything "
                     "(drop --validation-of, --recalibrate and --verifier)")  # fmt: skip
    build = load_zeroeval("build")
    sets = load_zeroeval("report") if args.report else build
    if args.validation_of:
        held_out = {s.id for s in read_sample_sets(f"{args.validation_of}/validation_sets.jsonl")}
        sets = [s for s in sets if s.id in held_out]
    accuracy: dict[str, list[bool]] = defaultdict(list)
    for s in build if args.report else sets:  # the report split's own grades choose nothing
        for c in s.candidates:
            accuracy[c.model].append(c.params["correct"])
    ranked = sorted(accuracy, key=lambda m: -statistics.fmean(accuracy[m]))
    split = "report split, models ranked on the build split" if args.report else "build split"
    print(f"{len(sets)} problems ({split}); models {len(ranked)}; strongest: {', '.join(ranked[:10])}")
    rng = random.Random(0)
    pools = {
        "five random models": [five_of(s, ranked, rng) for s in sets for _ in range(args.draws)],
        "five of the ten strongest": [five_of(s, ranked[:10], rng) for s in sets for _ in range(args.draws)],
    }
    ssa = load_trained_aggregator(args.ssa) if args.ssa else load_aggregator("ssa")
    own_vote = ssa.weights or MajorityVote()
    ssa_rows = {}
    labelled = fit_weighted_vote(build) if args.report else None  # a graded log of the same models
    for label, pool in pools.items():
        unsupervised = fit_weighted_vote([s.model_copy(update={"gold": None}) for s in pool], supervised=False)
        aggregators = {
            "majority": MajorityVote(),
            "weighted (shipped)": load_aggregator("weighted"),
            "weighted (fit without labels)": unsupervised,
        }
        if labelled is not None:
            aggregators["weighted (fit with build labels)"] = labelled
        results = {name: [right(agg, s)[0] for s in pool] for name, agg in aggregators.items()}
        print(f"\n{label}: {len(pool)} sets")
        print(f"{'aggregator':<32} {'accuracy %':>10}  gain over majority [95%]")
        for name, wins in results.items():
            print(f"{name:<32} {100 * statistics.fmean(wins):>10.1f}  {gain_interval(wins, results['majority'], rng)}")
        ssa_sets = [s for i, s in enumerate(pool) if i % args.draws < args.ssa_draws]  # each problem's first draws
        ssa_rows[label] = ssa_sets
        timed = [right(ssa, s) for s in ssa_sets]
        base = [right(MajorityVote(), s)[0] for s in ssa_sets]
        vote = [right(own_vote, s)[0] for s in ssa_sets]
        unlabelled = [right(unsupervised, s)[0] for s in ssa_sets]
        wins = [w for w, _ in timed]
        seconds = sorted(t for _, t in timed)
        label = "ssa (in-process)" if args.ssa else "ssa (shipped, in-process)"
        print(f"{'its own vote':<32} {100 * statistics.fmean(vote):>10.1f}  {gain_interval(vote, base, rng)}")
        print(
            f"{label:<32} {100 * statistics.fmean(wins):>10.1f}  "
            f"{gain_interval(wins, base, rng)} on {len(ssa_sets)} sets; over its own vote "
            f"{gain_interval(wins, vote, rng)}; over the vote fit without labels "
            f"{gain_interval(wins, unlabelled, rng)}; "
            f"{statistics.median(seconds):.2f} s median, {seconds[int(0.9 * len(seconds))]:.2f} s p90 per set"
        )
    if args.verifier:
        verifier_report(args.verifier, pools, random.Random(2), args.verifier_dtype)
    if args.recalibrate:
        print("\nrecalibrated on these problems, cross-fit over two halves")
        cross_fit(args.ssa or str(SHIPPED_SSA), ssa_rows, random.Random(1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
