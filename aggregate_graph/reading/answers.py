"""Final-answer extraction, normal forms and math equivalence.

Equivalence is decided cheaply where a normal form already decides it (equal strings, or two plain numbers),
then by comparing the values of math-verify's parsed expressions at fixed points, and by math-verify's
symbolic `verify` only for what is not a plain expression (sets, tuples, intervals, equations).

math-verify's own timeout uses `signal.alarm`, which only works on the main thread, while LangGraph runs sync
nodes in worker threads; so its timeouts are disabled and each uncached parse, evaluation or check runs in a
daemon thread that we stop waiting for, and stop, after `VERIFY_TIMEOUT_S`.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any, TypeVar

from aggregate_graph.reading.answer_json import json_answer
from aggregate_graph.reading.answer_prose import is_question, trim_prose
from aggregate_graph.reading.answer_text import is_text_form, number_word, text_form, text_key

T = TypeVar("T")

logger = logging.getLogger(__name__)


class _DropDisabledTimeoutNotice(logging.Filter):
    """math-verify warns once that its timeout is off; we disable it on purpose and enforce our own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropDisabledTimeoutNotice())

VERIFY_TIMEOUT_S = 2.0
# Longer "answers" are prose, not a final answer; comparing them symbolically costs much and means little.
MAX_ANSWER_CHARS = 200

_GSM8K = re.compile(r"####\s*")  # its answer: the rest of that line, up to a sentence end
# "answer" may close a bold run first: "**Answer**: 42"
_ANSWER_IS = re.compile(r"(?:final answer|the answer|answer)\**\s*(?:is|:|=)\s*:?\s*", re.IGNORECASE)
# What follows "The answer is": up to a sentence end ("!" or "?" only before a capital, so "5! = 120" stays whole).
# Trailing spaces are matched from the first of them only: `\s*$` tried inside a long run of spaces is quadratic.
_STATED = re.compile(r"(.+?)(?:\.\s|(?<=[!?])\s+(?=[A-Z])|\.?(?:(?<!\s)\s+)?$|\n)")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_NUMBER = re.compile(r"-?\d(?:[\d,]*\d)?(?:\.\d+)?(?:/\d+)?|-?\.\d+")  # no trailing comma: "42, since" is 42
# A program's or a calculator's last line: "ans = 7", "answer = 42" (only a number: `answer = total` is no answer)
_ASSIGNED = re.compile(r"^[ \t]*(?:ans|answer|final_answer|result)[ \t]*=[ \t]*(.+?)[ \t.]*$", re.IGNORECASE)
_WORDS = re.compile(r"[A-Za-z]{2,}")
_HEADING = re.compile(r"^#+[ \t]*(?:final[ \t]+)?answer[ \t:]*\n+[ \t]*(\S[^\n]{0,200})\s*$", re.I | re.M)
# Words after an opening "Answer:" past which it labels the reasoning that follows, not an answer
MAX_LABELLED_WORDS = 5


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), with nested braces balanced."""
    boxed, fbox = text.rfind("\\boxed"), text.rfind("\\fbox")
    if boxed < 0 and fbox < 0:
        return None
    start = max(boxed, fbox) + (len("\\boxed") if boxed > fbox else len("\\fbox"))
    rest = text[start:].lstrip()
    if not rest.startswith("{"):  # the `\boxed 5` form
        return rest.split()[0].rstrip("$.") if rest.strip() else None
    open_at = len(text) - len(rest)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None  # unbalanced: no trustworthy answer


def boxed_answer(text: str) -> str | None:
    """The content of the last `\\boxed{…}` in `text`, stripped, or None."""
    found = _last_boxed(text)
    return found.strip().strip("$").strip() or None if found is not None else None


def last_answer_tag(text: str) -> str | None:
    """Content of the last `<answer>…</answer>` (found from the end: linear even in a flood of open tags)."""
    lowered = text.lower()
    close = lowered.rfind("</answer>")
    open_at = lowered.rfind("<answer>", 0, close) if close >= 0 else -1
    return text[open_at + len("<answer>") : close] if open_at >= 0 else None


def _is_number(answer: str) -> bool:
    """Whether `answer` is a plain number once normalised: "42", "$1,000", "120 miles", "\\frac{1}{2}"."""
    return (form := normalize_answer(answer)) is not None and numeric_value(form) is not None


def _after_last_marker(text: str) -> str | None:
    """The answer after the last `####` that has one: the rest of its line, cut at a sentence end, so that
    `"#### 41'. Now: #### 99"` gives 99 and `"#### 18. Done."` gives 18."""
    for mark in reversed(list(_GSM8K.finditer(text))):
        line = text[mark.end() :].split("\n", 1)[0]
        if end := _SENTENCE_END.search(line):
            line = line[: end.start()]
        if line := trim_prose(line.strip().strip("'\"").strip(), _is_number):
            return line
    return None


def _assigned_last(text: str) -> str | None:
    """The number a last line assigns to the answer: `ans = 7`."""
    last = text[-500:].rstrip().rsplit("\n", 1)[-1]
    if (found := _ASSIGNED.match(last)) and _is_number(found.group(1)):
        return found.group(1)
    return None


def _is_prose(answer: str) -> bool:
    """Whether a stated "answer" is a sentence: more than `MAX_LABELLED_WORDS` words (of two letters or more)."""
    return len(_WORDS.findall(answer[: MAX_ANSWER_CHARS * 5])) > MAX_LABELLED_WORDS


def _labels_reasoning(text: str, mark: re.Match[str], stated: re.Match[str]) -> bool:
    """Whether an "Answer:" that opens the text labels the reasoning after it ("Answer: Tom has 3 red and 4 blue
    marbles. So he has 7.") rather than stating the answer ("Answer: B) 42", "Answer: 7. Because …")."""
    opens = not text[: mark.start()].strip(" \t\n*#>_")
    goes_on = bool(text[stated.end() :].strip())
    return opens and goes_on and _is_prose(stated.group(1))


