"""Answers that are words — names, labels, yes/no — and how two of them are compared.

A word answer is compared by its `text_key` (case, accents, punctuation, articles and spacing set aside), never as
maths: read as LaTeX, "Canberra" is a product of letters, equal to any anagram of it, and "Paris" differs from
"paris". A single number word is the number it names ("Two" votes with "2").
"""

from __future__ import annotations

import re
import unicodedata

# Words that are maths, not text: "pi", "sqrt 2" and "infinity" keep their maths meaning.
MATH_WORDS = frozenset(
    [
        "pi",
        "sqrt",
        "root",
        "squared",
        "cubed",
        "log",
        "ln",
        "exp",
        "sin",
        "cos",
        "tan",
        "sec",
        "csc",
        "cot",
        "arcsin",
        "arccos",
        "arctan",
        "inf",
        "infty",
        "infinity",
    ]
)
_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
} | {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90"}
# Letters, with the spaces and punctuation names carry ("Jean-Paul", "O'Brien", "St. Louis", "Rock & roll")
_TEXT = re.compile(r"[^\W\d_](?:[^\W\d_]|[ '’.,&!?-])*")
_LETTERS = re.compile(r"[^\W\d_]{2,}")
_ARTICLES = frozenset(("a", "an", "the"))
_NOT_WORD = re.compile(r"[\W_]+")
_END = " .!?,;:'\"“”‘’"


def is_text_form(answer: str) -> bool:
    """Whether `answer` is words, not maths: letters only (with name punctuation), and a word of two letters or
    more that is not a maths word. A single letter ("B", "x") is not: a choice or a variable."""
    return _TEXT.fullmatch(answer) is not None and any(
        word.lower() not in MATH_WORDS for word in _LETTERS.findall(answer)
    )


def text_form(answer: str) -> str:
    """A word answer as written, spacing collapsed and end punctuation dropped: "New  York." → "New York"."""
    return " ".join(answer.split()).strip(_END)


def number_word(answer: str) -> str | None:
    """The number a single number word names ("Two" → "2"), else None."""
    return _NUMBER_WORDS.get(answer.strip(_END).lower())


def text_key(answer: str) -> str:
    """What two word answers must share to be the same answer: Unicode-normalised, accents, case, punctuation,
    articles and spacing set aside ("The Beatles" = "beatles", "São Paulo" = "Sao Paulo")."""
    decomposed = unicodedata.normalize("NFKD", answer)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    words = [w for w in _NOT_WORD.sub(" ", plain).split() if w not in _ARTICLES]
    return " ".join(words)
