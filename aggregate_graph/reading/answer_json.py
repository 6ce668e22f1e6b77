"""The answer field of a JSON reply, as models write it: bare, in a ```json fence, or inside prose.

Apps ask for `{"reasoning": …, "answer": …}`, and models write the LaTeX in it with single backslashes, which JSON
reads as escapes (`"\\frac"` is a form feed and "rac", `"\\sqrt"` is invalid). A backslash that starts a LaTeX
command is therefore read as a backslash, so that `"answer": "3\\sqrt{5}"` is 3√5 and not a parse error whose last
number (5) would vote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# The fields a reply names its answer by, tried in this order when the caller names none.
ANSWER_FIELDS: tuple[str, ...] = (
    "answer",
    "final_answer",
    "finalAnswer",
    "final",
    "result",
    "label",
    "choice",
    "prediction",
    "classification",
    "sentiment",
    "category",
)
MAX_JSON_CHARS = 100_000  # a reply longer than this is not searched for objects (each try is a parse)

_OBJECT_START = re.compile(r"\{\s*\"")
# In a JSON string: an escaped backslash stays; a backslash before a LaTeX command becomes a literal one. `\n` is a
# newline unless a maths command follows (`\neq`, `\nabla`, `\not`…); `\u` is a Unicode escape only with 4 hex digits.
_ESCAPE = re.compile(
    r"\\(?:(?P<escape>\\|\"|/|u[0-9a-fA-F]{4}|[bfrt](?![a-zA-Z])"
    r"|n(?!eq|e\b|abla|ot|i\b|u\b|eg|mid|leq|geq|subset|supset|exists|parallel|cong|sim))|(?P<latex>.))",
    re.DOTALL,
)


def _escape_latex(match: re.Match[str]) -> str:
    # a LaTeX command, or an escape JSON does not have (`\{`, `\,`): a literal backslash
    return match.group(0) if match.group("escape") is not None else "\\\\" + match.group("latex")


def _objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in `text` that start at `{"`, outermost only, in order; LaTeX backslashes read as written."""
    if len(text) > MAX_JSON_CHARS or '"' not in text or "{" not in text:
        return []
    escaped = _ESCAPE.sub(_escape_latex, text)
    decoder, found, searched_to = json.JSONDecoder(strict=False), [], 0  # raw newlines in strings too
    for start in _OBJECT_START.finditer(escaped):
        if start.start() < searched_to:
            continue  # inside an object already read
        try:
            value, end = decoder.raw_decode(escaped, start.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
            searched_to = end
    return found


def _field(value: Any, names: Sequence[str]) -> Any:
    """The first of `names` found in a JSON value, searched breadth first (`{"result": {"answer": …}}` too)."""
    queue = [value]
    while queue:
        node = queue.pop(0)
        if isinstance(node, dict):
            for name in names:
                if name in node and node[name] is not None and not isinstance(node[name], dict | list):
                    return node[name]
            queue.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            queue.extend(v for v in node if isinstance(v, dict | list))
    return None


def _as_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip() or None


def _broken_field(text: str, fields: Sequence[str]) -> Any:
    """The last `"field": value` pair of a reply whose JSON does not parse (a string left open before it, a
    comma missing): the value, read as JSON."""
    names = "|".join(re.escape(name) for name in fields)
    pairs = list(re.finditer(rf'"(?:{names})"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d[\d.,/]*|true|false)', text[-5000:]))
    if not pairs:
        return None
    try:
        return json.loads(_ESCAPE.sub(_escape_latex, pairs[-1].group(1)), strict=False)
    except ValueError:
        return None


def json_answer(text: str, fields: Sequence[str] = ANSWER_FIELDS) -> str | None:
    """The answer a JSON reply states: the first of `fields` in the last object of `text` that has one, as text
    (a number as written, a boolean as "true"/"false"); for JSON that does not parse, the last `"answer": …` pair;
    None when `text` names none."""
    if not any(f'"{name}"' in text for name in fields):  # most replies: no field to read, nothing to parse
        return None
    for obj in reversed(_objects(text)):
        if (value := _field(obj, fields)) is not None:
            return _as_text(value)
    if '"' in text and (value := _broken_field(text, fields)) is not None:
        return _as_text(value)
    return None