def _after_last_stated(text: str) -> str | None:
    """The answer after the last "The answer is" (or "Final answer:", "answer =") that states one. A question
    restated there (least-to-most prompts' "Final Answer: How old will Jerry be?") and an opening "Answer:" label
    before reasoning state none; a sentence there with numbers states its last ("Final Answer: The third monkey
    eats 21 bananas per day." → 21)."""
    for mark in reversed(list(_ANSWER_IS.finditer(text))):
        if (stated := _STATED.match(text, mark.end())) and stated.group(1).strip(" .$*`"):
            if (boxed := _last_boxed(stated.group(1))) is not None:
                return boxed
            if (trimmed := trim_prose(stated.group(1), _is_number)).strip(" .$*`"):
                if is_question(trimmed) or _labels_reasoning(text, mark, stated):
                    continue
                if _is_prose(trimmed) and (numbers := _NUMBER.findall(trimmed)):
                    return numbers[-1]
                return trimmed
    return None


def _under_heading(text: str) -> str | None:
    """The answer a markdown "## Answer" (or "Final Answer") heading puts on the lines after it, at the end."""
    if found := _HEADING.search(text[-1000:]):
        return found.group(1).strip()
    return None


def _extract(text: str | None, last_number: bool) -> tuple[str | None, str | None]:
    """The answer and how it was found: "json", "boxed", "tag", "marker", "stated", "number"; or (None, None)."""
    if not text:
        return None, None
    found, how = _statement(text)
    if found is None and last_number and (numbers := _NUMBER.findall(text[-2000:])):
        found, how = numbers[-1].strip().strip("$*`").strip(), "number"
    return (found, how) if found else (None, None)


# Reading a set locates each text's statement several times (its kind, then its answer): cached per text.
@lru_cache(maxsize=4096)
def _statement(text: str) -> tuple[str | None, str | None]:
    """The answer a text states, without the last-number fallback, and how it was found; or (None, None)."""
    found, how = json_answer(text), "json"
    if found is not None:
        found = _last_boxed(found) or found
    else:
        found, how = _last_boxed(text), "boxed"
    if found is None and (tag := last_answer_tag(text)) is not None:
        found, how = _last_boxed(tag) or tag.strip(), "tag"
    if found is None:
        found, how = _after_last_marker(text) or _assigned_last(text) or _under_heading(text), "marker"
    if found is None:
        found, how = _after_last_stated(text), "stated"
    found = found.strip().strip("$*`").strip() if found is not None else None  # markdown too: "is **18**."
    return (found, how) if found else (None, None)


