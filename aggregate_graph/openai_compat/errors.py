"""Deprecated path: this module is `aggregate_graph.openai_compat.quorum_errors` now, a name that says
what it holds; removed in the next release."""

from typing import Any

from aggregate_graph._moved import moved_attribute

_MOVED = dict.fromkeys(
    (
        "QuorumAPIConnectionError",
        "QuorumAPIError",
        "QuorumAPIStatusError",
        "QuorumAPITimeoutError",
        "QuorumAuthenticationError",
        "QuorumBadRequestError",
        "QuorumConflictError",
        "QuorumInternalServerError",
        "QuorumNotFoundError",
        "QuorumPermissionDeniedError",
        "QuorumRateLimitError",
        "QuorumUnprocessableEntityError",
        "cause",
        "upstream_error",
    ),
    "aggregate_graph.openai_compat.quorum_errors",
)


def __getattr__(name: str) -> Any:
    return moved_attribute(__name__, name, _MOVED)
