"""Answer types in the prebuilt graph, against a real OpenAI-compatible HTTP server through ChatOpenAI: choices,
yes/no, names, labels, JSON replies and "Answer:"-first reasoning. In each set three of five replies give the same
answer in different words and must win with 3 votes; the other two split."""

import re

import pytest
from langchain_core.messages import HumanMessage

from aggregate_graph import build_aggregate_graph
from aggregate_graph.reading.answer_types import (
    infer_answer_type,
    listed_labels,
    listed_options,
    read_answers,
)
from aggregate_graph.reading.answers import equivalent, group_equivalent
from tests.conftest import chat

SETS = {
    "boolean": (
        "Is 91 a prime number?",
        ["No, 91 = 7 × 13.", "Yes.", "no", "That is incorrect: 91 is 7 times 13, so it is not prime.", "Yes, it is."],
        "no",
    ),
    "choice letters": (
        "What is 6 times 7?\n(A) 41\n(B) 42\n(C) 43\n(D) 44",
        ["(B)", "I choose option B.", "A", "Answer: B) 42", "C"],
        "B",
    ),
    "choice by option text": (
        "Which organelle makes ATP? (A) Nucleus (B) Mitochondria (C) Ribosome (D) Golgi apparatus",
        ["It's the mitochondria.", "B", "Nucleus", "The answer is Mitochondria.", "(C) Ribosome"],
        "B",
    ),
    "name": (
        "What is the capital of Australia?",
        ["Canberra", "Sydney.", "The capital of Australia is Canberra.", "**Canberra**", "Melbourne"],
        "Canberra",
    ),
    "label": (
        'Classify the sentiment of this review as positive, negative or neutral: "Not bad at all!"',
        ["Sentiment: positive", "negative", "I'd classify this as positive.", "Positive", "neutral"],
        "positive",
    ),
    "json": (
        "What is the distance between (0, 0) and (3, 6)?",
        [
            '{"reasoning": "sqrt(9 + 36) = sqrt(45)", "answer": "3\\sqrt{5}"}',
            '```json\n{"reasoning": "d^2 = 45", "answer": "\\\\sqrt{45}"}\n```',
            'Here it is:\n{"reasoning": "3^2 + 6^2 = 45", "answer": "5"}',
            "The distance is $\\sqrt{45} = 3\\sqrt{5}$.\n\n"
            '{"reasoning": "Pythagoras on the legs 3 and 6", "answer": "3 \\\\sqrt{5}"}',
            '{"reasoning": "3 + 6", "answer": 9}',
        ],
        "3\\sqrt{5}",
    ),
    "answer-first reasoning": (
        "Tom has 3 red and 4 blue marbles. How many marbles does he have?",
        [
            "Answer: Tom has 3 red and 4 blue marbles. So he has 3 + 4 = 7 marbles.\nans = 7",
            "Answer: He starts with 3 red ones and adds 4 blue ones, 3 + 4 = 8 marbles.\nans = 8",
            "Answer: 3 red marbles plus 4 blue marbles make 7 marbles in all.\nTherefore, 7.",
            "The answer is 7.",
            "Answer: 8",
        ],
        "7",
    ),
}


@pytest.mark.parametrize("name", list(SETS))
def test_three_of_five_agreeing_in_different_words_win_with_three_votes(serve, name):
    question, replies, expected = SETS[name]
    server = serve(replies)
    out = build_aggregate_graph(chat(server), n=5).invoke({"messages": [HumanMessage(question)]})
    aggregation = out["sample_set"].aggregation
    assert aggregation.method == "majority", aggregation.details
    assert equivalent(aggregation.answer, expected), (aggregation.answer, aggregation.votes)
    assert max(aggregation.votes.values()) == 3.0 and sum(aggregation.votes.values()) == 5.0, aggregation.votes
    assert sorted(aggregation.support) == sorted(i for i, c in enumerate(out["sample_set"].candidates) if
                                                 equivalent(c.answer, expected))  # fmt: skip
    assert aggregation.details["answers_read"] == 5
    assert out["messages"][-1].content in replies


def test_the_type_can_be_named_or_read_by_a_regex_or_a_function(serve):
    server = serve(
        ["Verdict: ACCEPT (score 8)", "Verdict: reject", "Verdict: accept", "verdict: Accept!", "Verdict: ?"]
    )
    ask = {"messages": [HumanMessage("Review this paper.")]}
    by_regex = build_aggregate_graph(chat(server), n=5, answer_type=re.compile(r"(?i)verdict:\s*(\w+)"))
    aggregation = by_regex.invoke(ask)["sample_set"].aggregation
    assert aggregation.votes == {"ACCEPT": 3.0, "reject": 1.0} and aggregation.details["answer_type"] == "pattern"

    def last_word(text: str) -> str | None:
        words = re.findall(r"[a-z]+", text.lower())
        return words[-1] if words else None

    by_function = build_aggregate_graph(chat(server), n=5, answer_type=last_word).invoke(ask)["sample_set"]
    assert by_function.aggregation.details["answer_type"] == "function"
    assert by_function.aggregation.votes["accept"] == 2.0

    named = build_aggregate_graph(chat(server), n=5, answer_type="span").invoke(ask)["sample_set"]
    assert named.metadata["answer_type"] == "span"


