"""Abstentions ("The answer is unknown.", "cannot be determined", "[invalid]", …) do not vote: the candidate keeps its
text, gets `answer=None` and the reason in `abstention`, and every aggregator sees it as stating no answer."""

import pytest
from langchain_core.messages import HumanMessage

from aggregate_graph import AggregationError, Candidate, CandidatePolicy, SampleSet, build_aggregate_graph
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.aggregators.fitting import fit_weighted_vote
from aggregate_graph.aggregators.ssa import SSAStyle, render_ssa_prompt
from aggregate_graph.reading.answers import ABSTENTIONS, abstention, extract_answer, screen_answer, stated_answer
from tests.conftest import chat


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("We are not told the prices. The answer is unknown.", "unknown"),
        ("The answer is Unknown", "unknown"),
        ("The answer cannot be determined.", "cannot be determined"),
        ("She bought 3 bags, but the answer cannot be determined from this.", "cannot be determined"),
        ("The total can't be determined without the price.", "can't be determined"),
        ("The answer is: it could not be calculated.", "could not be calculated"),
        ("There is not enough information to answer.", "not enough information"),
        ("The problem does not give enough information about the 2 boxes.", "not give enough information"),
        ("Answer: insufficient information", "insufficient information"),
        ("The answer is N/A.", "n/a"),
        ("The answer is $\\text{N/A}$.", "n/a"),
        ("The answer is none.", "none"),
        ("The answer is **None**.", "none"),
        ("#### [invalid]", "[invalid]"),
        ("The answer is no answer.", "no answer"),
        ("so the limit is \\boxed{\\text{undefined}}", "undefined"),
        ("The final answer is indeterminate.", "indeterminate"),
        ("It is not possible to determine how many 5 cent coins there are.", "not possible to determine"),
        ("Without the weekday count, it is impossible to calculate the total.", "impossible to calculate"),
        ("We are unable to determine the price of 1 apple.", "unable to determine"),
        ("After 4 weeks the final amount is unknown.", "is unknown"),
        ("<answer>cannot be determined</answer>", "cannot be determined"),
    ],
)
def test_each_abstention_is_recorded_with_its_reason(text, reason):
    assert stated_answer(text) == (None, reason)


@pytest.mark.parametrize(
    "answer",
    ["unknown", "Unknown.", "cannot be determined", "not enough information", "N/A", "none", "[invalid]", "undefined"],
)
def test_abstention_of_an_extracted_answer(answer):
    assert abstention(answer) is not None
    assert screen_answer(answer) == (None, abstention(answer))
    assert screen_answer(answer, ()) == (answer, None)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("0, since none of the candles explode", "0"),  # a word inside an answer is not the answer
        ("The unknown is x = 4, so the answer is 4.", "4"),
        ("It cannot be determined by guessing. So we compute 5 + 3 = 8.", "8"),  # abstained, then answered
        ("The answer cannot be determined at first sight.\n#### 8", "8"),  # an explicit answer wins
        ("Na has 11 protons.\n#### 11", "11"),
        ("The unknown number of pencils is 72.", "72"),
    ],
)
def test_answers_that_only_mention_an_abstention_still_vote(text, answer):
    assert stated_answer(text) == (answer, None)


def test_the_last_number_does_not_vote_for_a_solution_that_ends_by_abstaining():
    text = "Jewelry rises 2.5% and gadgets 1.2%. The answer cannot be determined without the prices."
    assert extract_answer(text) == "1.2"  # extraction alone is unchanged: the last number
    assert stated_answer(text) == (None, "cannot be determined")
    # a real gpt-3.5-turbo answer (Faithful-CoT, GSM8K test 157): its last number, 40, is not an answer
    text = (
        "The answer cannot be determined as we do not know how far Kelly runs each time she goes to the 40-yard "
        "line and back."
    )
    assert stated_answer(text) == (None, "cannot be determined")
    # a cut-off solution (finish_reason "length") states nothing, so it abstains from nothing either
    assert stated_answer("We have 5 apples; not enough information yet, so", last_number=False) == (None, None)


def test_abstentions_are_configurable_for_domains_where_such_answers_are_legitimate():
    assert stated_answer("The answer is unknown.", abstentions=()) == ("unknown", None)
    without_none = tuple(p for p in ABSTENTIONS if p != r"^none$")
    assert stated_answer("Which of the sets is empty? The answer is none.", abstentions=without_none) == ("none", None)
    assert stated_answer("The answer is unknown.", abstentions=without_none) == (None, "unknown")
    assert stated_answer("The answer is pending.", abstentions=[r"^pending$"]) == (None, "pending")
    assert CandidatePolicy().abstentions == ABSTENTIONS and CandidatePolicy(abstentions=()).abstentions == ()


