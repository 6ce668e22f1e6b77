"""The one data type that flows through everything: a question, its candidates and their aggregation.

Graph state, aggregators, the sample-set log and training all read and write these models, so a
sample set written by a run can be replayed, re-aggregated or trained on without conversion.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ErrorKind = Literal["status", "timeout", "connection", "other"]
"""What kind of failure a failed candidate met: an HTTP status answered, a timeout, a failed or dropped
connection, or something else (`errors.error_kind`)."""


def clean_text(value: Any) -> Any:
    """Valid UTF-8 text: bytes are decoded and lone surrogates replaced, so JSON logs never break. None stays."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value).encode("utf-8", errors="replace").decode("utf-8")


def _clean_json(value: Any) -> Any:
    """`clean_text` over every string of a JSON value (an upstream's error object may carry lone surrogates)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_json(v) for v in value]
    return value


# OpenAI's names of the token details (`prompt_tokens_details`, `completion_tokens_details`) and LangChain's for
# the same counts (`input_token_details`, `output_token_details` of a message's `usage_metadata`).
_INPUT_DETAILS = {"cached_tokens": "cache_read", "audio_tokens": "audio", "cache_creation_tokens": "cache_creation"}
_OUTPUT_DETAILS = {"reasoning_tokens": "reasoning", "audio_tokens": "audio"}


def _summed(parts: list[dict[str, int] | None]) -> dict[str, int] | None:
    """Token details added key by key; None when no part has any."""
    given = [p for p in parts if p]
    if not given:
        return None
    out: dict[str, int] = {}
    for part in given:
        for key, value in part.items():
            if isinstance(value, int) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
    return out


def _renamed(details: Any, names: dict[str, str]) -> dict[str, int] | None:
    """The integer counts of `details` (a dict or an SDK object) under `names`' spelling, the rest as given."""
    if details is not None and not isinstance(details, dict):
        details = details.model_dump() if hasattr(details, "model_dump") else vars(details)
    counts = {names.get(k, k): v for k, v in (details or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
    return counts or None


class Usage(BaseModel):
    """Token usage of one model request (OpenAI names), with the provider's token details where it gives them
    (cached prompt tokens, reasoning tokens …)."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: dict[str, int] | None = None
    completion_tokens_details: dict[str, int] | None = None

    @classmethod
    def of(cls, prompt: Any, completion: Any, prompt_details: Any = None, completion_details: Any = None) -> Usage:
        """A request's usage from its prompt and completion tokens (None counts 0; "12" is 12: a provider's
        response is not always validated) and OpenAI's token details (dicts or the SDK's objects), if any."""
        prompt, completion = int(prompt or 0), int(completion or 0)
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=_renamed(prompt_details, {}),
            completion_tokens_details=_renamed(completion_details, {}),
        )

    @classmethod
    def from_usage_metadata(cls, meta: Any) -> Usage | None:
        """The usage a LangChain message reports (`usage_metadata`), its token details in OpenAI's names."""
        if not meta:
            return None
        inverse_in = {v: k for k, v in _INPUT_DETAILS.items()}
        inverse_out = {v: k for k, v in _OUTPUT_DETAILS.items()}
        return cls(
            prompt_tokens=meta.get("input_tokens", 0),
            completion_tokens=meta.get("output_tokens", 0),
            total_tokens=meta.get("total_tokens", 0),
            prompt_tokens_details=_renamed(meta.get("input_token_details"), inverse_in),
            completion_tokens_details=_renamed(meta.get("output_token_details"), inverse_out),
        )

    def usage_metadata(self) -> dict[str, Any]:
        """As LangChain's `UsageMetadata`, the token details in its names (`cache_read`, `reasoning` …)."""
        meta: dict[str, Any] = {
            "input_tokens": self.prompt_tokens,
            "output_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if details := _renamed(self.prompt_tokens_details, _INPUT_DETAILS):
            meta["input_token_details"] = details
        if details := _renamed(self.completion_tokens_details, _OUTPUT_DETAILS):
            meta["output_token_details"] = details
        return meta

    @classmethod
    def total(cls, usages: list[Usage]) -> Usage:
        """The usages added up, token details key by key."""
        return cls(
            prompt_tokens=sum(u.prompt_tokens for u in usages),
            completion_tokens=sum(u.completion_tokens for u in usages),
            total_tokens=sum(u.total_tokens for u in usages),
            prompt_tokens_details=_summed([u.prompt_tokens_details for u in usages]),
            completion_tokens_details=_summed([u.completion_tokens_details for u in usages]),
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage.total([self, other])


class Candidate(BaseModel):
    """One sampled answer, or the record of a sample that failed.

    `index` is the position in the request plan, never the arrival order; `landed_at` is when the candidate
    landed (seconds since the epoch, stamped by the draw; None unless set, as on a candidate built by hand): a
    vote's tie goes to the answer that landed first (`plurality`), so that settling early can decide as soon as
    it can. Candidates drawn by one request with `n > 1` share `request_id` and that request's `usage` (the prompt
    is billed once), so `SampleSet.usage` counts each request once. A candidate that states no answer ("The
    answer is unknown.") has `answer` None and the reason in `abstention`, so that no aggregator counts it as an
    answer.
    """

    index: int = Field(ge=0)
    text: str = ""
    answer: str | None = None
    abstention: str | None = Field(
        default=None,
        description="why the candidate's stated answer does not vote, e.g. 'unknown' or 'cannot be determined' "
        "(`answers.ABSTENTIONS`); `answer` is then None and the text is kept",
    )
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list, description="the tools the candidate called instead of answering (LangChain ToolCalls)"
    )
    model: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    usage: Usage | None = None
    request_id: str | None = None
    latency_s: float | None = None
    landed_at: float | None = Field(default=None, description="when the candidate landed, seconds since the epoch")
    finish_reason: str | None = None
    error: str | None = None
    error_status: int | None = Field(default=None, description="the HTTP status of a failed request, if it had one")
    error_kind: ErrorKind | None = Field(
        default=None, description="what kind of failure `error` is (`errors.error_kind`)"
    )
    error_body: dict[str, Any] | None = Field(
        default=None, description="the error object the API answered a failed request with, as it sent it"
    )
    wave: int = 0

    @field_validator("text", "answer", "abstention", "model", "finish_reason", "error", mode="before")
    @classmethod
    def _valid_utf8(cls, value: Any) -> Any:
        return clean_text(value)

    @field_validator("error_body", mode="before")
    @classmethod
    def _valid_utf8_json(cls, value: Any) -> Any:
        return _clean_json(value)

    @property
    def ok(self) -> bool:
        return self.error is None


class Aggregation(BaseModel):
    """What an aggregator decided and how."""

    method: str
    answer: str | None
    text: str
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list, description="the agreed tool calls, when the candidates chose to call tools"
    )
    votes: dict[str, float] = Field(default_factory=dict)
    support: list[int] = Field(default_factory=list, description="indices of the candidates backing the answer")
    tie: list[str] | None = Field(default=None, description="answers that tied for first, when there was a tie")
    usage: Usage | None = None
    latency_s: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("answer", "text", mode="before")
    @classmethod
    def _valid_utf8(cls, value: Any) -> Any:
        return clean_text(value)


