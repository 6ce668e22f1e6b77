"""Answer reading, old against new: accuracy per family of tests/data/answer_corpus.jsonl, and speed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/answer_reading.py [--reps 5] [--no-pools] [--data ../shared/data]

- old: `stated_answer` of aggregate_graph/answers.py and answer_prose.py as of commit 37da138 (read with `git show`
  into temporary modules, as benchmarks/check_prose_extraction.py compares before and after);
- new: `aggregate_graph.reading.answer_types.read_answers`.

Accuracy: a row counts when the reader's answer for its text (read in its set: the text, then the row's `others`)
is `answers.equivalent` to the expected one, or None where None is expected: both readers are judged by the same
comparison.

Speed: texts/s over the corpus, each text read alone (a one-text set for the new reader), repeated `--reps` times;
and whole-pool throughput: every candidate text of the Faithful-CoT COT files (6 LMs, problems with id % 5 != 0)
and of the ZeroEval MATH level-5 sets with id % 4 == 1, the new reader reading each problem's set at once. The new
reader's per-text cache of stated answers is emptied before each timed pass: every pass reads every text afresh.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from aggregate_graph.reading import answers
from aggregate_graph.reading.answer_types import read_answers

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "answer_corpus.jsonl"
DEFAULT_DATA = ROOT.parent / "shared" / "data"
OLD_COMMIT = "37da138"
FCOT_LMS = ("code001", "code002", "text002", "text003", "gpt-3.5-turbo", "gpt4")


def load_old_reader(commit: str = OLD_COMMIT) -> ModuleType:
    """answers.py of `commit`, importing that commit's answer_prose.py (not today's), as module `answers_old`."""
    folder = Path(tempfile.mkdtemp(prefix="answers_old_"))
    for name in ("answers", "answer_prose"):
        source = subprocess.run(
            ["git", "show", f"{commit}:aggregate_graph/{name}.py"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        source = source.replace("from aggregate_graph.answer_prose import", "from answer_prose_old import")
        (folder / f"{name}_old.py").write_text(source, encoding="utf-8")
    modules = {}
    for name in ("answer_prose_old", "answers_old"):  # the prose module first: answers_old imports it
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        modules[name] = module
    return modules["answers_old"]


def forget_statements() -> None:
    """Empty the new reader's per-text cache of stated answers, so that a repeat reads each text afresh."""
    answers._statement.cache_clear()


def correct(found: str | None, expected: str | None, same: Callable) -> bool:
    return found is None if expected is None else bool(same(found, expected))


def texts_per_second(fn: Callable[[], int], reps: int) -> float:
    fn()  # warm the caches of both readers alike (regexes, math-verify grammar)
    start, count = time.perf_counter(), 0
    for _ in range(reps):
        count += fn()
    return count / (time.perf_counter() - start)


def _lines(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def pool_sets(data: Path) -> list[tuple[str, list[str]]]:
    """(question, texts) per problem: Faithful-CoT COT (6 LMs; id % 5 != 0) and ZeroEval (id % 4 == 1)."""
    questions = [q["question"] for q in _lines(data / "gsm8k" / "test.jsonl")]
    by_id: dict[int, list[str]] = defaultdict(list)
    for lm in FCOT_LMS:
        for p in _lines(data / "samples" / "faithful_cot_gsm8k" / f"{lm}_COT" / "predictions.jsonl"):
            if p["id"] % 5 != 0:
                by_id[p["id"]].append(p["completion"])
    sets = [(questions[i], texts) for i, texts in sorted(by_id.items())]
    for p in _lines(data / "samples" / "zeroeval_math_l5" / "pools_odd.jsonl"):
        if p["id"] % 4 == 1:
            sets.append((p["problem"], [s["output"] for s in p["samples"]]))
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (pool throughput)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of the corpus for texts/s")
    parser.add_argument("--no-pools", action="store_true", help="skip the whole-pool throughput")
    parser.add_argument("--misses", type=Path, help="write each row a reader got wrong here (JSON lines)")
    args = parser.parse_args()

    old = load_old_reader()
    same = answers.equivalent
    print(f"old reader: aggregate_graph/answers.py at {OLD_COMMIT}; new reader: answer_types.read_answers")
    print("compared with: answers.equivalent\n")

    rows = _lines(args.corpus)
    by_family: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_family[row["family"]].append(row)

    def new_answer(row: dict) -> str | None:
        texts = [row["text"], *row.get("others", [])]
        return read_answers(row["question"], texts, row.get("answer_type", "auto")).answers[0]

    def read_old(rs: list[dict]) -> int:
        for r in rs:
            old.stated_answer(r["text"])
        return len(rs)

    def read_new(rs: list[dict]) -> int:
        forget_statements()
        for r in rs:  # each text alone: a one-text set
            read_answers(r["question"], [r["text"]], r.get("answer_type", "auto"))
        return len(rs)

    def table_row(name: str, n: int, old_ok: int, new_ok: int, rs: list[dict]) -> str:
        old_rate = texts_per_second(lambda: read_old(rs), args.reps)
        new_acc, new_rate = f"{100 * new_ok / n:.1f}%", f"{texts_per_second(lambda: read_new(rs), args.reps):.0f}"
        return f"{name:<24} {n:>5} {100 * old_ok / n:>7.1f}% {new_acc:>8} {old_rate:>12.0f} {new_rate:>12}"

    header = f"{'family':<24} {'rows':>5} {'old acc':>8} {'new acc':>8} {'old texts/s':>12} {'new texts/s':>12}"
    print(header)
    print("-" * len(header))
    totals: Counter[str] = Counter()
    missed: list[dict] = []
    for family, family_rows in by_family.items():
        old_ok = new_ok = 0
        for row in family_rows:
            found_old = old.stated_answer(row["text"])[0]
            ok_old = correct(found_old, row["expected"], same)
            found_new = new_answer(row)
            ok_new = correct(found_new, row["expected"], same)
            old_ok += ok_old
            new_ok += ok_new
            if not ok_old or not ok_new:
                missed.append({"family": family, "source": row["source"], "expected": row["expected"],
                               "old": found_old, "new": found_new, "old_ok": ok_old, "new_ok": ok_new,
                               "tail": row["text"][-200:]})  # fmt: skip
        totals.update(rows=len(family_rows), old=old_ok, new=new_ok)
        print(table_row(family, len(family_rows), old_ok, new_ok, family_rows))
    print("-" * len(header))
    print(table_row("total", totals["rows"], totals["old"], totals["new"], rows))
    if args.misses:
        with open(args.misses, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(m, ensure_ascii=False) + "\n" for m in missed)

    if args.no_pools:
        return
    if not (args.data / "samples").is_dir():
        print(f"\npool throughput: skipped ({args.data} has no samples/)")
        return
    sets = pool_sets(args.data)
    n_texts = sum(len(texts) for _, texts in sets)
    start = time.perf_counter()
    for _, texts in sets:
        for text in texts:
            old.stated_answer(text)
    old_pool = n_texts / (time.perf_counter() - start)
    forget_statements()
    start = time.perf_counter()
    for question, texts in sets:
        read_answers(question, texts)
    new_pool = n_texts / (time.perf_counter() - start)
    print(f"\nwhole pools ({len(sets)} sets, {n_texts} texts: Faithful-CoT COT x 6 LMs with id % 5 != 0, "
          f"ZeroEval id % 4 == 1): old {old_pool:.0f} texts/s, new {new_pool:.0f} texts/s "
          f"(new: one read_answers call per set)")  # fmt: skip


if __name__ == "__main__":
    main()
