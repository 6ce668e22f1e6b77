"""The prebuilt graph's state — the conversation, the candidates as they land, the sample set — and the
checkpoint serializer that restores it."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict  # pydantic builds JSON schemas (Studio's forms) from it before Python 3.12

from aggregate_graph.sample_set import Candidate, SampleSet

# The types this package keeps in checkpoints: state values, and the `Draw` payloads of pending Sends.
# LangGraph's serializer warns when it restores types it was not told about and refuses them in strict mode
# (LANGGRAPH_STRICT_MSGPACK=true); `checkpoint_serde()` allows these explicitly.
MSGPACK_TYPES = [
    ("aggregate_graph.sample_set", name) for name in ("Aggregation", "Candidate", "SampleSet", "Usage")
] + [("aggregate_graph.drawing.course", "Draw")]


def checkpoint_serde(*extra: tuple[str, ...]) -> JsonPlusSerializer:
    """A checkpoint serializer that restores this package's state types (plus `extra` ones) without warnings,
    also under LANGGRAPH_STRICT_MSGPACK.

    Args:
        *extra: more (module, type name) pairs to allow, for your own state's types.

    Returns:
        LangGraph's `JsonPlusSerializer` with those types allowed.

    Example:
        ```python
        from langgraph.checkpoint.memory import InMemorySaver
        from aggregate_graph import checkpoint_serde

        saver = InMemorySaver(serde=checkpoint_serde(("my_app.state", "Ticket")))
        ```
    """
    return JsonPlusSerializer(allowed_msgpack_modules=[*MSGPACK_TYPES, *extra])


def merge_candidates(current: list[Candidate] | None, new: list[Candidate] | None) -> list[Candidate]:
    """Reducer: candidates keyed by index (a retried draw replaces its earlier record), in index order."""
    by_index = {c.index: c for c in current or []}
    by_index.update({c.index: c for c in new or []})
    return [by_index[i] for i in sorted(by_index)]


class AggregateState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    question: str
    candidates: Annotated[list[Candidate], merge_candidates]
    cancelled: Annotated[list[int], operator.add]  # the indices whose draws settling early cancelled
    run_key: str  # names the run's waves, whose draws share a `Settling`
    sample_set: SampleSet | None


def last_turn(messages: Sequence[Any]) -> tuple[str, list[BaseMessage]]:
    """The last human message's text (the question the sample set records) and the conversation the candidates
    answer: all of it — tool calls and tool results after the question included — except trailing AI messages,
    since a chat model answers a human or tool turn, not its own reply (e.g. an agent's draft that an
    aggregate node placed after the tool loop rewrites)."""
    end = len(messages)
    while end and isinstance(messages[end - 1], AIMessage):
        end -= 1
    for i in range(end - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            question = str(messages[i].text).strip()
            if not question:
                raise ValueError("the last human message is empty: there is no question to answer")
            return question, list(messages[:end])
    raise ValueError("no question: the state's `messages` has no human message")
