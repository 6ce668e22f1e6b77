"""Arithmetic slips: equations in a candidate's work whose two sides are not equal ("3 * 12 = 38").

A slip is the commonest way a worked solution goes wrong, and the easiest to see without knowing the answer: on
the unreserved Faithful-CoT problems, a worked candidate with a false equation gives the right final answer 3% of
the time, one whose equations all hold 70%. `kinds.content_kind` calls such a candidate `slipped`, and
`WeightedVote` learns that kind's (low) weight.

Only plain arithmetic is checked: numbers (`1,000`, `$4.50`, `.75`, `3 1/2`, `\\frac{1}{2}`), `+ - * / ^`,
`x`/`×`/`\\cdot`/`\\times` between numbers, and brackets. A side that touches a word or a symbol ("3F - 12 = 72",
"f(1) - 1", "= 99\\cdot") is left unchecked, as is the first side of a chain when it has no operator ("$80 = $80
+ $20": a tail of "25% of $80"). Measured on reference solutions, it flags 28 of 7,473 GSM8K train solutions
(24,230 equations checked; most of the 28 are real slips in the references) and 1 of 500 MATH-500 solutions.
"""

from __future__ import annotations

import ast
import operator
import re
from functools import lru_cache
from itertools import pairwise

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow}  # fmt: skip
_LATEX = [
    (re.compile(r"(?<!\d)(\d+) ?\\[dt]?frac\{(\d+)\}\{(\d+)\}"), r"(\1+\2/\3)"),  # 1\frac{1}{4}: one and a quarter
    (re.compile(r"\\[dt]?frac\{(\d+)\}\{(\d+)\}"), r"(\1/\2)"),
    (re.compile(r"\\boxed\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\\(?:left|right)(?=[()])"), ""),
    (re.compile(r"\\!|\{(?=,\})|(?<=\{,)\}"), ""),  # 729,\!000 and 729{,}000
    (re.compile(r"\\(?:cdot|times)(?![A-Za-z])"), "*"),
    (re.compile(r"\\div(?![A-Za-z])"), "/"),
]
_MIXED_NUMBER = re.compile(r"(?<![\d.,/])(\d+) (\d+)/(\d+)(?![\d./])")  # "1 1/2": one and a half
# a written fraction binds tighter than the operators around it: "7.5 / 1/2" is 7.5 ÷ ½
_FRACTION = re.compile(r"(?<=[\s(=+\-*$])(\d+)/(\d+)(?![\d./])")
_TOKEN = re.compile(
    r"""(?P<num>(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w%]|\.\d)|(?<![\w.])\.\d+(?![\w%]|\.\d))
      | (?P<currency>\$)
      | (?P<op>[-+*/^×÷]|(?<=[\d)\s])x(?=\s*[\d($]))
      | (?P<open>\()
      | (?P<close>\))
      | (?P<equals>=)
      | (?P<space>[ \t]+)
      | (?P<other>.)""",
    re.X | re.S,
)
# Longer sides are not a person's arithmetic (a model repeating "- - - …"), and the parser's stack is finite.
MAX_SIDE_TOKENS = 64
_CLEAN_BEFORE = re.compile(r"[\s\"'\[<]")  # what may precede a run whose first side is checked
_CLEAN_AFTER = re.compile(r"[\s.,;:!?\"'\]>]")  # … and follow one whose last side is


def _value(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 8:  # no 9 ** 9 ** 9
            raise ValueError("exponent too large")
        return _OPERATORS[type(node.op)](left, right)
    raise ValueError("not arithmetic")


def _side(tokens: list[tuple[str, str]]) -> tuple[float, bool] | None:
    """The value of one side of an equation and whether it has an operator; None if it is not plain arithmetic."""
    parts: list[str] = []
    has_operator, previous = False, None
    for kind, text in tokens:
        if kind == "num":
            if previous in ("num", "close"):
                return None
            parts.append(text.replace(",", ""))
        elif kind == "op":
            op = {"x": "*", "×": "*", "÷": "/", "^": "**"}.get(text, text)
            if previous in (None, "op", "open") and op != "-":
                return None
            parts.append(op)
            has_operator = True
        elif kind == "open":
            parts.append("*(" if previous in ("num", "close") else "(")  # 2(3 + 4)
        else:
            parts.append(")")
        previous = kind
    if not parts or len(parts) > MAX_SIDE_TOKENS:
        return None
    try:
        return _value(ast.parse("".join(parts), mode="eval").body), has_operator
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
        return None


def _decimals(tokens: list[tuple[str, str]]) -> int:
    numbers = [text for kind, text in tokens if kind == "num"]
    return len(numbers[-1].split(".")[1]) if numbers and "." in numbers[-1] else 0


def _runs(text: str) -> list[list[list[tuple[str, str]]]]:
    """The text's runs of arithmetic that hold an `=`, each as its sides; a side touching a word is emptied."""
    runs, run, start, end = [], [], 0, 0
    for match in [*_TOKEN.finditer(text), None]:
        kind = match.lastgroup if match else "other"
        if kind == "space":
            continue
        if kind != "other":
            if not run:
                start = match.start()
            run.append((kind, match.group()))
            end = match.end()
            continue
        if any(k == "equals" for k, _ in run):
            sides: list[list[tuple[str, str]]] = [[]]
            for token in run:
                if token[0] == "equals":
                    sides.append([])
                elif token[0] != "currency":
                    sides[-1].append(token)
            if (start > 0 and not _CLEAN_BEFORE.match(text, start - 1)) or (sides[0] and sides[0][0][0] == "op"):
                sides[0] = []
            if end < len(text) and not _CLEAN_AFTER.match(text, end):
                sides[-1] = []
            runs.append(sides)
        run = []
    return runs


@lru_cache(maxsize=4096)
def arithmetic_slips(text: str) -> tuple[int, int]:
    """(equations checked, equations false) in `text`. Two sides are equal within 1%, or within rounding to the
    decimals of a number on the right ("10 / 3 = 3.33", "= 3"); "235 - 240 = 5" (a difference stated without its
    sign) is not a slip."""
    for pattern, replacement in _LATEX:
        text = pattern.sub(replacement, text)
    text = _FRACTION.sub(r"(\1/\2)", _MIXED_NUMBER.sub(r"(\1+\2/\3)", text))
    checked = false = 0
    for sides in _runs(text):
        values = [_side(side) for side in sides]
        for i, (left, right) in enumerate(pairwise(values)):
            # the first side of a chain without an operator may be a tail of words ("25% of $80 = $80 + $20")
            if left is None or right is None or not (left[1] or right[1]) or (i == 0 and not left[1]):
                continue
            checked += 1
            # a number may be rounded to the decimals it is written with; an expression is exact
            rounding = 0.0 if right[1] else 0.5 * 10 ** -_decimals(sides[i + 1])
            tolerance = max(rounding, 0.01 * abs(right[0]), 1e-9)
            if min(abs(left[0] - right[0]), abs(abs(left[0]) - abs(right[0]))) > tolerance:
                false += 1
    return checked, false


def has_slip(text: str) -> bool:
    """Whether `text` holds an equation whose sides are not equal (`arithmetic_slips`)."""
    return arithmetic_slips(text)[1] > 0
