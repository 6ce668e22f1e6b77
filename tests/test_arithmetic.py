"""Arithmetic slips: which equations are checked, which are false, and how rarely correct reference solutions are
flagged (GSM8K train, MATH-500) against how often flagged candidates are wrong (Faithful-CoT, unreserved)."""

from __future__ import annotations

import json

import pytest

from aggregate_graph.reading.answers import equivalent
from aggregate_graph.reading.arithmetic import arithmetic_slips, has_slip
from aggregate_graph.reading.kinds import content_kind
from aggregate_graph.sample_set import Candidate
from training.pools import data_dir, is_reserved, load_faithful_cot

DATA = data_dir()


@pytest.mark.parametrize(
    ("text", "checked", "false"),
    [
        ("She has 3 * 12 = 38 apples.", 1, 1),
        ("She has 3 * 12 = 36 apples.", 1, 0),
        ("It took 2*60=<<2*60=120>>120 minutes", 1, 0),  # GSM8K's calculator annotations
        ("He earns (40 * $10) + (5 * $12) = $400 + $60 = $460.", 2, 0),
        ("He earns (40 * $10) + (5 * $12) = $400 + $60 = $450.", 2, 1),
        ("Subtract: 5 - 3 = 2, then 2 * 4 = 9.", 2, 1),
        ("1,000 + 500 = 1,500 dollars", 1, 0),
        ("10 / 3 = 3.33 each, about 3", 1, 0),  # rounded to the decimals written
        ("10 / 3 = 3.5 each", 1, 1),
        ("8 x 1 1/2 = 12 rolls", 1, 0),  # a mixed number
        ("7.5 / 1/2 = 15 toys", 1, 0),  # a written fraction binds tighter
        ("2(1.5 + 6) = 15 miles", 1, 0),
        ("Joey leads by 235 - (214 + 26) = 5 points", 1, 0),  # a difference without its sign
        (r"$\frac{1}{2} + \frac{1}{4} = \frac{3}{4}$", 1, 0),
        (r"$\frac{1}{2} + \frac{1}{4} = \frac{2}{6}$", 1, 1),
        (r"$AB=\frac{5}{4}=1\frac{1}{4}$", 1, 0),
        (r"$99^2+99+1=99(99+1)+1=99\cdot 100+1=9901$", 3, 0),
        # not plain arithmetic: left unchecked
        ("3F - 12 = 72", 0, 0),
        ("Then q(1) = (1^2 - 1)p(1) - 1 = -1.", 0, 0),
        ("The discount is 25% of $80 = $80 + $20 = $100.", 1, 0),
        ("x = 5 + 3 = 8", 1, 0),
        ("It is 9^9^9 = 1", 0, 0),  # no exponent tower is computed
        ("No equations here, just 3 and 4.", 0, 0),
    ],
)
def test_which_equations_are_checked_and_false(text: str, checked: int, false: int) -> None:
    assert arithmetic_slips(text) == (checked, false)
    assert has_slip(text) == (false > 0)


def test_degenerate_text_is_left_unchecked_without_error() -> None:
    """A model stuck repeating itself must not break the vote: sides too long for a person's arithmetic are
    skipped (the parser's stack is finite), and long digit runs are scanned in linear time."""
    assert arithmetic_slips("2 + 2 = 4 " + "-" * 8000) == (0, 0)
    assert arithmetic_slips("2" + "^1" * 3000 + " = 2") == (0, 0)
    assert arithmetic_slips("(" * 500 + "1" + ")" * 500 + " + 1 = 2") == (0, 0)
    assert arithmetic_slips("7" * 50_000 + " apples. Then 3 * 4 = 13.") == (1, 1)


def test_a_slip_makes_work_its_own_kind() -> None:
    work = "She buys 3 bags of 4 apples each.\nSo she has 3 * 4 = {} apples.\nThe answer is {}."
    assert content_kind(Candidate(index=0, text=work.format(12, 12))) == "prose"
    slipped = Candidate(index=0, text=work.format(13, 13))
    assert content_kind(slipped) == "slipped" and content_kind(slipped, check_arithmetic=False) == "prose"
    assert content_kind(Candidate(index=0, text="3 * 4 = 13")) == "bare"  # no work shown: a bare answer


def _flagged(texts: list[str]) -> tuple[int, int]:
    counts = [arithmetic_slips(t) for t in texts]
    return sum(checked for checked, _ in counts), sum(false > 0 for _, false in counts)


def test_correct_reference_solutions_are_rarely_flagged() -> None:
    """GSM8K's train solutions (24k equations) and MATH-500's (LaTeX): the few flagged are mostly real slips in
    the references ("192*100=$1920")."""
    gsm8k = [json.loads(line)["answer"] for line in (DATA / "gsm8k" / "train.jsonl").open()]
    equations, flagged = _flagged(gsm8k)
    assert equations >= 20_000 and flagged <= 0.005 * len(gsm8k), (equations, flagged)
    math500 = [json.loads(line)["solution"] for line in (DATA / "math500" / "test.jsonl").open()]
    equations, flagged = _flagged(math500)
    assert equations >= 250 and flagged <= 3, (equations, flagged)


def test_real_candidates_with_a_slip_are_nearly_always_wrong() -> None:
    """Faithful-CoT candidates on unreserved problems (6 OpenAI LMs × 5 prompts): work with a false equation is
    right a few percent of the time, work whose equations hold most of the time."""
    right = {True: [0, 0], False: [0, 0]}
    for sample_set in [s for s in load_faithful_cot() if not is_reserved(s)][:400]:
        for c in sample_set.candidates:
            if c.answer is not None and content_kind(c, check_arithmetic=False) != "bare":
                tally = right[has_slip(c.text)]
                tally[0] += equivalent(c.answer, sample_set.gold)
                tally[1] += 1
    (slipped, n_slipped), (clean, n_clean) = right[True], right[False]
    assert n_slipped >= 500 and slipped / n_slipped <= 0.08, right
    assert clean / n_clean >= 0.6, right
