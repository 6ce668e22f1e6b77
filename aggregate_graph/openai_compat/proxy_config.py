"""What the proxy is started with (`ProxyConfig`, onto which `aggregate-graph proxy`'s flags map) and how it keeps
the upstream's key out of what it shows (`Scrubber`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from aggregate_graph.aggregators.registry import OPTIONS, aggregator_names, known_aggregator, missing_options
from aggregate_graph.options import AggregationOptions
from aggregate_graph.reading.answer_types import AnswerType
from aggregate_graph.serve import DEFAULT_MAX_BODY_BYTES

_KEY_LIKE = re.compile(r"\b(sk-|Bearer\s+)[A-Za-z0-9_\-*.]{6,}")

UPSTREAM_CHECK_S = 3.0  # how long the start-up check waits for the upstream: enough for a live one, short to wait
MAX_SAMPLES_PER_REQUEST = 64
"""The proxy's default cap on the samples one request draws (`n` candidates × choices): each is an upstream call
paid for with the upstream key."""


_FIELDS = {"weights": "aggregator_weights (--aggregator-weights FILE)"}  # the option an aggregator takes → field


class ProxyConfig(BaseModel):
    """Everything the proxy is started with; the CLI flags map onto these fields."""

    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not a default silently kept

    upstream: str = Field(description="base URL of the upstream OpenAI-compatible API, e.g. https://api.openai.com/v1")
    upstream_api_key: SecretStr = SecretStr("EMPTY")
    aggregator: str = Field(default="majority", description="default method: a registered aggregator's name")
    aggregator_weights: Path | None = Field(
        default=None, description="a WeightedVote weights file: needed by the `weighted` method, default or per request"
    )
    aggregator_base_url: str | None = Field(default=None, description="a server of the aggregator model (vLLM)")
    aggregator_api_key: SecretStr = SecretStr("EMPTY")
    aggregator_model: str | None = None
    # bounds checked per field too, so that the CLI names the flag at fault; the rest are AggregationOptions' checks
    n: int = Field(default=5, ge=1)
    min_candidates: int = Field(default=1, ge=1)
    answer_type: AnswerType = Field(default="auto", description="how each candidate's answer is read (`answer_types`)")
    settle: bool = Field(default=True, description="decide once the vote is settled, cancelling the candidates out")
    stream_candidates: bool = Field(default=False, description="stream an upstream request with n, closed once settled")
    api_key: SecretStr | None = Field(default=None, description="clients must send it as a bearer token")
    upstream_timeout_s: float = Field(default=120.0, gt=0)
    upstream_retries: int = Field(default=2, ge=0)
    max_n: int = Field(default=MAX_SAMPLES_PER_REQUEST, ge=1, description="samples per request: n candidates × choices")
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1)
    max_prompt_chars: int = Field(default=200_000, ge=1)
    max_concurrency: int = Field(default=64, ge=1, description="requests in flight; more are answered 429")
    max_request_s: float = Field(default=300.0, gt=0, description="wall time per request, streams included")

    @field_validator("aggregator")
    @classmethod
    def _known_aggregator(cls, name: str) -> str:
        return known_aggregator(name)

    @field_validator("aggregator_weights")
    @classmethod
    def _weights_file(cls, path: Path | None) -> Path | None:
        # checked with the config, so that a missing file is a command-line error, not a failed server startup
        if path is not None and not path.is_file():
            raise ValueError(f"aggregator weights {str(path)!r}: no such file (write one with WeightedVote.save)")
        return path

    @model_validator(mode="after")
    def _aggregation(self) -> Self:
        self.aggregation_options()  # the same checks, and messages, as every other surface's
        return self

    def aggregation_options(self) -> AggregationOptions:
        """The aggregation options the proxy's settings map onto (the default method is built per request)."""
        return AggregationOptions.of(
            n=self.n,
            min_candidates=self.min_candidates,
            max_n=self.max_n,
            answer_type=self.answer_type,
            settle=self.settle,
            stream_candidates=self.stream_candidates,
        )

    @model_validator(mode="after")
    def _aggregator_has_its_options(self) -> Self:
        if missing := missing_options(self.aggregator, self.provided):
            field = _FIELDS.get(missing[0])
            source = f"{field}: {OPTIONS[missing[0]]}" if field else f"{missing[0]}=, which the proxy cannot give"
            raise ValueError(f"aggregator {self.aggregator!r} needs {source}")
        return self

    @property
    def provided(self) -> set[str]:
        """The options the proxy gives an aggregator: the model it asks, and the vote weights when it has them."""
        return {"model", "weights"} if self.aggregator_weights is not None else {"model"}

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods this proxy answers: those whose options it can give (`weighted` only with weights)."""
        return tuple(m for m in aggregator_names() if not missing_options(m, self.provided))


class Scrubber:
    """Removes the upstream's and aggregator's keys (and anything shaped like a key) from text shown to
    clients: upstream error messages may quote the key they were sent."""

    def __init__(self, *secrets: SecretStr | None) -> None:
        self.secrets = [s.get_secret_value() for s in secrets if s is not None and len(s.get_secret_value()) >= 4]

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return _KEY_LIKE.sub(lambda m: f"{m.group(1)}***", text)

    def payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A response body (or stream event), key-free: every candidate error is scrubbed, then the whole text."""
        response = payload.get("response")
        sample_sets = (response.get("sample_sets") if isinstance(response, dict) else None) or []
        for sample_set in [*(payload.get("sample_sets") or []), *sample_sets]:
            for candidate in sample_set.get("candidates", []):
                if candidate.get("error"):
                    candidate["error"] = self(candidate["error"])
        text = json.dumps(payload, ensure_ascii=False)
        clean = text
        for secret in self.secrets:
            clean = clean.replace(secret, "***")
        return payload if clean == text else json.loads(clean)