def test_no_readable_answer_is_said_and_the_medoid_is_documented_as_the_fallback(serve):
    server = serve(["Hello there, friend!", "Hello there!", "Good morning to you, friend."])
    aggregation = (
        build_aggregate_graph(chat(server), n=3)
        .invoke({"messages": [HumanMessage("Say hello")]})["sample_set"]
        .aggregation
    )
    assert aggregation.method == "medoid" and aggregation.answer is None and aggregation.votes == {}
    assert aggregation.details["answers_read"] == 0 and aggregation.details["answer_type"] == "math"
    assert "no candidate stated an extractable final answer" in aggregation.details["fallback_reason"]


def test_a_wrong_answer_type_is_a_short_clear_error(serve):
    server = serve(["42"])
    with pytest.raises(ValueError, match="answer_type must be one of auto, math, choice, boolean, span"):
        build_aggregate_graph(chat(server), n=2, answer_type="numbers")


@pytest.mark.parametrize(
    ("question", "texts", "expected"),
    [
        ("Which is larger?\nA. 3\nB. 5", ["B"], "choice"),
        ("Answer yes or no: is water wet?", ["It is."], "boolean"),
        ("Does every mammal lay eggs?", ["Most do not."], "boolean"),
        ("Can you tell me what 6 times 7 is?", ["42"], "math"),
        ("Is the ball red or blue?", ["Red.", "Blue", "red"], "span"),
        ("Who wrote Hamlet?", ["Shakespeare", "William Shakespeare wrote it in 1600."], "span"),
        ("What is 6 times 7?", ["42", "The answer is 42.", "Forty-two"], "math"),
        ("Say hello", ["Hello!", "Hi there"], "math"),  # small talk: no span vote, so the medoid speaks
    ],
)
def test_the_type_is_inferred_from_the_question_and_the_candidates(question, texts, expected):
    assert infer_answer_type(question, texts) == expected


def test_listed_options_inline_and_one_per_line():
    assert listed_options("Pick one: (A) red (B) blue (C) green") == {"A": "red", "B": "blue", "C": "green"}
    assert listed_options("Q?\nA) 41\nB) 42") == {"A": "41", "B": "42"}
    assert listed_options("A. Lincoln was president.") == {}  # one letter is no list


def test_a_question_is_read_once_and_its_options_cannot_be_changed_through_a_result():
    question = "Which is blue? (A) sky (B) grass"
    listed_options(question)["A"] = "changed"  # the caller's copy; the question's reading is cached
    listed_labels("Classify as positive, negative or neutral: great!").append("changed")
    assert listed_options(question) == {"A": "sky", "B": "grass"}
    assert listed_labels("Classify as positive, negative or neutral: great!") == ["positive", "negative", "neutral"]
    assert read_answers(question, ["(B)", "The answer is A"]).answers == ["B", "A"]


def test_word_answers_are_compared_as_words_never_as_maths():
    # read as LaTeX, "listen" and "silent" are the same product of letters
    assert group_equivalent(["listen", "silent", "Listen.", "LISTEN"]) == [[0, 2, 3], [1]]
    assert equivalent("São Paulo", "sao paulo") and equivalent("The Beatles", "Beatles")
    assert equivalent("Two", "2") and not equivalent("pi", "pie")


def test_the_cut_off_flag_and_abstentions_apply_to_every_type():
    reading = read_answers("What is the capital of France?", ["Paris", "I don't know.", "Paris"])
    assert reading.answers == ["Paris", None, "Paris"] and reading.abstentions[1] == "don't know"
    cut = read_answers("What is 2+2?", ["2 + 2 is", "4"], cut_off=[True, False])
    assert cut.answers == [None, "4"]


def test_every_surface_reads_with_the_answer_type(serve):
    from openai import OpenAI

    from aggregate_graph import AggregatingChatModel, AggregationMiddleware, sample_sets_from, wrap_openai

    replies = ["Yes.", "No", "yes, it is", "No.", "Yes — 17 has no divisor but 1 and itself."]
    server = serve(replies)
    question = "Is 17 a prime number?"
    client = wrap_openai(OpenAI(base_url=server.base_url, api_key="k", max_retries=0), n=5)
    response = client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])
    assert sample_sets_from(response)[0].aggregation.votes == {"yes": 3.0, "no": 2.0}

    model = AggregatingChatModel(chat(server), n=5, answer_type="boolean")
    message = model.invoke(question)
    assert message.response_metadata["sample_set"]["aggregation"]["answer"] == "yes"
    middleware = AggregationMiddleware(n=5, answer_type="boolean")
    assert middleware.aggregating(chat(server)).options.answer_type == "boolean"
    with pytest.raises(ValueError, match="answer_type must be one of"):
        AggregationMiddleware(n=5, answer_type="yes-no")
