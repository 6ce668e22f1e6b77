"""Replies that answer LangChain's standard chat-model test suites (`langchain-tests`) as a real model would.

`standard_reply` is a reply function for `OpenAITestServer` (`OpenAITestServer(standard_reply)`): it reads a Chat
Completions request and answers from what the request says, not from a script per test —

* tools offered and a tool wanted (`tool_choice` "required" or naming one; or, left to the model, a user turn
  that names a tool, mentions a word of its name or asks to "use the tool"): a call of that tool, its arguments
  built for the tool's JSON schema from the last user message (numbers for numeric fields, quoted names,
  capitalised names and the like for strings);
* `response_format` json_schema: JSON valid for the schema, filled the same way; json_object: a JSON object with
  the keys the prompt names in quotes;
* after a tool's result: a sentence that reports it; otherwise a plain-text answer (a greeting for a greeting,
  the sum for "What is 3 + 4", …);
* `stop` honoured: the text is cut before the first stop sequence.

The same request always gets the same reply, so the n candidates an aggregating model draws agree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aggregate_graph.openai_compat.request import content_text

__all__ = ["standard_reply"]

# Words of a tool's name that say nothing about what it is for ("get_weather" is about the weather).
_GENERIC_WORDS = {"get", "set", "my", "tool", "function", "fn", "the", "a", "an", "run", "do", "make", "call", "to"}
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"|“([^”]+)”")
_CAPITALISED = re.compile(r"\b[A-Z][\w.]*(?:(?:,\s*|\s+)[A-Z][\w.]*)*")
_ARITHMETIC = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/x×])\s*(-?\d+(?:\.\d+)?)")
_GREETING = re.compile(r"^\s*(hello|hi|hey|greetings|good (morning|afternoon|evening))\b", re.IGNORECASE)
_USE_A_TOOL = re.compile(r"\b(use|using|call|calling)\s+(the|a|your)\s+tools?\b", re.IGNORECASE)


def standard_reply(body: dict[str, Any], sample_no: int = 0) -> str | dict[str, Any]:
    """The reply to one Chat Completions request `body`: a text, or a dict that calls a tool (the server's
    `tool_calls_reply` format). `sample_no` is not read: every sample of a request gets the same reply."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    request = _last_user_text(messages)
    tools = [t["function"] for t in body.get("tools") or [] if t.get("type") == "function"]
    tool = _tool_to_call(tools, body.get("tool_choice"), messages, request)
    if tool is not None:
        arguments = _value(tool.get("parameters") or {"type": "object"}, _Source(request), tool.get("parameters"))
        return {"content": None, "tool_calls": [{"name": tool["name"], "arguments": arguments}]}
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        schema = response_format.get("json_schema", {}).get("schema") or {"type": "object"}
        return json.dumps(_value(schema, _Source(request), schema), ensure_ascii=False)
    if response_format.get("type") == "json_object":
        return json.dumps(_json_object(request), ensure_ascii=False)
    return _cut_at_stop(_text_answer(messages, request), body.get("stop"))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    return next((content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


def _tool_to_call(
    tools: list[dict[str, Any]], choice: Any, messages: list[dict[str, Any]], request: str
) -> dict[str, Any] | None:
    """The tool the model calls now, if any: the one `tool_choice` names, the likeliest one when a call is
    required, or — left to the model — one the user's last turn asks for (never right after a tool's result)."""
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        return next((t for t in tools if t["name"] == name), None)
    relevant = sorted(tools, key=lambda t: -_relevance(t, request))
    if choice == "required":
        return relevant[0]
    if not messages or messages[-1].get("role") != "user":
        return None  # the tool has answered (or the model spoke last): say what it returned
    if _relevance(relevant[0], request) > 0 or (_USE_A_TOOL.search(request) and len(tools) == 1):
        return relevant[0]
    return None


def _relevance(tool: dict[str, Any], request: str) -> int:
    """How plainly the request asks for this tool: its name (2), or a telling word of its name (1)."""
    text = request.lower()
    name = tool["name"].lower()
    if name in text:
        return 2
    words = set(re.split(r"[_\W]+", name)) - _GENERIC_WORDS
    return int(any(re.search(rf"\b{re.escape(w)}", text) for w in words if len(w) > 2))


class _Source:
    """Values read off the user's request, each handed out once, in order of appearance."""

    def __init__(self, request: str, exclude: set[str] | None = None) -> None:
        self.request = request
        self.numbers = [float(n) if "." in n else int(n) for n in _NUMBER.findall(request)]
        quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(request)]
        self.strings = [s for s in quoted if s not in (exclude or set())]
        self.strings += [m[1].strip() for m in re.finditer(r"\(([^()]+)\)", request) if not _NUMBER.fullmatch(m[1])]
        unquoted = _QUOTED.sub(" ", request)
        for match in _CAPITALISED.finditer(unquoted):
            name = match.group(0).rstrip(",.")
            # a name ("Pirate", "San Francisco, CA"), not a sentence's first word nor a lone acronym ("JSON")
            if not _starts_sentence(unquoted, match.start()) and not name.isupper() and name not in self.strings:
                self.strings.append(name)
        topic = re.search(r"\babout ([^,.?!]+)", request)
        self.topic = topic[1].strip() if topic else None

    def number(self) -> int | float | None:
        return self.numbers.pop(0) if self.numbers else None

    def string(self, name: str, schema: dict[str, Any]) -> str:
        if "desc" in name.lower() and (clause := re.search(r"\s[-–—]\s(.+)$", self.request)):
            return clause[1].strip()
        if self.strings:
            return self.strings.pop(0)
        described = schema.get("description") or name.replace("_", " ")
        return f"{described[:1].upper()}{described[1:]}" + (f" about {self.topic}" if self.topic else "")

    def declines(self, name: str) -> bool:
        """Whether the request asks for this field to be left out ("… no punchline")."""
        return (
            re.search(rf"\b(no|without)\s+(the\s+|a\s+)?{re.escape(name)}\b", self.request, re.IGNORECASE) is not None
        )


def _starts_sentence(text: str, index: int) -> bool:
    return not text[:index].strip() or text[:index].rstrip()[-1] in ".!?:"


def _value(schema: dict[str, Any], source: _Source, root: dict[str, Any] | None, name: str = "value") -> Any:
    """A value valid for the JSON `schema` (`root` holds the `$defs` its references point at), read off the
    request where it says something that fits."""
    if "$ref" in schema:
        target: Any = root or {}
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target.get(part, {})
        return _value(target, source, root, name)
    for key in ("anyOf", "oneOf"):
        if options := schema.get(key):
            if source.declines(name) and any(o.get("type") == "null" for o in options):
                return None
            chosen = next((o for o in options if o.get("type") != "null"), options[0])
            described = {k: schema[k] for k in ("description", "title") if k in schema}
            return _value({**described, **chosen}, source, root, name)
    if "allOf" in schema:
        return _value(schema["allOf"][0], source, root, name)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return next((v for v in schema["enum"] if str(v).lower() in source.request.lower()), schema["enum"][0])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        required = set(schema.get("required", []))
        properties: dict[str, Any] = schema.get("properties", {})
        return {
            key: _value(sub, source, root, key)
            for key, sub in properties.items()
            if key in required or not source.declines(key)
        }
    if kind == "array":
        return [_value(schema["items"], source, root, name)] if schema.get("minItems") and "items" in schema else []
    if kind in ("integer", "number"):
        return _number(schema, source.number(), integer=kind == "integer")
    if kind == "boolean":
        return not source.declines(name)
    if kind == "null":
        return None
    return source.string(name, schema)


def _number(schema: dict[str, Any], found: int | float | None, *, integer: bool) -> int | float:
    """The number the request gives, else the schema's default or 0, moved into the schema's bounds."""
    value = found if found is not None else schema.get("default", 0)
    low = max(schema.get("minimum", -(10**9)), schema.get("exclusiveMinimum", -(10**9) - 1) + 1)
    high = min(schema.get("maximum", 10**9), schema.get("exclusiveMaximum", 10**9 + 1) - 1)
    value = min(max(value, low), high)
    return int(value) if integer else value


def _json_object(request: str) -> dict[str, Any]:
    """JSON mode (no schema): an object with the keys the prompt names in quotes, else one "answer"."""
    keys = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(request)]
    if not keys:
        return {"answer": _text_answer([], request)}
    source = _Source(request, exclude=set(keys))
    return {key: source.string(key, {}) for key in keys}