class SampleSet(BaseModel):
    """A question, every candidate drawn for it (failed ones included) and, once decided, the aggregation."""

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    question: str
    gold: str | None = None
    candidates: list[Candidate] = Field(default_factory=list)
    aggregation: Aggregation | None = None
    requested_n: int | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("question", "gold", mode="before")
    @classmethod
    def _valid_utf8(cls, value: Any) -> Any:
        return clean_text(value)

    @field_validator("candidates")
    @classmethod
    def _order_by_index(cls, candidates: list[Candidate]) -> list[Candidate]:
        indices = [c.index for c in candidates]
        if len(set(indices)) != len(indices):
            raise ValueError(f"duplicate candidate indices: {sorted(indices)}")
        return sorted(candidates, key=lambda c: c.index)

    @property
    def succeeded(self) -> list[Candidate]:
        return [c for c in self.candidates if c.ok]

    @property
    def failed(self) -> list[Candidate]:
        return [c for c in self.candidates if not c.ok]

    @property
    def answers(self) -> list[str | None]:
        return [c.answer for c in self.candidates]

    @property
    def usage(self) -> Usage:
        """Tokens billed for the candidates and the aggregation, counting each request once."""
        seen, usages = set(), []
        for c in self.candidates:
            key = c.request_id or f"candidate-{c.index}"
            if c.usage is not None and key not in seen:
                seen.add(key)
                usages.append(c.usage)
        if self.aggregation is not None and self.aggregation.usage is not None:
            usages.append(self.aggregation.usage)
        # one Usage built, not one per request: a pydantic model costs ~5 µs to build, 0.3 ms over 64 requests
        return Usage.total(usages)
