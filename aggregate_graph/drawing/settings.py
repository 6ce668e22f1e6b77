"""What candidates are drawn with: the chat model and its prompt settings (`Sampler`), how each request is made
(`CandidatePolicy`), and when to stop drawing (`AdaptiveSampling`). `sampling` draws the candidates with them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import RunnableBinding
from langchain_core.runnables.config import merge_configs, var_child_runnable_config
from pydantic import BaseModel, ConfigDict, Field

from aggregate_graph.drawing.n_support import endpoint, n_mode
from aggregate_graph.reading.answers import ABSTENTIONS, group_equivalent
from aggregate_graph.sample_set import Candidate


class CandidatePolicy(BaseModel):
    """How each candidate request is made (how many at once: `AggregationOptions.max_concurrency`)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not ignored

    timeout_s: float = Field(default=120.0, gt=0, description="per attempt; a hung call counts as a transient error")
    max_attempts: int = Field(default=3, ge=1)
    deadline_s: float | None = Field(
        default=None, gt=0, description="no new attempt starts this long after the first one began"
    )
    backoff_initial_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    use_n: bool | None = Field(
        default=None, description="ask for many samples in one request; None: when the model has an `n` setting"
    )
    abstentions: tuple[str, ...] = Field(
        default=ABSTENTIONS,
        description="patterns of answers that do not vote ('unknown', 'cannot be determined', …; see "
        "`answers.ABSTENTIONS`): such a candidate gets `answer=None` and the reason in `abstention`; () lets all vote",
    )


_CONFIG_KEYS = ("tags", "metadata", "run_name", "callbacks")


def unbind(model: BaseChatModel | RunnableBinding) -> tuple[BaseChatModel, dict[str, Any], dict[str, Any]]:
    """The chat model inside `model.bind_tools(...)`, `.bind(...)`, `.with_config(...)` (nested too), the call
    options those bound (the outer binding wins, as when the binding is invoked) and their tags, metadata, run
    name and callbacks."""
    kwargs: dict[str, Any] = {}
    config: dict[str, Any] = {}
    inner: Any = model
    # merge_configs also mixes in the running call's config: a graph built inside a node (an aggregating chat
    # model's first call in an agent) would keep that node's callbacks and metadata for every later request
    token = var_child_runnable_config.set(None)
    try:
        while isinstance(inner, RunnableBinding):
            kwargs = {**inner.kwargs, **kwargs}
            config = dict(merge_configs(inner.config, config))
            inner = inner.bound
    finally:
        var_child_runnable_config.reset(token)
    if not isinstance(inner, BaseChatModel):
        raise TypeError(
            "model must be a LangChain chat model (BaseChatModel), one bound with bind_tools / bind / with_config, "
            f"or a model spec string such as 'openai:gpt-4o-mini'; got {describe_model(model)}"
        )
    return inner, kwargs, {k: config[k] for k in _CONFIG_KEYS if config.get(k)}


def describe_model(value: Any) -> str:
    """A short description of what was passed: its type, never its (possibly huge) repr."""
    if isinstance(value, RunnableBinding):
        return f"a binding around {type(value.bound).__name__}"
    return type(value).__name__


@dataclass(frozen=True)
class Sampler:
    """One way of drawing candidates: a chat model with an optional system prompt and temperature.

    `bound` holds the call options of a bound model (`model.bind_tools(...)`, `.bind(...)`) and `config`
    the tags, metadata and run name of `.with_config(...)`: every candidate request is made with them.
    A bound model given as `model` is unwrapped into these fields."""

    model: BaseChatModel
    system_prompt: str | None = None
    temperature: float | None = None
    bound: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        model, bound, config = unbind(self.model)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "bound", {**bound, **self.bound})
        object.__setattr__(self, "config", {**config, **self.config})

    @property
    def model_name(self) -> str:
        """The model its requests name: a bound `model=` (a call's override), else the chat model's own."""
        if isinstance(value := self.bound.get("model"), str) and value:
            return value
        for attr in ("model_name", "model", "model_id"):
            if isinstance(value := getattr(self.model, attr, None), str) and value:
                return value
        return self.model._llm_type

    @property
    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.system_prompt is not None:
            params["system_prompt"] = self.system_prompt
        return params

    @property
    def endpoint(self) -> tuple[str, str, str]:
        return endpoint(self.model, self.model_name)

    def supports_n(self, policy: CandidatePolicy) -> bool:
        """Whether to ask for several samples in one request: the policy's `use_n` if set; else when the model
        has an `n` setting and its endpoint has not been seen to ignore or refuse `n`, unless the model batches
        concurrent calls itself (`LocalChatModel.batches_calls`): one call per candidate then costs no more and
        lets each candidate land as soon as it is done."""
        if policy.use_n is not None:
            return policy.use_n
        if (batches_calls := getattr(self.model, "batches_calls", None)) is not None:
            options = self.bound if self.temperature is None else {**self.bound, "temperature": self.temperature}
            if batches_calls(options):
                return False
        return "n" in type(self.model).model_fields and n_mode(self.endpoint) not in ("ignored", "refused")

    def prompt(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        if self.system_prompt is None:
            return list(messages)
        return [SystemMessage(self.system_prompt), *(m for m in messages if not isinstance(m, SystemMessage))]


class AdaptiveSampling(BaseModel):
    """Sample in waves and stop once enough candidates agree.

    The first wave draws `first_wave` candidates; while the largest group of equivalent answers holds
    less than `agreement` of the answered candidates (or fewer than `min_agreeing` of them), another
    `wave_size` are drawn, up to the graph's `n`.
    """

    first_wave: int = Field(default=3, ge=1)
    wave_size: int = Field(default=2, ge=1)
    agreement: float = Field(default=0.75, gt=0, le=1)
    min_agreeing: int = Field(default=2, ge=1)

    def satisfied(self, candidates: Sequence[Candidate]) -> bool:
        answered = [c.answer for c in candidates if c.ok and c.answer is not None]
        if not answered:
            return False
        top = max(len(cls) for cls in group_equivalent(answered))
        return top >= self.min_agreeing and top / len(answered) >= self.agreement
