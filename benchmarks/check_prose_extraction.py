"""Before/after check for a change to `answers.extract_answer`: on every candidate text of the real pools
(Faithful-CoT 30 configs, the 4 GPT-3 systems, Qwen2.5-Math), which extractions change, and the majority-vote
accuracy per pool, both with the pools' own recorded answers (what tests/test_pools.py pins) and with answers
extracted from the texts by `stated_answer`.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/check_prose_extraction.py --before /tmp/answers_orig.py

`--before` is the previous answers.py (e.g. `git show 37da138:aggregate_graph/answers.py > /tmp/answers_orig.py`),
loaded as a separate module; the current one is the package's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.reading import answers
from training.pools import load_faithful_cot, load_gpt3_solutions, load_qwen_math, pool_metrics


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("answers_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_extracted(sets: list[SampleSet], module: ModuleType) -> list[SampleSet]:
    """The sets with each candidate's answer re-extracted from its text by `module.stated_answer`."""
    out = []
    for s in sets:
        candidates = []
        for c in s.candidates:
            answer, reason = module.stated_answer(c.text)
            candidates.append(c.model_copy(update={"answer": answer, "abstention": reason}))
        out.append(s.model_copy(update={"candidates": candidates}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the previous answers.py")
    parser.add_argument("--changes", default="/tmp/prose/changes.jsonl", help="where to write the changed rows")
    args = parser.parse_args()
    before = load_module(args.before)
    pools = {"faithful_cot": load_faithful_cot(), "gpt3": load_gpt3_solutions(), "qwen_math": load_qwen_math()}
    Path(args.changes).parent.mkdir(parents=True, exist_ok=True)
    with open(args.changes, "w", encoding="utf-8") as changes:
        for name, sets in pools.items():
            total = raw_changed = form_changed = stated_changed = 0
            qwen_agree = [0, 0, 0, 0]  # raw equal before/after, equivalent before/after
            for s in sets:
                for c in s.candidates:
                    total += 1
                    old, new = before.extract_answer(c.text), answers.extract_answer(c.text)
                    raw_changed += old != new
                    old_form, new_form = answers.normalize_answer(old), answers.normalize_answer(new)
                    form_changed += old_form != new_form
                    stated_changed += before.stated_answer(c.text) != answers.stated_answer(c.text)
                    if old != new:
                        row = {"pool": name, "set": s.id, "index": c.index, "gold": s.gold, "before": old,
                               "after": new, "tail": c.text[-300:]}  # fmt: skip
                        changes.write(json.dumps(row) + "\n")
                    if name == "qwen_math":
                        qwen_agree[0] += old == c.answer
                        qwen_agree[1] += new == c.answer
                        qwen_agree[2] += answers.equivalent(old, c.answer)
                        qwen_agree[3] += answers.equivalent(new, c.answer)
            loaded = pool_metrics(sets, MajorityVote())
            old_sets, new_sets = with_extracted(sets, before), with_extracted(sets, answers)
            old_m, new_m = pool_metrics(old_sets, MajorityVote()), pool_metrics(new_sets, MajorityVote())
            print(f"{name}: {total} candidates; extract_answer changed {raw_changed}, normal form changed "
                  f"{form_changed}, stated_answer changed {stated_changed}")  # fmt: skip
            print(f"  recorded answers (pinned): single {loaded['single']:.2f} maj {loaded['maj']:.2f} "
                  f"pass {loaded['pass']:.2f}")  # fmt: skip
            for label, m in (("before", old_m), ("after", new_m)):
                print(f"  extracted from text {label}: single {m['single']:.2f} maj {m['maj']:.2f} "
                      f"pass {m['pass']:.2f} unaggregated {m['unaggregated']}")  # fmt: skip
            if name == "qwen_math":
                print(f"  extract_answer vs Qwen's pred: the same string {qwen_agree[0]} -> {qwen_agree[1]}, "
                      f"equivalent {qwen_agree[2]} -> {qwen_agree[3]} of {total}")  # fmt: skip


if __name__ == "__main__":
    main()
