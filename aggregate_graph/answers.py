"""Final-answer extraction, normal forms and math equivalence.

Equivalence is decided cheaply where a normal form already decides it (equal strings, or two plain numbers),
then by comparing the values of math-verify's parsed expressions at fixed points, and by math-verify's
symbolic `verify` only for what is not a plain expression (sets, tuples, intervals, equations).

math-verify's own timeout uses `signal.alarm`, which only works on the main thread, while LangGraph runs sync
nodes in worker threads; so its timeouts are disabled and each uncached parse, evaluation or check runs in a
daemon thread that we stop waiting for after `VERIFY_TIMEOUT_S`.
"""

from __future__ import annotations

import cmath
import logging
import re
import threading
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any, TypeVar

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

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_GSM8K = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*(.+?)(?:\.\s|\.?\s*$|\n)", re.IGNORECASE
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), with nested braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    open_at = text.find("{", start)
    if open_at < 0:
        # `\boxed 5` form
        rest = text[start + len("\\boxed") :].strip()
        return rest.split()[0].rstrip("$.") if rest else None
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None  # unbalanced: no trustworthy answer


def extract_answer(text: str | None) -> str | None:
    """The final answer stated in a solution, or None.

    Tried in order: the last `\\boxed{…}`, the last `<answer>…</answer>`, GSM8K's `#### N`, the last
    "The answer is …", and finally the last number in the text.
    """
    if not text:
        return None
    found: str | None = _last_boxed(text)
    if found is None and (tags := _ANSWER_TAG.findall(text)):
        inner = tags[-1].strip()
        found = _last_boxed(inner) or inner
    if found is None and (marks := _GSM8K.findall(text)):
        found = marks[-1]
    if found is None and (stated := _ANSWER_IS.findall(text)):
        found = _last_boxed(stated[-1]) or stated[-1]
    if found is None and (numbers := _NUMBER.findall(text[-2000:])):
        found = numbers[-1]
    if found is None:
        return None
    found = found.strip().strip("$").strip()
    return found or None


_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(\d+)\}$|^(-?)\\frac(\d)(\d)$")


@lru_cache(maxsize=65536)
def normalize_answer(answer: str | None) -> str | None:
    """A canonical string form: wrappers, `$`, `%`, spaces, thousands separators and a trailing `.`
    removed, `\\dfrac`→`\\frac`, and plain numbers written canonically (18.0 → 18, 1/2 → 1/2)."""
    if answer is None:
        return None
    s = answer.strip()
    if (boxed := _last_boxed(s)) is not None and s.startswith(("\\boxed", "\\fbox")):
        s = boxed
    s = _TEXT_WRAPPER.sub(r"\1", s)
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


def _within_timeout(fn: Callable[[], T], default: T) -> T:
    """`fn()` in a daemon thread, or `default` if it fails or runs past `VERIFY_TIMEOUT_S`."""
    result: list[T] = []

    def run() -> None:
        try:
            result.append(fn())
        except Exception:  # unparseable or unsupported input means "not shown equal", not a crashed vote
            logger.debug("math-verify failed", exc_info=True)

    worker = threading.Thread(target=run, daemon=True, name="math-verify")
    worker.start()
    worker.join(VERIFY_TIMEOUT_S)
    if not result and worker.is_alive():
        logger.warning("math-verify took over %.1fs; treating the answers as different", VERIFY_TIMEOUT_S)
    return result[0] if result else default


@lru_cache(maxsize=65536)
def _parsed(form: str) -> tuple[Any, ...]:
    from math_verify import parse

    return tuple(_within_timeout(lambda: parse(f"${form}$", parsing_timeout=None), []))  # type: ignore[arg-type]


@lru_cache(maxsize=65536)
def _fingerprint(form: str) -> tuple[complex, ...] | None:
    """Values of a parsed expression at two fixed irrational points, or None if it is not a plain expression.

    Two expressions that agree at both points are the same answer (a random polynomial identity test);
    ones that differ are different, so most pairs need no symbolic comparison."""
    import sympy

    parsed = _parsed(form)
    expr = parsed[0] if parsed else None
    if not isinstance(expr, sympy.Expr):
        return None

    def evaluate() -> tuple[complex, ...]:
        symbols = sorted(expr.free_symbols, key=str)
        points = [{x: sympy.sqrt(2 + 3 * i + j) for i, x in enumerate(symbols)} for j in (0, 1)]
        return tuple(complex(expr.subs(point).evalf(30)) for point in points)

    values = _within_timeout(evaluate, None)
    return values if values is not None and all(cmath.isfinite(v) for v in values) else None


def _math_verify(a: str, b: str) -> bool:
    from math_verify import verify

    gold, target = _parsed(a), _parsed(b)
    if not gold or not target:
        return False
    return bool(verify(list(gold), list(target), timeout_seconds=None))


@lru_cache(maxsize=65536)
def _verify_with_timeout(a: str, b: str) -> bool:
    return _within_timeout(lambda: _math_verify(a, b), False)


def _close(x: complex, y: complex) -> bool:
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


def equivalent(a: str | None, b: str | None) -> bool:
    """Whether two final answers are mathematically the same. Thread-safe and cached."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if na is None or nb is None:
        return False
    if na == nb:
        return True
    if numeric_value(na) is not None and numeric_value(nb) is not None:
        return False  # two different exact numbers
    if len(na) > MAX_ANSWER_CHARS or len(nb) > MAX_ANSWER_CHARS:
        return False
    fa, fb = _fingerprint(na), _fingerprint(nb)
    if fa is not None and fb is not None:
        return all(_close(x, y) for x, y in zip(fa, fb, strict=True))
    if (fa is not None and _is_collection(nb)) or (fb is not None and _is_collection(na)):
        return False  # a number or expression is never a tuple, set, interval or matrix
    return _verify_with_timeout(*sorted((na, nb)))


def _is_collection(form: str) -> bool:
    import sympy

    parsed = _parsed(form)
    return bool(parsed) and isinstance(parsed[0], sympy.Tuple | sympy.Set | sympy.MatrixBase | tuple | list)


def group_equivalent(answers: Sequence[str | None]) -> list[list[int]]:
    """Equivalence classes of `answers` as lists of positions, in order of first appearance.

    Answers are bucketed by normal form first, so math-verify is called only between distinct normal
    forms that are not both plain numbers, once per (form, class) pair. None answers join no class.
    """
    buckets: dict[str, list[int]] = {}
    for i, answer in enumerate(answers):
        if (form := normalize_answer(answer)) is not None:
            buckets.setdefault(form, []).append(i)
    classes: list[tuple[str, list[int]]] = []  # (representative form, members)
    for form, members in buckets.items():
        for rep, cls in classes:
            if equivalent(rep, form):
                cls.extend(members)
                break
        else:
            classes.append((form, list(members)))
    return [sorted(members) for _, members in classes]
