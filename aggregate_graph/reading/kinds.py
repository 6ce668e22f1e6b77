"""What a candidate's text looks like — its *content kind* — for votes that cannot tell sources apart.

A user sampling one model n times has one source, so per-source weights say nothing; but the candidates still
differ in how they reached their answer, and that predicts whether they are right. Measured on the unreserved
Faithful-CoT and GPT-3 problems (the shipped SSA's train problems): a bare answer is right 23% of the time, a
numbered sub-question walk-through 47%, prose reasoning 52%, a program 68%. `WeightedVote` learns a weight per
vote class (`fit`, below) and gives it to every candidate whose source it does not know.

The vote weighs five classes apart (`VOTE_CLASSES`, `vote_class`): bare answers; work with an arithmetic slip
(`slipped`: an equation whose sides differ, `arithmetic.has_slip`) — right 3% of the time, against 70% for work
whose equations all hold; and the rest by how much of its arithmetic could be checked: none (`unchecked`: most
programs, and reasoning in words), one equation (`checked_once`) or two or more, all holding (`checked`). On the
unreserved Faithful-CoT problems, one LM's prose or sub-question work is right more often the more of its
arithmetic holds: gpt-3.5-turbo 57% / 77% / 84% for none / one / two or more, text002 26% / 50% / 66%.

Which content kind the work is (prose, program, sub-questions) is not weighed: a program beats prose on a weak
LM's candidates (text002: 65% against 53%) but not on a strong one's (gpt-3.5-turbo: 76% against 75%), and
weighing the two apart sent a strong LM's ties between its prose and its program to the program. Cross-fit over
the unreserved problems (one LM's five candidates, sources anonymised, ties broken at random as a shuffled
request would break them: `benchmarks/content_kinds.py`), the vote's mean gain over majority on four LMs is
+2.6 with the checked classes against +2.3 with all slip-free work as one class, and gpt-3.5-turbo's +0.7
against +0.1.
"""

from __future__ import annotations

import re

from aggregate_graph.reading.arithmetic import arithmetic_slips, has_slip
from aggregate_graph.sample_set import Candidate

SLIPPED = "slipped"
KINDS = ("bare", SLIPPED, "steps", "prose", "code", "commented_code")
# The classes a vote's reliability is fit on (`vote_class`): work by how many of its equations were checked.
VOTE_CLASSES = ("bare", SLIPPED, "unchecked", "checked_once", "checked")
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
    """The class a vote's reliability is fit on (`VOTE_CLASSES`): `bare` (no work shown), `slipped` (work with a
    false equation), else work by how many of its plain-arithmetic equations were checked, all holding: none
    (`unchecked`), one (`checked_once`), two or more (`checked`)."""
    if not shows_work(candidate):
        return "bare"
    checked, false = arithmetic_slips(candidate.text)
    if false:
        return SLIPPED
    return VOTE_CLASSES[2 + min(checked, 2)]