def extract_answer(text: str | None, *, last_number: bool = True) -> str | None:
    """The final answer stated in a solution, or None.

    Tried in order: the answer field of a JSON reply (`answer_json`), the last `\\boxed{…}`, the last
    `<answer>…</answer>`, the last GSM8K `#### N` (or a last line `ans = N`), the last "The answer is …" (not an
    opening "Answer:" that labels the reasoning after it, nor a question restated there, a markdown "## Answer"
    heading's line), and finally (unless `last_number=False`, as for a cut-off solution) the last number.
    An abstention ("unknown", "cannot be determined") is returned as stated: `stated_answer` screens it out.

    Args:
        text: a candidate's reply.
        last_number: whether the last number counts when nothing states an answer.

    Returns:
        The answer as written (None when the text states none).

    Example:
        ```python
        from aggregate_graph import extract_answer

        assert extract_answer(r"3 * 6 = 18, so the answer is \\boxed{18}.") == "18"
        assert extract_answer('{"reasoning": "…", "answer": "Canberra"}') == "Canberra"
        assert extract_answer("I am not sure.", last_number=False) is None
        ```
    """
    return _extract(text, last_number)[0]


# What a candidate says when it gives no answer. Each entry is a case-insensitive regular expression searched in
# the extracted answer (trimmed, `$`/`*`/quotes/`\text{}` and a trailing `.` removed); the text it matches is the
# reason recorded. Single words are anchored (`^none$`) so that "0, since none of them…" still answers 0. Drop
# entries (or pass `()`) where such an answer is legitimate, e.g. "none" for an empty set or a multiple choice.
ABSTENTIONS: tuple[str, ...] = (
    r"^unknown$",
    r"^(?:undefined|indeterminate|undetermined|unanswerable|not applicable|no answer|no solution|n/a|nan|null)$",
    r"^none$",
    r"^\[?invalid\]?$",
    r"\b(?:cannot|can ?not|can't|could not|couldn't|is not able to) be (?:determined|calculated|computed|found|"
    r"answered|known|solved|decided|deduced)\b",
    r"(?:\bnot |n't |\bim)possible to (?:determine|calculate|compute|know|tell|say|answer|find|solve|decide)\b",
    r"\b(?:unable|not able) to (?:determine|calculate|compute|answer|find|solve|decide)\b",
    r"\b(?:not enough|insufficient|incomplete|missing) (?:information|info|data|details)\b",
    r"(?:\bnot|n't|\bno) (?:have |give |gives |provide |provides |contain |contains |include |includes )?"
    r"(?:enough|sufficient) (?:information|info|data|details)\b",
    r"\b(?:is|are|remains?) (?:unknown|undefined|indeterminate|undetermined)\b",
    # what a short reply says instead of an answer: read as a span of words, it would vote
    r"\b(?:do not|don't|dont|doesn't|does not) know\b|\b(?:not sure|unsure|no idea)\b|^sorry\b",
    r"\b(?:hard|difficult|impossible) to (?:say|tell)\b|\b(?:can't|cannot|can not) (?:say|tell)\b",
)

_WRAPPED = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


def abstention(answer: str | None, patterns: Sequence[str] = ABSTENTIONS) -> str | None:
    """Why `answer` is no answer at all ("unknown", "cannot be determined", "[invalid]", …): the text of the
    first of `patterns` (regular expressions, default `ABSTENTIONS`) it matches, lowercased; else None.
    `patterns=()` lets every answer vote."""
    if not answer or not patterns:
        return None
    cleaned = " ".join(_WRAPPED.sub(r"\1", answer[:2000]).split()).strip("$*`'\"“”’ ").rstrip(".!").strip()
    for pattern in _compiled(tuple(patterns)):
        if found := pattern.search(cleaned):
            return found.group(0).lower()
    return None