def _text_answer(messages: list[dict[str, Any]], request: str) -> str:
    """Plain text: what a tool just returned, else an answer to the user's last turn."""
    if messages and messages[-1].get("role") == "tool":
        return _tool_report(messages)
    if _GREETING.search(request):
        return "Hello! How can I help you today?"
    if re.search(r"\bhow are you\b", request, re.IGNORECASE):
        return "I'm doing well, thank you for asking! How can I help you today?"
    if match := _ARITHMETIC.search(request):
        a, op, b = match.groups()
        result = _arithmetic(float(a), op, float(b))
        if result is not None:
            shown = int(result) if result == int(result) else round(result, 6)
            return f"{a} {op} {b} = {shown}."
    if not request.strip():
        return "Hello! How can I help you today?"
    return f"Sure! Here is my reply to “{request.strip()}”: I am glad to help with that."


def _arithmetic(a: float, op: str, b: float) -> float | None:
    if op == "/":
        return a / b if b else None
    return {"+": a + b, "-": a - b, "*": a * b, "x": a * b, "×": a * b}[op]


def _tool_report(messages: list[dict[str, Any]]) -> str:
    """A sentence about the tool results that end the conversation (the tool named from the call it answers)."""
    names = {
        call.get("id"): call.get("function", {}).get("name")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        text = content_text(message.get("content")).strip()
        name = names.get(message.get("tool_call_id")) or message.get("name") or "the tool"
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and len(data) == 1:
            ((key, value),) = data.items()
            results.append(f"The {key} is {value}.")
        else:
            results.append(f"{name} returned: {text or 'nothing'}")
    return " ".join(reversed(results))


def _cut_at_stop(text: str, stop: str | list[str] | None) -> str:
    """The text up to the first stop sequence, as a server that honours `stop` sends it."""
    stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if s]
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]
