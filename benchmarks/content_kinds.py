"""The content kinds' vote against majority on one LM's own candidates, sources anonymised (a user sampling one
model), cross-fit over the unreserved Faithful-CoT problems: two halves, each scored with weights fit on the other.

    python benchmarks/content_kinds.py [--seed 1]

Prints, per LM, majority vote's accuracy, the kinds' vote's gain over it, and how often each kind is right, so the
gain can be read against the kinds' reliabilities (the vote weighs all work without an arithmetic slip alike: a
strong LM's prose is as good as its programs, a weak LM's is not; work with a slip is nearly always wrong). The
reserved problems (GSM8K test id % 5 == 0) are never read.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict

from aggregate_graph.aggregators import MajorityVote, WeightedVote
from aggregate_graph.aggregators.kinds import KINDS, content_kind
from aggregate_graph.answers import equivalent
from aggregate_graph.pools import is_reserved, load_faithful_cot
from training.data import one_model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="how the problems are split in two halves")
    args = p.parse_args()
    sets = [s for s in load_faithful_cot() if not is_reserved(s)]
    order = list(range(len(sets)))
    random.Random(args.seed).shuffle(order)
    halves = [[sets[i] for i in order[::2]], [sets[i] for i in order[1::2]]]
    lms = sorted({c.model for s in sets for c in s.candidates})
    right: dict[str, list[int]] = {lm: [0, 0, 0] for lm in lms}  # kinds' vote, majority, sets
    by_kind: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for half in range(2):
        vote = WeightedVote.fit(halves[1 - half])
        for sample_set in halves[half]:
            for lm in lms:
                mine = one_model(sample_set, lm)
                if not mine.candidates:
                    continue
                right[lm][0] += equivalent(vote.invoke(mine).answer, sample_set.gold)
                right[lm][1] += equivalent(MajorityVote().invoke(mine).answer, sample_set.gold)
                right[lm][2] += 1
                for c in mine.candidates:
                    if c.answer is not None:
                        tally = by_kind[(lm, content_kind(c))]
                        tally[0] += equivalent(c.answer, sample_set.gold)
                        tally[1] += 1
    print(f"\nOne LM's five prompts, anonymised, cross-fit over {len(sets)} unreserved problems (seed {args.seed})")
    print(f"{'LM':<15} {'sets':>5} {'majority':>9} {'kinds':>7} {'gain':>6}  " + " ".join(f"{k:>14}" for k in KINDS))
    for lm, (kinds, majority, count) in right.items():
        rates = [by_kind[(lm, k)] for k in KINDS]
        cells = " ".join(f"{100 * r / n:>13.0f}%" if n else f"{'-':>14}" for r, n in rates)
        print(f"{lm:<15} {count:>5} {100 * majority / count:>8.1f}% {100 * kinds / count:>6.1f}% "
              f"{100 * (kinds - majority) / count:>+6.1f}  {cells}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
