"""What a candidate's text looks like — its *content kind* — for votes that cannot tell sources apart.

A user sampling one model n times has one source, so per-source weights say nothing; but the candidates still
differ in how they reached their answer, and that predicts whether they are right. Measured on the unreserved
Faithful-CoT and GPT-3 problems (the shipped SSA's train problems): a bare answer is right 23% of the time, a
numbered sub-question walk-through 47%, prose reasoning 52%, a program 68%. `WeightedVote` learns a weight per
kind (`fit`; all work without a slip shares one) and gives it to every candidate whose source it does not
know.

The vote weighs three classes apart (`VOTE_CLASS`): bare answers, slipped work (below), and the rest. A
program beats prose on a weak LM's candidates (text002: 65% against 53%) but not on a strong one's
(gpt-3.5-turbo: 76% against 75%), and weighing the two apart sent a strong LM's ties between its prose and its
program to the program: on one LM's five candidates, cross-fit over the unreserved problems, gpt-3.5-turbo fell
1.3 points below majority vote; weighed as one, it is at -0.1, at +4.0 on average over four LMs (+4.2 before).

A worked candidate with an arithmetic slip — an equation whose sides differ (`arithmetic.has_slip`) — is its own
kind, `slipped`: right 3% of the time, against 70% for work whose equations all hold. Sub-question walk-throughs
were unreliable mostly through their slips (a third of them have one): without those, they are as good as prose
and programs, and the three are weighed as one. Cross-fit as above, the slips raise the vote's gain to +4.5 on
average, with no LM below majority (gpt-3.5-turbo +0.7).
"""

from __future__ import annotations

import re

from aggregate_graph.aggregators.arithmetic import has_slip
from aggregate_graph.sample_set import Candidate

SLIPPED = "slipped"
KINDS = ("bare", SLIPPED, "steps", "prose", "code", "commented_code")
# The kinds' classes that a vote's reliability is fit on: all work without a slip shares one (see above).
VOTE_CLASS = {
    "bare": "bare",
    SLIPPED: SLIPPED,
    "steps": "worked",
    "prose": "worked",
    "code": "worked",
    "commented_code": "worked",
}
# [ \t]*, not \s*: at each line start \s* would run on across blank lines (quadratic on a text of blank lines).
_ASSIGNMENT = re.compile(r"^[ \t]*[A-Za-z_]\w*[ \t]*=[ \t]*\S", re.M)  # `total = 3 * 4`: a line of a program
PROGRAM_SHARE = 0.6
_COMMENT = re.compile(r"^[ \t]*#", re.M)
_SUB_QUESTION = re.compile(r"^[ \t]*Q\d+[.:]", re.M)  # least-to-most's "Q1. How many …?"


def shows_work(candidate: Candidate) -> bool:
    """More than a bare answer: two or more non-blank lines, or over 80 characters."""
    text = candidate.text.strip()
    return len(text) > 80 or len([line for line in text.splitlines() if line.strip()]) >= 2


def content_kind(candidate: Candidate, *, check_arithmetic: bool = True) -> str:
    """One of `KINDS`: `bare` (no work shown), `slipped` (work with a false equation; not with
    `check_arithmetic=False`), `code` / `commented_code` (a program: two or more assignment lines, which with `#`
    comments make up most of the lines), `steps` (numbered sub-questions), else `prose`."""
    if not shows_work(candidate):
        return "bare"
    text = candidate.text
    if check_arithmetic and has_slip(text):
        return SLIPPED
    lines = [line for line in text.splitlines() if line.strip()]
    assignments, comments = len(_ASSIGNMENT.findall(text)), len(_COMMENT.findall(text))
    # A program is mostly assignments (and comments); prose that sets up `x = 99 - 5` on a line or two is not.
    if assignments >= 2 and assignments + comments >= PROGRAM_SHARE * len(lines):
        return "commented_code" if comments else "code"
    return "steps" if _SUB_QUESTION.search(text) else "prose"


def vote_class(candidate: Candidate) -> str:
    """The class of the candidate's kind that a vote's reliability is fit on (`VOTE_CLASS`)."""
    return VOTE_CLASS[content_kind(candidate)]
