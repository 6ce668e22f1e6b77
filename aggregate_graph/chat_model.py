"""Deprecated path: this module is `aggregate_graph.aggregating_chat_model` now, a name that says
what it holds; removed in the next release."""

from typing import Any

from aggregate_graph._moved import moved_attribute

_MOVED = dict.fromkeys(("AggregatingChatModel",), "aggregate_graph.aggregating_chat_model")


def __getattr__(name: str) -> Any:
    return moved_attribute(__name__, name, _MOVED)
