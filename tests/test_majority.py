"""MajorityVote as a Runnable over sample sets, and against a real multi-sample pool's reference numbers."""

import threading

import pytest

from aggregate_graph import AggregationError, Candidate, SampleSet
from aggregate_graph.aggregators import MajorityVote


def sample_set(answers, models=None):
    return SampleSet(
        question="q",
        candidates=[
            Candidate(index=i, text=f"#### {a}", answer=a, model=(models or ["m"] * len(answers))[i])
            for i, a in enumerate(answers)
        ],
    )


def test_votes_count_equivalent_answers_together():
    result = MajorityVote().invoke(sample_set([r"\frac{1}{2}", "0.5", "2", "1/2", None]))
    assert result.answer == "0.5" and result.votes == {"0.5": 3.0, "2": 1.0}
    assert result.support == [0, 1, 3] and result.tie is None and result.details["abstained"] == 1
    assert result.details["abstentions"] == {}  # None states nothing; abstentions: test_abstentions


def test_ties_go_to_the_earliest_candidate_and_are_reported():
    result = MajorityVote().invoke(sample_set(["7", "8", "8", "7"]))
    assert result.answer == "7" and result.tie == ["7", "8"]


def test_weights_by_model_name_and_by_function():
    s = sample_set(["7", "8", "8"], models=["strong", "weak", "weak"])
    assert MajorityVote(weights={"strong": 3.0}).invoke(s).answer == "7"
    assert MajorityVote(weights=lambda c: 0.1 if c.answer == "8" else 1.0).invoke(s).votes == {"7": 1.0, "8": 0.2}


async def test_async_and_dict_input():
    s = sample_set(["3", "3", "4"])
    assert (await MajorityVote().ainvoke(s.model_dump(mode="json"))).answer == "3"


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="aggregators take a SampleSet"):
        MajorityVote().invoke("not a sample set")
    with pytest.raises(AggregationError, match="no candidate stated an extractable final answer"):
        MajorityVote().invoke(sample_set([None, None]))


@pytest.mark.parametrize(
    ("answers", "on_the_loop"),
    [
        (["56", "56", "56.0"], True),  # one form: nothing to compare
        (["Paris", "paris", "Lyon"], True),  # words: grouped by their forms
        (["56", "57"], False),  # numbers compared by value (sympy, ~0.25 s to import)
        ([r"\frac{x}{2}", "x/2"], False),  # LaTeX: math-verify may take seconds on first sight
    ],
)
async def test_an_async_vote_stays_on_the_event_loop_only_where_it_takes_microseconds(answers, on_the_loop):
    class Recorded(MajorityVote):
        def aggregate(self, sample_set, config=None):
            threads.append(threading.get_ident())
            return super().aggregate(sample_set, config)

    threads = []
    result = await Recorded().ainvoke(sample_set(answers))
    assert result.answer == MajorityVote().invoke(sample_set(answers)).answer
    assert (threads == [threading.get_ident()]) is on_the_loop