def screen_answer(answer: str | None, patterns: Sequence[str] = ABSTENTIONS) -> tuple[str | None, str | None]:
    """`(answer, None)` for an answer that votes, `(None, reason)` for an abstention (see `abstention`).
    The one rule shared by the runtime (`stated_answer`) and the pool loaders (`training.pools`)."""
    reason = abstention(answer, patterns)
    return (None, reason) if reason is not None else (answer, None)


def stated_answer(
    text: str | None, *, last_number: bool = True, abstentions: Sequence[str] = ABSTENTIONS
) -> tuple[str | None, str | None]:
    """`(answer, None)`, or `(None, reason)` when the solution abstains: its extracted answer is an abstention
    ("The answer is unknown."), or it states no explicit answer and abstains after its last number or in its last
    sentence ("… 3 + 4 = 7 trucks. The answer cannot be determined.", "It cannot be determined without the 20%
    rise.": their numbers must not vote). A solution cut off (`last_number=False`) abstains only by an explicit
    answer ("The answer is unknown."), never by the prose it was cut in."""
    return _stated_answer(text, last_number, tuple(abstentions))


# Settling early reads the landed set again as each candidate lands: each text's answer is screened once.
@lru_cache(maxsize=4096)
def _stated_answer(text: str | None, last_number: bool, abstentions: tuple[str, ...]) -> tuple[str | None, str | None]:
    found, how = _extract(text, last_number)
    screened, reason = screen_answer(found, abstentions)
    if reason is not None:
        return None, reason
    if text and abstentions and last_number and how in (None, "number"):  # a cut-off text abstained from nothing
        tail = text[-2000:].strip()
        numbers = list(_NUMBER.finditer(tail))
        after_last_number = tail[numbers[-1].end() :] if numbers else tail
        last_sentence = _SENTENCES.split(tail)[-1]
        for part in (after_last_number, last_sentence):
            if (reason := abstention(part, abstentions)) is not None:
                return None, reason
    return screened, None


# A word after the number is a unit ("18 dollars", "3 times"), unless it is maths: "4 pi" is not 4, nor "3 squared" 3.
_MATH_WORDS = r"pi|sqrt|root|squared|cubed|log|ln|exp|sin|cos|tan"
_NUMBER_WITH_UNIT = re.compile(rf"^(-?\$?[\d,]*\.?\d+)\s+(?!(?:{_MATH_WORDS})\b)[A-Za-z]{{2,}}[A-Za-z ]*\.?$", re.I)
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(\d+)\}$|^(-?)\\frac(\d)(\d)$")


@lru_cache(maxsize=65536)
def normalize_answer(answer: str | None) -> str | None:
    """A canonical string form: wrappers, `$`, `%`, spaces, thousands separators and a trailing `.`
    removed, `\\dfrac`→`\\frac`, and plain numbers written canonically (18.0 → 18, 1/2 → 1/2). A word answer
    keeps its words (`answer_text.text_form`: "New York"), a number word becomes its number ("two" → 2)."""
    if answer is None:
        return None
    s = answer.strip()
    if (boxed := _last_boxed(s)) is not None and s.startswith(("\\boxed", "\\fbox")):
        s = boxed
    s = _TEXT_WRAPPER.sub(r"\1", s).strip("*`").strip()
    if is_text_form(s):  # a word answer ("Canberra", "New York", "yes"): its words as written, compared by text_key
        return number_word(s) or text_form(s)
    if m := _NUMBER_WITH_UNIT.match(s):  # "18 dollars", "3.5 meters"
        s = m.group(1)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\left", "").replace("\\right", "")
    s = s.replace("$", "").replace("\\%", "").replace("%", "").replace("\\!", "").replace("\\,", "")
    s = _THOUSANDS.sub("", s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    if (value := numeric_value(s)) is not None:
        return _format_number(value)
    return s or None


def numeric_value(s: str) -> Fraction | None:
    """The exact value of a plain number, decimal or simple fraction, else None."""
    s = s.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s) else s
    if re.fullmatch(r"-?(\d+(\.\d*)?|\.\d+)", s) or re.fullmatch(r"-?\d+/\d+", s):
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    if m := _FRAC.match(s):
        sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5), m.group(6))
        if int(den) != 0:
            return Fraction(int(num), int(den)) * (-1 if sign else 1)
    return None


