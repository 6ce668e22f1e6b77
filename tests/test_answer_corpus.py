"""The answer reader on a corpus of real and real-looking model replies (tests/data/answer_corpus.jsonl).

`read_answers` reads each row's text in its set (the text first, then the row's `others`) and should find the row's
expected answer, compared by `answers.equivalent` (a row whose text states no answer expects None): every row of the
named families, and at least 98% of the whole corpus.
The corpus and where each text comes from: tests/data/README.md; it is rebuilt by benchmarks/build_answer_corpus.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from aggregate_graph.reading.answer_types import read_answers
from aggregate_graph.reading.answers import equivalent

CORPUS = Path(__file__).parent / "data" / "answer_corpus.jsonl"


def _rows() -> list[dict]:
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


ROWS = _rows()


def _ids(rows: list[dict]) -> list[str]:
    seen: Counter[str] = Counter()
    ids = []
    for row in rows:
        ids.append(f"{row['family']}-{seen[row['family']]:03d}")
        seen[row["family"]] += 1
    return ids


def _head(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}… …{flat[-120:]}"


# The families issue 35 names — choices, yes/no, names, labels, JSON replies, "Answer:"-first reasoning — and the
# harnesses' formats: every row must read right. The others (prose from real pools, the embedded model's own
# replies) hold hard cases the reader is allowed to miss, within `MIN_ACCURACY` of the whole corpus.
NAMED = {
    "zeroeval_json", "answer_first_reasoning", "minerva", "simple_evals", "lighteval_lm_eval", "choice_letters",
    "choice_option_text", "boolean", "short_span", "labels", "markdown_last_line",
}  # fmt: skip
MIN_ACCURACY = 0.98


def _read(row: dict) -> tuple[str | None, bool, str]:
    """What the reader finds for a row's text (in its set), whether that is the expected answer, and a report."""
    texts = [row["text"], *row.get("others", [])]
    reading = read_answers(row["question"], texts, row.get("answer_type", "auto"))
    found, expected = reading.answers[0], row["expected"]
    right = found is None if expected is None else equivalent(found, expected)
    report = (
        f"\n  source:   {row['source']}\n  text:     {_head(row['text'])}\n  type:     {reading.type}"
        f"\n  found:    {found!r}\n  expected: {expected!r}"
    )
    return found, right, report


NAMED_ROWS = [row for row in ROWS if row["family"] in NAMED]


@pytest.mark.parametrize("row", NAMED_ROWS, ids=_ids(NAMED_ROWS))
def test_named_families_read_every_stated_answer(row: dict) -> None:
    _, right, report = _read(row)
    assert right, report


def test_the_whole_corpus_reads_at_least_98_percent() -> None:
    misses = [report for row in ROWS if not (read := _read(row))[1] for report in [read[2]]]
    accuracy = 1 - len(misses) / len(ROWS)
    assert accuracy >= MIN_ACCURACY, f"{accuracy:.1%} of {len(ROWS)} rows; misses:" + "".join(misses)


def test_corpus_is_large_and_varied() -> None:
    families = Counter(row["family"] for row in ROWS)
    assert len(ROWS) >= 400, f"{len(ROWS)} rows"
    assert len(families) >= 12, families
    for row in ROWS:
        assert {"family", "source", "question", "text", "expected"} <= row.keys(), row
        assert row["expected"] is None or isinstance(row["expected"], str), row
