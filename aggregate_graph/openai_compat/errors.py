"""Deprecated path: this module is `aggregate_graph.openai_compat.quorum_errors` now, a name that says
what it holds; removed in the next release."""

from typing import Any

from aggregate_graph._moved import moved_attribute
from aggregate_graph.openai_compat import quorum_errors

_MOVED = dict.fromkeys(quorum_errors.__all__, quorum_errors.__name__)


def __getattr__(name: str) -> Any:
    return moved_attribute(__name__, name, _MOVED)
