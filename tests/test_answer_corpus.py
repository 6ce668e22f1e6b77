"""The answer reader on a corpus of real and real-looking model replies (tests/data/answer_corpus.jsonl).

One case per row: `read_answers` reads the row's text in its set (the text first, then the row's `others`) and must
state the row's expected answer, compared by `answers.equivalent`; a row whose text states no answer expects None.
The corpus and where each text comes from: tests/data/README.md; it is rebuilt by benchmarks/build_answer_corpus.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from aggregate_graph.answer_types import read_answers
from aggregate_graph.answers import equivalent

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


@pytest.mark.parametrize("row", ROWS, ids=_ids(ROWS))
def test_reads_the_stated_answer(row: dict) -> None:
    texts = [row["text"], *row.get("others", [])]
    reading = read_answers(row["question"], texts, row.get("answer_type", "auto"))
    found, expected = reading.answers[0], row["expected"]
    message = (
        f"\n  source:   {row['source']}\n  text:     {_head(row['text'])}\n  type:     {reading.type}"
        f"\n  found:    {found!r}\n  expected: {expected!r}"
    )
    if expected is None:
        assert found is None, message
    else:
        assert equivalent(found, expected), message


def test_corpus_is_large_and_varied() -> None:
    families = Counter(row["family"] for row in ROWS)
    assert len(ROWS) >= 400, f"{len(ROWS)} rows"
    assert len(families) >= 12, families
    for row in ROWS:
        assert {"family", "source", "question", "text", "expected"} <= row.keys(), row
        assert row["expected"] is None or isinstance(row["expected"], str), row