def _format_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    as_decimal = value.numerator / value.denominator
    if Fraction(repr(as_decimal)) == value:  # terminating decimal: 0.5, 2.25
        return repr(as_decimal)
    return f"{value.numerator}/{value.denominator}"


class _Undecided(Exception):
    """math-verify ran out of time. Raised rather than returned so that lru_cache does not keep the verdict:
    a slow moment (first grammar load, a busy CPU) must not split a class for the rest of the process."""


class _Abandoned(BaseException):
    """Raised inside a math-verify call that its caller stopped waiting for (`_within_timeout`). A BaseException, so
    that sympy's own `except Exception` handlers let it through."""


def _interrupt(worker: threading.Thread) -> None:
    """Raise `_Abandoned` in `worker` at its next Python instruction (CPython's `PyThreadState_SetAsyncExc`). Left
    running, a runaway symbolic computation holds the GIL for as long as it runs — a sympy gcd ran on for over 6
    minutes here, slowing every other thread of the process — and nothing will read its result."""
    api = getattr(ctypes, "pythonapi", None)  # CPython's own C API; another interpreter leaves the thread to finish
    if api is not None and worker.ident is not None and worker.is_alive():
        api.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(_Abandoned))


def _within_timeout(fn: Callable[[], T], default: T) -> T:
    """`fn()` in a daemon thread; `default` if it raises; `_Undecided` if it runs past `VERIFY_TIMEOUT_S`, and then
    the thread is stopped (`_interrupt`)."""
    result: list[T] = []

    def run() -> None:
        try:
            result.append(fn())
        except Exception:  # unparseable or unsupported input means "not shown equal", not a crashed vote
            logger.debug("math-verify failed", exc_info=True)
            result.append(default)
        except _Abandoned:
            pass

    worker = threading.Thread(target=run, daemon=True, name="math-verify")
    worker.start()
    worker.join(VERIFY_TIMEOUT_S)
    if not result:
        _interrupt(worker)
        logger.warning("math-verify took over %.1fs; treating the answers as different", VERIFY_TIMEOUT_S)
        raise _Undecided
    return result[0]


@lru_cache(maxsize=65536)
def _parsed(form: str) -> tuple[Any, ...]:
    from math_verify import parse

    return tuple(_within_timeout(lambda: parse(f"${form}$", parsing_timeout=None), []))  # type: ignore[arg-type]


_DIGITS = 45  # values are computed to 60 digits and compared on 45: equal expressions agree far beyond that


def _point(symbol: Any, j: int) -> Any:
    """The value a symbol takes at test point j: fixed by its name, so `x` means the same in both answers
    and different names (`x`, `y`; choices `A`, `B`) get different values."""
    import sympy

    return sympy.Rational(zlib.crc32(str(symbol).encode()) + 1, 2**32) + sympy.sqrt(2 + j)


def _rounded(value: Any) -> str:
    import sympy

    # |x| < 1e-40 is a rounding residue of an exact zero (e.g. sin(pi) evaluated numerically)
    parts = ("0" if abs(part) < 1e-40 else str(sympy.Float(part, _DIGITS)) for part in value.as_real_imag())
    return "{} {}i".format(*parts)


@lru_cache(maxsize=65536)
def _value_key(form: str) -> tuple[str, ...] | None:
    """The values of an answer at two fixed points, rounded to 45 digits, or None if it is not a plain number
    or expression (sets, tuples, intervals, equations, text that does not parse).

    Equal keys mean the same answer (a polynomial identity test at points where collisions are practically
    impossible); different keys mean different answers, so most pairs need no symbolic comparison."""
    import sympy

    if (number := numeric_value(form)) is not None:  # plain numbers: exact, and no parse needed
        key = _rounded(sympy.Rational(number.numerator, number.denominator).evalf(60))
        return key, key
    parsed = _parsed(form)
    expr = parsed[0] if parsed else None
    if not isinstance(expr, sympy.Expr):
        return None

    def evaluate() -> tuple[str, ...] | None:
        values = [expr.subs({x: _point(x, j) for x in expr.free_symbols}).evalf(60) for j in (0, 1)]
        if not all(v.is_number and v.is_finite for v in values):
            return None
        return tuple(_rounded(v) for v in values)

    return _within_timeout(evaluate, None)