def candidates(*texts: str) -> list[Candidate]:
    out = []
    for i, text in enumerate(texts):
        answer, reason = stated_answer(text)
        out.append(Candidate(index=i, text=text, answer=answer, abstention=reason, model=f"m{i % 2}"))
    return out


def test_majority_vote_records_abstentions_with_their_reasons():
    s = SampleSet(question="q", candidates=candidates("#### 5", "The answer is unknown.", "#### 5", "#### [invalid]"))
    assert [c.text for c in s.candidates][1] == "The answer is unknown."  # the text stays
    result = MajorityVote().invoke(s)
    assert result.answer == "5" and result.votes == {"5": 2.0}
    assert result.details["abstained"] == 2
    assert result.details["abstentions"] == {"1": "unknown", "3": "[invalid]"}
    assert SampleSet.model_validate_json(s.model_dump_json()).candidates[1].abstention == "unknown"


def test_an_abstention_never_votes_even_if_an_answer_was_left_on_it():
    s = SampleSet(
        question="q",
        candidates=[
            Candidate(index=0, text="#### 5", answer="5"),
            Candidate(index=1, text="unknown", answer="unknown", abstention="unknown"),
            Candidate(index=2, text="unknown", answer="unknown", abstention="unknown"),
        ],
    )
    assert MajorityVote().invoke(s).votes == {"5": 1.0}


def test_when_every_candidate_abstains_the_error_names_the_reasons():
    s = SampleSet(question="q", candidates=candidates("The answer is unknown.", "It cannot be determined."))
    with pytest.raises(AggregationError, match=r"2 abstained: cannot be determined, unknown"):
        MajorityVote().invoke(s)


def test_weighted_vote_neither_counts_nor_fits_on_abstentions():
    sets = [
        SampleSet(question=f"q{i}", gold="5", candidates=candidates("#### 5", "The answer is unknown."))
        for i in range(3)
    ]
    weighted = fit_weighted_vote(sets)
    assert set(weighted.reliability) == {"m0"}  # m1 only ever abstained: no record to fit
    result = weighted.invoke(sets[0])
    assert result.answer == "5" and result.details["abstentions"] == {"1": "unknown"}


def test_ssa_prompt_shows_an_abstention_as_no_answer():
    prompt = render_ssa_prompt("q", ["#### 5", "The answer is unknown."], style=SSAStyle(show_answers=True))
    assert "Final: 5" in prompt and "Final: none" in prompt and "Final: unknown" not in prompt


# GSM8K test problem 15 (gold 125): four real Faithful-CoT completions that compute 125 (code002_standard,
# text002_COT, gpt4_standard, gpt4_COT), and five candidates that abstain as the did.
PROBLEM_15_125 = [
    " The answer is $125.\n\n",
    "If the merchant buys jewelry, the profit would be 2.5% of $5,000, which is $125. If the merchant buys "
    "electronic gadgets, the profit would be 1.2% of $8,000, which is $96. The merchant should choose jewelry "
    "because it will have a higher percentage increase. The profit would be 2.5% of $5,000, which is $125.",
    "Since the jewelry market has a higher potential profit, the merchant should choose the jewelry purchase plan. "
    "The profit would be $125.",
    "The merchant should choose the jewelry purchase plan to maximize profit. The profit at the end of the month "
    "would be $125.",
]
PROBLEM_15_UNKNOWN = ["The answer is unknown."] * 5


@pytest.mark.parametrize(("abstentions", "answer"), [(ABSTENTIONS, "125"), ((), "unknown")])
def test_unknowns_no_longer_outvote_the_computed_answer(serve, abstentions, answer):
    server = serve([*PROBLEM_15_UNKNOWN, *PROBLEM_15_125])
    graph = build_aggregate_graph(chat(server), n=9, policy=CandidatePolicy(abstentions=abstentions))
    s = graph.invoke({"messages": [HumanMessage("Which purchase plan maximises the merchant's profit?")]})["sample_set"]
    assert s.aggregation.answer == answer
    if abstentions:
        assert s.aggregation.votes == {"125": 4.0}
        assert s.aggregation.details["abstentions"] == {str(i): "unknown" for i in range(5)}
        assert all(c.answer is None and c.text == "The answer is unknown." for c in s.candidates[:5])
    else:
        assert s.aggregation.votes == {"unknown": 5.0, "125": 4.0}  # the vote
