"""The prose a model writes around a stated final answer, and how `answers.extract_answer` trims it off.

"The answer is 42, since 6*7=42." must vote with "The answer is 42."; left whole, such answers split the vote
(`normalize_answer` only drops spaces: "42,since6*7=42" is a class of its own). Each rule here applies only where it
leaves an answer, and `trim_prose` leaves what it cannot read with confidence as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Longer spans are prose that states no one answer; trimming them is not worth a regex's time on a megabyte line.
MAX_PROSE_CHARS = 500

# What follows the answer and is no part of it: "42, since 6*7=42", "42 because …", "42, which …", "42, but …",
# "42; …"
_CLAUSE = re.compile(
    r"(?:,\s+(?:since|which|because|as|so|but|thus|hence|therefore|meaning|where|given|that is|i\.e)"
    r"|\s+(?:since|which|because|so|but))\b.*|;(?![^=]*=).*",  # not "x = 3; y = 4": both are the answer
    re.IGNORECASE | re.DOTALL,
)
_ASIDE = re.compile(r"(?<!\s)\s+\([^()]*\)$")  # "42 (forty-two)"
_ANSWER_END = re.compile(r"[\w}$]\**$")  # what an aside may follow: "42", "**42**", "$\frac{1}{2}$"; not "6 *"
_PLAIN_WORDS = re.compile(r"[A-Za-z][A-Za-z .'-]*")  # "Paris (France)": an aside after words goes too
# "6 * 7 = 42", "7 times 6 equals 42", "is equal to 42"; not "<=", ">=", "=="
_EQUALS = re.compile(r"(?<![<>!=])=(?!=)|\b(?:is )?equal to\b|\bequals\b", re.IGNORECASE)
# A number in a sentence: "120", "-5", "$18", "1,000", "3.5", "29/3"; not the 19 of "COVID-19", "40y" or "x_40"
_NUMBER = re.compile(r"(?<![\w.,/\\-])-?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?![\w/])")
_WORD = re.compile(r"(?<![\w\\])[A-Za-z]{2,}(?!\w)")  # not a LaTeX command (`\frac`) nor a variable (`x`)
# A question stated where the answer belongs: least-to-most prompts restate their last sub-question there
# ("Final Answer: How old will Jerry be in 3 years?"), and its number (3) is not the answer.
_INTERROGATIVE = re.compile(r"^\W*(?:how|what|which|who|whose|why|when|where)\b", re.IGNORECASE)
# Why the one number of a sentence may not be its answer: math around it ("x_1 + 2", "4 pi", "sol[1]", "the square
# root of 2"), a second number in words ("two times 6"), a multiple choice ("(B) 12", "option C with 12"), or a
# negation or bound ("not 5", "less than 10", "at least 3", "x ≥ 5")
_NOT_PROSE = re.compile(
    r"[=+*/^_{}\\<>|\[\]≤≥≠≈]|\s-\s|\(?\b[A-E]\)|\b(?:not|no|less|more|least|most|than|under|between|"
    r"pi|sqrt|roots?|squared|cubed|powers?|times|plus|minus|over|divided|"
    r"multiplied|negative|mod|log|ln|sin|cos|tan|factorial|choose|option|choice|twice|double|triple|dozens?|halves|"
    r"half|thirds?|quarters?|fourths?|fifths?|zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"\w+teen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|millions?|billions?)\b",
    re.IGNORECASE,
)
_END_PUNCTUATION = " .!?,:"


def is_question(text: str) -> bool:
    """Whether a stated "answer" is a question: it ends in "?" after words, or opens with how/what/which/…."""
    stripped = text.strip()
    return bool(_INTERROGATIVE.match(stripped)) or (stripped.endswith("?") and _WORD.search(stripped) is not None)


def trim_prose(answer: str, is_number: Callable[[str], bool]) -> str:
    """`answer` (what follows "The answer is" or `####`) without the prose around it. In order, each rule only
    where it leaves an answer:

    1. a trailing clause: ", since …", ", which …", ", because …", " because …", " so …", "; …";
    2. trailing punctuation: "42!" → 42;
    3. an aside in parentheses after a number or words: "42 (forty-two)" → 42;
    4. an equation's left side, when its right side is a number (`is_number`, e.g. "120 miles"): "6 * 7 = 42",
       "7 times 6 equals 42", "x is equal to 42" → 42 (whole, it would vote alone as "7times6equals42");
    5. in a sentence with exactly one number and nothing that makes it math, all but that number: "The train
       travels 120 miles" → 120, "She spends $18 in total" → $18.

    A question ("How old will Jerry be in 3 years?") and a span over `MAX_PROSE_CHARS` are returned unchanged.
    """
    if len(answer) > MAX_PROSE_CHARS or is_question(answer):
        return answer
    s = answer.replace("\u2212", "-").strip()  # a Unicode minus sign
    if (cut := _CLAUSE.sub("", s).strip()) and cut.strip("$*`"):
        s = cut
    s = s.rstrip(_END_PUNCTUATION).strip()
    aside = _ASIDE.search(s)
    rest = s[: aside.start()] if aside else ""
    if aside and _ANSWER_END.search(rest) and (is_number(rest) or _PLAIN_WORDS.fullmatch(rest)):
        s = rest.rstrip(_END_PUNCTUATION)
    equals = list(_EQUALS.finditer(s))
    if len(equals) == 1 and equals[0].start() > 0 and is_number(right := s[equals[0].end() :].strip()):
        return right
    numbers = _NUMBER.findall(s)
    if len(numbers) == 1 and _WORD.search(s) and not is_number(s) and not _NOT_PROSE.search(_NUMBER.sub(" ", s)):
        return numbers[0]
    return s
