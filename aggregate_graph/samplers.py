"""Deprecated path: this module is `aggregate_graph.draw_settings` now, a name that says
what it holds; removed in the next release."""

from typing import Any

from aggregate_graph._moved import moved_attribute

_MOVED = dict.fromkeys(
    ("AdaptiveSampling", "CandidatePolicy", "Sampler", "describe_model", "unbind"), "aggregate_graph.draw_settings"
)


def __getattr__(name: str) -> Any:
    return moved_attribute(__name__, name, _MOVED)
