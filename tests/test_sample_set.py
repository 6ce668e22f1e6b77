import pytest
from pydantic import ValidationError

from aggregate_graph import Aggregation, Candidate, SampleSet
from aggregate_graph.jsonl import read_jsonl, write_jsonl
from aggregate_graph.log import read_sample_sets
from aggregate_graph.sample_set import Usage


def test_json_round_trip_keeps_everything():
    s = SampleSet(
        question="What is 2+2?",
        gold="4",
        candidates=[
            Candidate(
                index=1,
                text="#### 4",
                answer="4",
                model="m",
                params={"temperature": 0.7},
                usage=Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7),
                latency_s=0.1,
                finish_reason="stop",
            ),
            Candidate(index=0, error="RateLimitError: slow down", model="m"),
        ],
        aggregation=Aggregation(method="majority", answer="4", text="#### 4", votes={"4": 1.0}, support=[1]),
        metadata={"waves": 1},
    )
    again = SampleSet.model_validate_json(s.model_dump_json())
    assert again == s
    assert [c.index for c in again.candidates] == [0, 1]  # request order, whatever order they came in
    assert [c.index for c in again.failed] == [0] and [c.index for c in again.succeeded] == [1]


def test_duplicate_indices_are_rejected():
    with pytest.raises(ValidationError, match="duplicate candidate indices"):
        SampleSet(question="q", candidates=[Candidate(index=0), Candidate(index=0)])


def test_usage_counts_a_shared_n_request_once():
    shared = Usage(prompt_tokens=100, completion_tokens=30, total_tokens=130)
    s = SampleSet(
        question="q",
        candidates=[
            Candidate(index=0, usage=shared, request_id="a"),
            Candidate(index=1, usage=shared, request_id="a"),
            Candidate(index=2, usage=Usage(prompt_tokens=100, completion_tokens=10, total_tokens=110), request_id="b"),
        ],
    )
    assert s.usage == Usage(prompt_tokens=200, completion_tokens=40, total_tokens=240)


def test_non_utf8_text_is_made_valid_and_serialisable():
    c = Candidate(index=0, text=b"caf\xe9 \xff answer 3")
    assert "\ufffd" in c.text and c.text.endswith("answer 3")
    lone_surrogate = Candidate(index=1, text="x \udcff y")
    assert lone_surrogate.text == "x ? y"
    s = SampleSet(question=b"q\xff", candidates=[c, lone_surrogate])
    assert SampleSet.model_validate_json(s.model_dump_json().encode()).candidates[1].text == "x ? y"


def test_every_text_field_is_made_serialisable():
    c = Candidate(index=0, text="t", answer="7\ud800", model="m\udcff", error="boom \udc80", finish_reason="stop")
    s = SampleSet(
        question="q",
        gold="7\ud800",
        candidates=[c],
        aggregation=Aggregation(method="m", answer="7\ud800", text="x\ud800"),
    )
    again = SampleSet.model_validate_json(s.model_dump_json())
    assert again.candidates[0].answer == "7?" and again.aggregation.text == "x?" and again.gold == "7?"


def test_jsonl_files_are_read_by_one_reader_that_names_the_bad_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2\n')
    rows = read_jsonl(path)
    assert next(rows) == {"a": 1}
    with pytest.raises(ValueError, match=r"rows\.jsonl:3: not JSON"):
        next(rows)
    path.write_text(SampleSet(question="q").model_dump_json() + '\n{"candidates": []}\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: not a sample set"):
        list(read_sample_sets(path))


def test_jsonl_rows_written_are_read_back(tmp_path):
    path = tmp_path / "new" / "rows.jsonl"
    assert write_jsonl(path, [{"q": "é"}, [1, 2]]) == 2  # the folder is made; non-ASCII is kept as written
    assert path.read_text(encoding="utf-8") == '{"q": "é"}\n[1, 2]\n'
    assert list(read_jsonl(path)) == [{"q": "é"}, [1, 2]]
