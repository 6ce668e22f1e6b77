"""What answer each candidate of a set states, whatever kind of answer the question asks for.

Most questions an agent asks are not numbers. A set is read under one *answer type*:

- `math`: numbers and maths, compared by math-verify equivalence (`answers.stated_answer`);
- `choice`: an option letter A–J ("(B)", "B)", "option B", "\\boxed{B}", "Answer: B"), or an option's text when
  the question lists its options ("Paris" is B when the question lists "(B) Paris");
- `boolean`: yes/no, true/false, correct/incorrect, with reasons after them ("No, 91 = 7 × 13.");
- `span`: a short answer in words — a name, a label, a word — compared after normalisation
  (`answer_text.text_key`); a full sentence that contains exactly one of the set's short answers backs that answer
  ("The capital of Australia is Canberra." backs "Canberra").

Wherever the type, the answer is first looked for where models state it (`answers.extract_answer`: a JSON reply's
answer field, the last `\\boxed{}`, `####`, "The answer is …", a last line `ans = 7`).

`answer_type="auto"` (the default) chooses per set: listed options make it `choice`; "yes or no" / "true or false"
in the question make it `boolean`; otherwise each candidate is classified by what it states and the most common
kind wins (ties: math, choice, boolean, span). A user may also name a type, or read answers their own way with a
regular expression (the last match; its first group if it has one) or a function of the text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

from aggregate_graph.reading.answer_text import is_text_form, text_key
from aggregate_graph.reading.answers import ABSTENTIONS, _extract, equivalent, screen_answer, stated_answer

AnswerType = Literal["auto", "math", "choice", "boolean", "span"]
ANSWER_TYPES: tuple[str, ...] = get_args(AnswerType)
Reader = Callable[[str], "str | None"]
# What every surface takes as `answer_type`: a type's name, a compiled regular expression, or a function of the text.
AnswerTypeSpec = AnswerType | re.Pattern[str] | Reader

MAX_SPAN_WORDS = 8  # a longer answer is a sentence: it backs one of the set's short answers, or states none
MAX_LINE_WORDS = 12  # a reply of one line up to this long may be a short answer with a remark ("Rome, Italy.")

# --- options listed in the question: "(A) 41 (B) 42", or one per line "A. 41" / "A) 41" / "(A) 41"
_OPTION_LINE = re.compile(r"^[ \t*]*(?:\(([A-J])\)|([A-J])[).:])[ \t*]*(\S[^\n]*?)[ \t]*$", re.MULTILINE)
_OPTION_INLINE = re.compile(r"\(([A-J])\)[ \t]*([^()\n]+?)[ \t,;]*(?=\([A-J]\)|\n|$)")

# --- booleans
_BOOLEAN_QUESTION = re.compile(
    r"\b(?:yes|true)\s*(?:or|/)\s*(?:no|false)\b|\b(?:no|false)\s*(?:or|/)\s*(?:yes|true)\b", re.I
)
# "Is 91 prime?", "Does every mammal lay eggs?": a question opened by its verb, not a request ("Can you …") nor a
# choice between named things ("Is it red or blue?")
_POLAR_QUESTION = re.compile(
    r"^\W*(?:is|are|am|was|were|do|does|did|can|could|will|would|should|shall|has|have|had|must|may|might)\b"
    r"(?![^?]*\b(?:you|or)\b)(?!\s+(?:i|we)\b)[^?.!]*\?\s*$",
    re.IGNORECASE,
)
_TRUE_FALSE_QUESTION = re.compile(r"\btrue\b[^\n]*\bfalse\b|\bfalse\b[^\n]*\btrue\b", re.I)
_POSITIVE = frozenset(("yes", "true", "correct", "right", "yep", "yeah"))
_BOOLEAN_OPENING = re.compile(
    r"^\W*(?:(?:that|it|this|the statement|the claim|the answer)(?:'s|’s|\s+is|\s+was)\s+)?(not\s+)?"
    r"(yes|no|true|false|correct|incorrect|yep|yeah|nope)\b"
    # a verdict, not "No problem at all." nor "True story"
    r"(?=\s*(?:[,.!;:—–)*-]|$)|\s+(?:it|that|this|because|since|as|the|he|she|they|we|there|i)\b)",
    re.IGNORECASE,
)
_BOOLEAN_PHRASE = re.compile(r"^\W*(?:(?:that|it|this)(?:'s|’s|\s+is)\s+)(right|wrong)\b", re.IGNORECASE)
_BOOLEAN_CONCLUSION = re.compile(
    r"(?:\b(?:so|therefore|thus|hence|answer(?:\s+is)?|conclusion)\s*[,:]?\s*\**\s*"
    r"|\b(?:statement|claim) is\s+|(?:^|[.!]\s+)\**)(yes|no|true|false|correct|incorrect)\b(?=\W*$|[,.!;:])",
    re.IGNORECASE | re.MULTILINE,
)

# --- choice letters: alone ("B", "(B)", "**B.**", "Option B"), leading ("B) 42", "(B) 42", "B. Paris"), or named
# in a phrase ("The correct answer is B because …", "I choose option B.", "answer is (B)")
_LETTER_ALONE = re.compile(r"^[\W_]*(?:(?:option|choice|answer)\s*:?\s*)?\(?([A-Ja-j])\)?[\W_]*$", re.IGNORECASE)
_LETTER_LEADING = re.compile(r"^[*_\s]*(?:\(([A-J])\)|([A-J])[).])(?:\s|$)")  # not "A: 26", an answer label
_LETTER_PHRASE = re.compile(
    r"(?:(?i:option|choice)\s*:?\s*\(?([A-J])\b"
    r"|(?i:go with|going with|choose|chose|pick|picked|select|selected)\s+\(?([A-J])\b(?![\w'’])"
    r"|(?i:answer)(?:\s+(?i:is|would be|will be))?\s*[:\-]?\s*[*$\\{(\[]*(?:boxed\{)?([A-J])"
    r"(?=\s*$|\s*\n|[)\]}*$.,:;!]|\s+(?i:because|since|as|which|is|was)\b|\s+[-–—(]))"
)

# --- spans: a label line ("Sentiment: positive"), an opening that is no part of the answer ("It's Jupiter!")
_LABEL_LINE = re.compile(r"^[ \t*_#]*([A-Za-z][\w ]{0,30}?)[ \t*_]*:[ \t*_]*(\S[^\n]*)$")
_LABEL_AT_END = re.compile(r"(?:^|[.!?]\s+)[*_]*([A-Z][\w ]{0,30}?)[*_]*:[ \t*_]*(\S[^\n:]{0,80})$")
_SPAN_OPENING = re.compile(
    r"^(?:(?:it(?:'s|’s| is| was)|that(?:'s|’s| is)|this is|i think|i believe|i'd say|probably|the answer is)\s+)+",
    re.IGNORECASE,
)
# What follows a short answer and is no part of it: "Rome, Italy", "Berlin — since 1990", "Nitrogen (about 78%)"
_SPAN_TAIL = re.compile(r"\s*(?:,|\s[—–-]\s|—|\(|;|:\s).*$", re.DOTALL)
_COPULA = re.compile(r"\b(?:is|are|was|were)\s+([^,;:\n.!?()]+)", re.IGNORECASE)
# The labels a classification question names: "as positive, negative or neutral"
_LABEL_LIST = re.compile(r"\b([\w-]+(?:,\s*[\w-]+)+,?\s+or\s+[\w-]+)\b")
# Questions whose answers are words, not numbers: "Who wrote …?", "Which planet …?" (not "how many …")
_WORDY_QUESTION = re.compile(r"^\W*(?:who|whom|whose|which|where|what(?! is \d| are \d))\b(?!.*\d)", re.I | re.S)
# A question, or an instruction that asks for a short answer: small talk ("Say hello") is not read as spans
_ASKS = re.compile(
    r"\?|\b(?:what|who|whom|whose|which|where|when|name|classify|label|categori[sz]e|identify|sentiment|"
    r"one word|single word|answer with)\b",
    re.IGNORECASE,
)
_SENTENCE_BREAK = re.compile(r"[.!?](?:\s|$)|\n")


@dataclass(frozen=True)
class Reading:
    """A set's texts read under one answer type: each text's answer (None: states none) and, for an abstention
    ("The answer is unknown."), the reason it does not vote."""

    type: str
    answers: list[str | None]
    abstentions: list[str | None]


def listed_options(question: str) -> dict[str, str]:
    """The options a question lists, letter → text, when it lists at least two from A on ("(A) 41 (B) 42", or
    "A. 41" / "A) 41" one per line); else {}."""
    return dict(_asked(question).options)


def _found_options(question: str) -> dict[str, str]:
    best: dict[str, str] = {}
    for pattern in (_OPTION_LINE, _OPTION_INLINE):
        found: dict[str, str] = {}
        for m in pattern.finditer(question):
            groups = [g for g in m.groups() if g is not None]
            letter, text = groups[0], groups[-1].strip().strip("*").strip()
            if letter == "ABCDEFGHIJ"[len(found)] and letter not in found:
                found[letter] = text
        if len(found) >= 2 and len(found) > len(best):
            best = found
    return best


def _clean(answer: str) -> str:
    return answer.strip().strip("*_`'\"“”‘’").strip().rstrip(".!?,;:").strip().strip("*_`'\"“”‘’").strip()


def _lines(text: str) -> list[str]:
    return [line for line in (line.strip() for line in text.strip().splitlines()) if line]


def _letter_of(span: str) -> str | None:
    """The option letter a short span names: alone or leading ("B", "(B)", "B) 42", "Option B")."""
    if alone := _LETTER_ALONE.match(span):
        return alone.group(1).upper()
    if leading := _LETTER_LEADING.match(span):
        return leading.group(1) or leading.group(2)
    return None


def _option_named(span: str, options: dict[str, str]) -> str | None:
    """The letter of the option whose text `span` is, or whose text (alone of all options') it contains."""
    for letter, text in options.items():
        if _clean(span) and (text_key(_clean(span)) == text_key(text) or equivalent(_clean(span), text)):
            return letter
    key = f" {text_key(span)} "
    named = [letter for letter, text in options.items() if text_key(text) and f" {text_key(text)} " in key]
    return named[0] if len(named) == 1 else None


def read_choice(text: str, options: dict[str, str]) -> str | None:
    """The option letter a text chooses: in its stated answer, its last or first line, a phrase ("the answer is
    B", "option B"), or by an option's text."""
    statement = _extract(text, last_number=False)[0]
    lines = _lines(text)
    for span in (statement, lines[-1] if lines else None, lines[0] if lines else None):
        if span and (letter := _letter_of(span)):
            return letter
    if phrases := _LETTER_PHRASE.findall(text[-3000:]):
        return next(g for g in phrases[-1] if g)
    if options:
        for span in (statement, lines[-1] if lines else None, text if len(text.split()) <= 60 else None):
            if span and (letter := _option_named(span, options)):
                return letter
        if (number := stated_answer(text)[0]) is not None:
            return _option_named(number, options)
    return None


def read_boolean(text: str, true_false: bool = False) -> str | None:
    """ "yes"/"no" (or "true"/"false" for a true-or-false question) a text answers: its stated answer, its opening
    word ("No, because …", "That is correct."), or its conclusion ("…, so yes.", "The statement is false.")."""
    statement = _extract(text, last_number=False)[0]
    value = None
    for span in (statement, text):
        if span and (opening := _BOOLEAN_OPENING.match(span)):
            value = (opening.group(2).lower() in _POSITIVE) != bool(opening.group(1))
            break
        if span and (phrase := _BOOLEAN_PHRASE.match(span)):
            value = phrase.group(1).lower() == "right"
            break
    else:
        if conclusions := _BOOLEAN_CONCLUSION.findall(text[-2000:]):
            value = conclusions[-1].lower() in _POSITIVE
    if value is None:
        return None
    return ("true" if value else "false") if true_false else ("yes" if value else "no")


def listed_labels(question: str) -> list[str]:
    """The labels a classification question names ("… as positive, negative or neutral"), else []."""
    return list(_asked(question).labels)


def _found_labels(question: str) -> list[str]:
    found = _LABEL_LIST.findall(question)
    return [w.strip() for w in re.split(r",\s*(?:or\s+)?|\s+or\s+", found[-1]) if w.strip()] if found else []


def _one_of(span: str, names: Sequence[str]) -> str | None:
    """The one of `names` that `span` contains as whole words (the first if several name the same), else None."""
    key = f" {text_key(span)} "
    named = {text_key(n): n for n in names if text_key(n) and f" {text_key(n)} " in key}
    return next(iter(named.values())) if len(named) == 1 else None


def _span_core(span: str) -> str:
    """A short answer without what is said around it: "It's Jupiter!" → "Jupiter", "Rome, Italy" → "Rome"."""
    return _clean(_SPAN_TAIL.sub("", _SPAN_OPENING.sub("", _clean(span))))


def read_span(text: str, labels: Sequence[str] = ()) -> str | None:
    """A short answer in words a text states: one of the question's `labels` it names, else its stated answer, a
    label line's value ("Sentiment: positive"), or the text itself when it is short ("It's Jupiter!" → "Jupiter");
    None for a sentence."""
    statement = _extract(text, last_number=False)[0]
    lines = _lines(text)
    spans = [statement] if statement else []
    label = (_LABEL_LINE.match(lines[-1]) or _LABEL_AT_END.search(lines[-1])) if lines else None
    if label and len(label.group(1).split()) <= 3:  # "Sentiment: positive", not a sentence with a colon
        spans.append(label.group(2))
    if len(lines) == 1 and len(lines[0].split()) <= MAX_LINE_WORDS and not _is_sentence(lines[0]):
        spans.append(lines[0])
    if labels:
        sentences = _SENTENCE_BREAK.split(lines[-1]) if lines else []
        for span in (*spans, sentences[-1] if sentences else "", *(sentences[-2:-1]), text[-2000:]):
            if span and (named := _one_of(span, labels)):
                return named
    for span in spans:
        if (core := _span_core(span)) and len(core.split()) <= MAX_SPAN_WORDS:
            return core
    return None


def _is_sentence(text: str) -> bool:
    """Whether a line is a sentence about the answer ("The capital of Australia is Canberra."), not the answer."""
    return len(text.split()) > 3 and _COPULA.search(text.strip()) is not None


def _copula(text: str) -> str | None:
    """What an opening sentence says its subject is: "The capital of Australia is Canberra." → "Canberra"."""
    first = _SENTENCE_BREAK.split(text.strip(), maxsplit=1)[0]
    if len(first.split()) > 20 or not (found := _COPULA.search(first)):
        return None
    span = _clean(found.group(1))
    return span if span and len(span.split()) <= 4 else None


def _spans(question: str, texts: Sequence[str], labels: Sequence[str]) -> list[str | None]:
    """Each text's short answer in the set: its own, unless the text contains exactly one of the other texts'
    short answers and not its own ("William Shakespeare wrote it." backs "William Shakespeare"); a sentence
    backs the one short answer of the set it contains, else says what its subject is (`_copula`). Words of the
    question restated ("… is the capital of France.") back nothing."""
    own = [read_span(text, labels) for text in texts]
    said = [o if o is not None else _copula(t) for o, t in zip(own, texts, strict=True)]
    asked = f" {text_key(question)} "
    answers: list[str | None] = []
    for i, text in enumerate(texts):
        others = [
            s
            for j, s in enumerate(said)
            if j != i and s is not None and len(s.split()) <= MAX_SPAN_WORDS and f" {text_key(s)} " not in asked
        ]
        backed = _one_of(text[-2000:], others) if others else None
        mine = own[i] if own[i] is not None else said[i]
        agrees = mine is not None and backed is not None and text_key(backed) == text_key(mine)
        answers.append(mine if agrees or backed is None or labels else backed)
    return answers


# Settling early asks a set's type again as each candidate lands, over every text landed so far: each text's kind
# is read once.
@lru_cache(maxsize=4096)
def _kind(text: str, wordy: bool = False) -> str | None:
    """What kind of answer a text states, for choosing a set's type: its stated answer's kind, else its shape.
    For a question asked of words (`wordy`: "Which planet …?"), a number that is only the text's last is no
    answer: such a text states words."""
    statement = _extract(text, last_number=False)[0]
    if statement:
        if _letter_of(statement):
            return "choice"
        if _BOOLEAN_OPENING.fullmatch(_clean(statement)):
            return "boolean"
        return "span" if is_text_form(_clean(statement)) else "math"
    if _BOOLEAN_OPENING.match(text) or _BOOLEAN_PHRASE.match(text):
        return "boolean"
    lines = _lines(text)
    if lines and (_letter_of(lines[0]) or _letter_of(lines[-1])):
        return "choice"
    if not wordy and stated_answer(text)[0] is not None:
        return "math"
    return "span" if read_span(text) or _copula(text) else None


def infer_answer_type(question: str, texts: Sequence[str]) -> str:
    """The answer type of a set: `choice` when the question lists options, `boolean` when it asks "yes or no" or
    "true or false", or is a question opened by its verb ("Is 91 prime?") that most texts answer without stating
    another answer ("The answer is 42."), else the kind most texts state (ties:
    math, choice, boolean, span). Short replies are read as spans only for a question or an instruction that asks
    for one ("Say hello" is small talk: no vote)."""
    return _inferred(question, texts, 0) or "math"


def settled_answer_type(
    question: str, texts: Sequence[str], answer_type: AnswerTypeSpec, outstanding: int
) -> str | None:
    """The type `read_answers` reads the set under, if `outstanding` more texts cannot change it (None if they can):
    a given type, one the question decides, or the kind most texts state by a lead the outstanding ones cannot
    overturn."""
    if isinstance(answer_type, re.Pattern):
        return "pattern"
    if callable(answer_type):
        return "function"
    return answer_type if answer_type != "auto" else _inferred(question, texts, outstanding)


@dataclass(frozen=True)
class _Asked:
    """What a question's wording says of its answers. Read once per question: settling early and the graph's
    reporter read the same question again as each candidate lands (~0.1 ms a time for a paragraph)."""

    options: tuple[tuple[str, str], ...]  # `listed_options`
    labels: tuple[str, ...]  # `listed_labels`
    boolean: bool  # asks "yes or no" / "true or false"
    true_false: bool  # asks "true or false"
    wordy: bool  # asked of words ("Which planet …?")
    polar: bool  # opened by its verb ("Is 91 prime?")
    asks: bool  # asks for something (not small talk)


@lru_cache(maxsize=1024)
def _asked(question: str) -> _Asked:
    stripped = question.strip()
    return _Asked(
        options=tuple(_found_options(question).items()),
        labels=tuple(_found_labels(question)),
        boolean=_BOOLEAN_QUESTION.search(question) is not None,
        true_false=_TRUE_FALSE_QUESTION.search(question) is not None,
        wordy=_WORDY_QUESTION.match(stripped) is not None,
        polar=_POLAR_QUESTION.match(stripped) is not None,
        asks=_ASKS.search(question) is not None,
    )


def _inferred(question: str, texts: Sequence[str], outstanding: int) -> str | None:
    """`infer_answer_type` with `outstanding` more texts to come: the type, or None while they could change it."""
    asked = _asked(question)
    if asked.options:
        return "choice"
    if asked.boolean:
        return "boolean"
    kinds = Counter(kind for text in texts if (kind := _kind(text, asked.wordy)) is not None)
    if asked.polar:  # boolean unless most texts state another answer
        stated = sum(_extract(text, last_number=False)[0] is not None for text in texts)
        total = len(texts) + outstanding
        if 2 * (stated + outstanding) <= total:
            return "boolean"
        if 2 * stated <= total:
            return None
    if not asked.asks:  # small talk ("Thanks!"): "No problem at all." is no vote
        kinds.pop("span", None)
        kinds.pop("boolean", None)
    order = ("math", "choice", "boolean", "span")
    if not kinds and outstanding == 0:
        return "math"
    first = max(order, key=lambda kind: (kinds[kind], -order.index(kind)))
    # it stays first if every other kind, given all the outstanding texts, still falls behind it (or ties after it)
    for kind in order:
        lead = kinds[first] - kinds[kind] - outstanding
        if kind != first and (lead < 0 or (lead == 0 and order.index(kind) < order.index(first))):
            return None
    return first


def _screened(answers: Sequence[str | None], abstentions: Sequence[str]) -> tuple[list[str | None], list[str | None]]:
    """The answers that vote, and for each abstention ("I don't know") its reason."""
    pairs = [screen_answer(a, abstentions) if a is not None else (None, None) for a in answers]
    return [a for a, _ in pairs], [r for _, r in pairs]


def read_answers(
    question: str,
    texts: Sequence[str],
    answer_type: AnswerTypeSpec = "auto",
    *,
    cut_off: Sequence[bool] | None = None,
    abstentions: Sequence[str] = ABSTENTIONS,
) -> Reading:
    """Every text's answer, read under one answer type for the whole set.

    Args:
        question: what was asked: its listed options and "yes or no" choose the type under "auto".
        texts: the candidates' texts, in order.
        answer_type: "auto", "math", "choice", "boolean", "span", a compiled regular expression (the last match;
            its first group if it has one) or a function from a text to its answer (None: no answer).
        cut_off: per text, whether it was cut off by the token limit (its last number is no answer).
        abstentions: answers that do not vote (`answers.ABSTENTIONS`).

    Returns:
        A `Reading`: the type used, each text's answer (canonical: "B" for a choice, "yes"/"no" or "true"/"false"
        for a boolean, the words as written for a span) and each abstention's reason.
    """
    cut = list(cut_off) if cut_off is not None else [False] * len(texts)
    if isinstance(answer_type, re.Pattern):
        found = [answer_type.findall(text) for text in texts]
        answers = [_clean(_last_group(f[-1])) or None if f else None for f in found]
        return Reading("pattern", *_screened(answers, abstentions))
    if callable(answer_type):
        return Reading("function", *_screened([answer_type(text) for text in texts], abstentions))
    if answer_type not in ANSWER_TYPES:
        raise ValueError(
            f"answer_type must be one of {', '.join(ANSWER_TYPES)}, a compiled regular expression or a function "
            f"of the text; got {answer_type!r}"
        )
    kind = infer_answer_type(question, texts) if answer_type == "auto" else answer_type
    if kind == "math":
        pairs = [stated_answer(t, last_number=not c, abstentions=abstentions) for t, c in zip(texts, cut, strict=True)]
        return Reading(kind, [a for a, _ in pairs], [r for _, r in pairs])
    if kind == "choice":
        options = listed_options(question)
        answers = [read_choice(text, options) for text in texts]
    elif kind == "boolean":
        answers = [read_boolean(text, _asked(question).true_false) for text in texts]
    else:
        answers = _spans(question, texts, listed_labels(question))
    return Reading(kind, *_screened(answers, abstentions))


def _last_group(match: str | tuple[str, ...]) -> str:
    return match if isinstance(match, str) else next((g for g in match if g), "")


def check_answer_type(answer_type: object) -> AnswerTypeSpec:
    """`answer_type` if every surface can read with it, else a ValueError naming what to give instead."""
    if isinstance(answer_type, re.Pattern) or callable(answer_type) or answer_type in ANSWER_TYPES:
        return answer_type  # type: ignore[return-value]
    if isinstance(answer_type, str):
        raise ValueError(
            f"answer_type must be one of {', '.join(ANSWER_TYPES)} (or a compiled regular expression, "
            f"re.compile(...), or a function of the text); got {answer_type!r}"
        )
    raise TypeError(f"answer_type must be a name, a compiled regular expression or a function; got {answer_type!r}")
