"""The vote classes' vote against majority on one LM's own candidates, sources anonymised (a user sampling one
model), cross-fit over the unreserved Faithful-CoT problems: two halves, each scored with weights fit on the other.

    python benchmarks/content_kinds.py [--seed 1] [--draws 20]

Prints, per LM, majority vote's accuracy and the weighted vote's gain over it with the candidates shuffled
(`--draws` orders per set, as `aggregate-train evaluate --shuffle true` and a real request's order do: a tie goes
to whichever tied answer comes first) and in the pool's request order, then how often each vote class is right,
so the gain can be read against the classes' reliabilities. The request order puts each LM's bare answer first,
which hands majority's ties to the least reliable candidate: it overstates the gain (+4.5 on average over four
LMs against +2.3 shuffled, for the vote before the checked classes; the reserved problems read +2.1). The
reserved problems (GSM8K test id % 5 == 0) are never read.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict

from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.aggregators.fitting import fit_weighted_vote
from aggregate_graph.reading.answers import equivalent
from aggregate_graph.reading.kinds import VOTE_CLASSES, vote_class
from training.data import one_model
from training.evaluate import subset
from training.pools import is_reserved, load_faithful_cot

MAIN_LMS = ("code002", "text002", "text003", "gpt-3.5-turbo")  # the single-model rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="how the problems are split in two halves")
    # 3 orders per set left a mean of four LMs' gains ±0.4 from one draw to the next: ties are many
    p.add_argument("--draws", type=int, default=20, help="shuffled orders of each set's candidates")
    args = p.parse_args()
    sets = [s for s in load_faithful_cot() if not is_reserved(s)]
    order = list(range(len(sets)))
    rng = random.Random(args.seed)
    rng.shuffle(order)
    halves = [[sets[i] for i in order[::2]], [sets[i] for i in order[1::2]]]
    lms = sorted({c.model for s in sets for c in s.candidates})
    # right answers: [weighted, majority] shuffled, [weighted, majority] in request order; then sets, problems
    right: dict[str, list[int]] = {lm: [0] * 6 for lm in lms}
    by_class: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    majority = MajorityVote()
    for half in range(2):
        vote = fit_weighted_vote(halves[1 - half])
        for sample_set in halves[half]:
            for lm in lms:
                mine = one_model(sample_set, lm)
                if not mine.candidates:
                    continue
                tally = right[lm]
                for _ in range(args.draws):
                    drawn = subset(mine, len(mine.candidates), rng, shuffle=True)  # as evaluate draws
                    tally[0] += equivalent(vote.invoke(drawn).answer, sample_set.gold)
                    tally[1] += equivalent(majority.invoke(drawn).answer, sample_set.gold)
                    tally[4] += 1
                tally[2] += equivalent(vote.invoke(mine).answer, sample_set.gold)
                tally[3] += equivalent(majority.invoke(mine).answer, sample_set.gold)
                tally[5] += 1
                for c in mine.candidates:
                    if c.answer is not None:
                        hits = by_class[(lm, vote_class(c))]
                        hits[0] += equivalent(c.answer, sample_set.gold)
                        hits[1] += 1
    print(f"\nOne LM's five prompts, anonymised, cross-fit over {len(sets)} unreserved problems (seed {args.seed}, "
          f"{args.draws} shuffled orders per set); right % per vote class")  # fmt: skip
    print(f"{'LM':<15} {'drawn':>5} {'majority':>9} {'gain':>6} {'in order':>9}  "
          + " ".join(f"{k:>12}" for k in VOTE_CLASSES))  # fmt: skip
    gains = []
    for lm, (vote_right, majority_right, vote_ordered, majority_ordered, drawn, problems) in right.items():
        gain = 100 * (vote_right - majority_right) / drawn
        gains += [gain] if lm in MAIN_LMS else []
        cells = " ".join(f"{100 * r / n:>11.0f}%" if n else f"{'-':>12}" for r, n in
                         (by_class[(lm, k)] for k in VOTE_CLASSES))  # fmt: skip
        print(f"{lm:<15} {drawn:>5} {100 * majority_right / drawn:>8.1f}% {gain:>+6.1f} "
              f"{100 * (vote_ordered - majority_ordered) / problems:>+9.1f}  {cells}")  # fmt: skip
    print(f"mean gain of {', '.join(MAIN_LMS)}: {sum(gains) / len(gains):+.2f} (shuffled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