def _math_verify(a: str, b: str) -> bool:
    from math_verify import verify

    gold, target = _parsed(a), _parsed(b)
    if not gold or not target:
        return False
    return bool(verify(list(gold), list(target), timeout_seconds=None))


@lru_cache(maxsize=65536)
def _verify_with_timeout(a: str, b: str) -> bool:
    return _within_timeout(lambda: _math_verify(a, b), False)


def _is_collection(form: str) -> bool:
    import sympy

    parsed = _parsed(form)
    return bool(parsed) and isinstance(parsed[0], sympy.Tuple | sympy.Set | sympy.MatrixBase | tuple | list)


def _symbolically_equal(a: str, b: str) -> bool:
    """For forms without a value key: math-verify, unless one side has a value and the other is a collection."""
    if (_value_key(a) is not None and _is_collection(b)) or (_value_key(b) is not None and _is_collection(a)):
        return False  # a number or expression is never a tuple, set, interval or matrix
    return _verify_with_timeout(*sorted((a, b)))


def _comparable(answer: str | None) -> str | None:
    form = normalize_answer(answer)
    return form if form is not None and len(form) <= MAX_ANSWER_CHARS else None


def equivalent(a: str | None, b: str | None) -> bool:
    """Whether two final answers are mathematically the same. Thread-safe and cached."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if na is None or nb is None:
        return False
    if na == nb:
        return True
    if is_text_form(na) or is_text_form(nb):
        return text_key(na) == text_key(nb)
    na, nb = _comparable(na), _comparable(nb)
    if na is None or nb is None:
        return False
    try:
        ka, kb = _value_key(na), _value_key(nb)
        if ka is not None and kb is not None:
            return ka == kb
        return _symbolically_equal(na, nb)
    except _Undecided:
        return False


def groups_at_once(answers: Sequence[str | None]) -> bool:
    """Whether `group_equivalent` groups `answers` by their forms alone (microseconds): they share one form, or
    each is words or no answer. Different numbers and expressions are compared by value (sympy: its import takes
    ~0.25 s; math-verify's parser ~10-20 ms a form on first sight, up to seconds)."""
    forms = {form for answer in answers if (form := normalize_answer(answer)) is not None}
    return len(forms) <= 1 or all(is_text_form(form) for form in forms)


def group_equivalent(answers: Sequence[str | None]) -> list[list[int]]:
    """Equivalence classes of `answers` as lists of positions, in order of first appearance.

    Answers are bucketed by normal form, then word answers by their `text_key` and numbers and expressions by
    their value key (dict lookups, no pairwise work); math-verify's symbolic check runs only between the
    remaining forms (sets, tuples, intervals, equations) and the classes of such forms. None answers join no class.
    """
    buckets: dict[str, list[int]] = {}
    for i, answer in enumerate(answers):
        if (form := normalize_answer(answer)) is not None:
            buckets.setdefault(form, []).append(i)
    if len(buckets) == 1:  # one form: nothing to compare it with
        return list(buckets.values())
    classes: list[list[int]] = []
    by_value: dict[tuple[str, ...], list[int]] = {}
    by_text: dict[str, list[int]] = {}
    symbolic: list[tuple[str, list[int]]] = []  # (representative form, members)
    for form, members in buckets.items():
        if is_text_form(form):
            if (key := text_key(form)) in by_text:
                by_text[key].extend(members)
            else:
                by_text[key] = list(members)
                classes.append(by_text[key])
            continue
        comparable = _comparable(form)
        try:
            key = _value_key(comparable) if comparable is not None else None
            if key is not None:
                if key in by_value:
                    by_value[key].extend(members)
                else:
                    by_value[key] = list(members)
                    classes.append(by_value[key])
                continue
            if comparable is not None:
                for rep, cls in symbolic:
                    if _symbolically_equal(rep, comparable):
                        cls.extend(members)
                        break
                else:
                    symbolic.append((comparable, list(members)))
                    classes.append(symbolic[-1][1])
                continue
        except _Undecided:
            pass
        classes.append(list(members))  # too long to compare, or undecided in time: a class of its own
    return [sorted(members) for members in classes]
