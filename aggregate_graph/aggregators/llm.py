"""What every model-backed aggregator shares: choosing and budgeting the candidates it shows the model,
neutralising text that imitates the aggregator's own markup, calling the model, and falling back to majority
vote — with a record of all of it — when the model's output cannot be parsed."""

from __future__ import annotations

import re
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig

from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.registry import check_options
from aggregate_graph.errors import AggregationError, AggregatorOptionError, describe, is_transient
from aggregate_graph.reading.answers import equivalent, group_equivalent, normalize_answer
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet, Usage

CHARS_PER_TOKEN = 4  # budgets are in tokens; remote tokenizers are unknown here, so text is cut by this ratio
_MARKUP = re.compile(r"</?\s*(answer|think)\s*>", re.IGNORECASE)
_BLOCK_HEADER = re.compile(r"^(\s*)(Answer|Response|Solution)(\s+\d+\s*:)", re.IGNORECASE | re.MULTILINE)


def neutralise(text: str) -> str:
    """Candidate text cannot open or close the aggregator's tags, nor start a block of its own."""
    text = _MARKUP.sub(lambda m: m.group(0).replace("<", "‹").replace(">", "›"), text)
    return _BLOCK_HEADER.sub(r"\1(quoted) \2\3", text)


def fit_budget(text: str, max_tokens: int, *, tail_only: bool = False, chars_per_token: float = CHARS_PER_TOKEN) -> str:
    """Cut a long candidate in the middle, keeping its head and its tail (where the final answer is); with
    `tail_only`, keep just the tail (compact prompts for small aggregators)."""
    limit = int(max_tokens * chars_per_token)
    if len(text) <= limit:
        return text
    if tail_only:
        return f"[…] {text[len(text) - limit :]}"
    head = limit // 4
    return f"{text[:head]}\n[… {len(text) - limit} characters omitted …]\n{text[len(text) - (limit - head) :]}"


def shown_candidates(sample_set: SampleSet, k: int | None) -> list[Candidate]:
    """The successful candidates with text, in request order, at most k of them."""
    usable = [c for c in sample_set.candidates if c.ok and c.text.strip()]
    return usable[:k] if k is not None else usable


def render_candidates(texts: Sequence[str], label: str, max_tokens: int) -> str:
    return "\n\n".join(f"{label} {i}:\n{neutralise(fit_budget(t, max_tokens))}" for i, t in enumerate(texts, 1))


def usage_of(message: BaseMessage) -> Usage | None:
    return Usage.from_usage_metadata(getattr(message, "usage_metadata", None))


def tally(sample_set: SampleSet) -> dict[str, float]:
    """How the candidates' answers split, recorded beside any model's decision."""
    answered = [c for c in sample_set.succeeded if c.answer is not None]
    classes = group_equivalent([c.answer for c in answered])
    return {normalize_answer(answered[cls[0]].answer) or "": float(len(cls)) for cls in classes}


def supporting(candidates: Sequence[Candidate], answer: str | None) -> list[Candidate]:
    return [c for c in candidates if answer is not None and equivalent(c.answer, answer)]


@dataclass
class Decision:
    """What a model-backed aggregator read from the model's output."""

    answer: str | None
    text: str
    parse_status: str
    details: dict[str, Any]


TRAINED_FORMATS: dict[str, type[LLMAggregator]] = {}
"""The formats a trained folder's aggregator.json may record, and the class that reads each: every subclass that
declares its `trained_format`."""


class LLMAggregator(Aggregator):
    """An aggregator that asks a chat model. Subclasses render the prompt and read the output."""

    name = "llm"
    invoke_kwargs: ClassVar[Mapping[str, Any]] = MappingProxyType({})  # call options (e.g. one token's logprobs)
    trained_format: ClassVar[str | None] = None  # the `format` a trained folder's aggregator.json records for it
    max_tokens: ClassVar[int] = 1024  # the reply budget of a served model built by name (base_url=)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("trained_format"):
            TRAINED_FORMATS[cls.trained_format] = cls

    def __init__(
        self,
        model: BaseChatModel | Runnable,
        *,
        k: int | None = None,
        max_candidate_tokens: int = 1024,
        fallback: Aggregator | None = None,
    ) -> None:
        if k is not None and k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.model, self.k, self.max_candidate_tokens = model, k, max_candidate_tokens
        self.fallback = fallback if fallback is not None else MajorityVote()

    @classmethod
    def from_options(
        cls,
        model: BaseChatModel | Runnable | None = None,
        *,
        base_url: str | None = None,
        served_model_name: str = "aggregator",
        api_key: str | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> LLMAggregator:
        """By name it needs the chat model it asks: `model`, or the one served at `base_url`. Other options go to
        the class (`k`, `max_candidate_tokens`, `fallback`, …)."""
        check_options(str(cls.name), cls, options, also=("base_url", "served_model_name", "api_key", "max_tokens"))
        model = cls.served_or_given(model, base_url, served_model_name, api_key, max_tokens)
        if model is None:
            raise AggregatorOptionError(
                f"aggregator {cls.name!r} needs a model: model=CHAT_MODEL or base_url=URL (a served one)",
                str(cls.name),
                "model",
                missing=True,
            )
        return cls(model, **options)

    @classmethod
    def served_or_given(
        cls, model: Any, base_url: str | None, served_model_name: str, api_key: str | None, max_tokens: int | None
    ) -> Any:
        """The model an aggregator built by name asks: `model`, or a client of the one served at `base_url`."""
        if base_url is None:
            return model
        if model is not None:
            raise AggregatorOptionError(
                f"aggregator {cls.name!r} asks one model: model= or base_url=, not both", str(cls.name), "base_url"
            )
        from aggregate_graph.drawing.models import (
            served_model,  # models imports the draw settings, which import this package
        )

        return served_model(base_url, served_model_name, api_key, max_tokens or cls.max_tokens)

    @classmethod
    def from_trained(
        cls, model: Any, record: Mapping[str, Any], *, weights: Any = None, **options: Any
    ) -> LLMAggregator:
        """The aggregator a trained folder's `record` (its aggregator.json) describes, over `model`. Prompts are cut
        by the candidate budget it was trained with."""
        if weights is not None:
            message = f"a trained {cls.trained_format} aggregator reads no vote weights"
            raise AggregatorOptionError(message, str(cls.name), "weights")
        options.setdefault("max_candidate_tokens", record.get("style", {}).get("max_candidate_tokens", 1024))
        return cls(model, **options)

    @abstractmethod
    def render(self, sample_set: SampleSet, shown: list[Candidate]) -> list[BaseMessage]: ...

    @abstractmethod
    def decide(self, output: str, shown: list[Candidate]) -> Decision: ...

    def decide_response(self, response: Any, shown: list[Candidate]) -> Decision:
        """The decision from the model's whole response (a subclass may read its metadata: log-probabilities)."""
        return self.decide(str(response.text) if isinstance(response, BaseMessage) else str(response), shown)

    def _aggregation(
        self, sample_set: SampleSet, shown: list[Candidate], response: Any, started: float, config: Any
    ) -> Aggregation:
        output = str(response.text) if isinstance(response, BaseMessage) else str(response)
        decision = self.decide_response(response, shown)
        details = {
            "raw_output": output,
            "parse_status": decision.parse_status,
            "candidates_shown": [c.index for c in shown],
            **decision.details,
        }
        usage = usage_of(response) if isinstance(response, AIMessage) else None
        if decision.answer is None:  # never silent: the record says the model's answer was not used, and why
            return self._fall_back(sample_set, details, usage, started, config)
        backing = supporting(sample_set.succeeded, decision.answer)
        return Aggregation(
            method=self.name,
            answer=normalize_answer(decision.answer),
            text=decision.text,
            votes=tally(sample_set),
            support=[c.index for c in backing],
            usage=usage,
            latency_s=time.perf_counter() - started,
            details=details,
        )

    def _fall_back(
        self, sample_set: SampleSet, details: dict[str, Any], usage: Usage | None, started: float, config: Any
    ) -> Aggregation:
        try:
            fallback = self.fallback.invoke(sample_set, config)
        except AggregationError as exc:  # keep what the model said on the error's record of the run
            record = Aggregation(method=self.name, answer=None, text="", usage=usage, details=details)
            exc.sample_set = sample_set.model_copy(update={"aggregation": record})
            raise
        details.update(fallback=fallback.method, fallback_votes=fallback.votes)
        spent = {"method": self.name, "usage": usage, "latency_s": time.perf_counter() - started, "details": details}
        return fallback.model_copy(update=spent)  # the fallback's decision, as this aggregator's record

    def _model_failed(
        self, sample_set: SampleSet, shown: list[Candidate], exc: Exception, started: float, config: Any
    ) -> Aggregation:
        """A transient error is raised again (the graph's retry policy retries the node); any other (e.g. the
        prompt is over the server's context) falls back to majority vote, recorded, so the candidates count."""
        if is_transient(exc):
            raise exc
        details = {
            "raw_output": "",
            "parse_status": "model_error",
            "error": describe(exc),
            "candidates_shown": [c.index for c in shown],
        }
        return self._fall_back(sample_set, details, None, started, config)

    def run(self, sample_set: SampleSet, shown: list[Candidate], config: RunnableConfig | None) -> Aggregation:
        """One model call over `shown` (usually the first k successful candidates of `sample_set`)."""
        started = time.perf_counter()
        if not shown:
            return self._fall_back(sample_set, {"parse_status": "no_candidates_to_show"}, None, started, config)
        try:
            response = self.model.invoke(self.render(sample_set, shown), config, **self.invoke_kwargs)
        except Exception as exc:
            return self._model_failed(sample_set, shown, exc, started, config)
        return self._aggregation(sample_set, shown, response, started, config)

    async def arun(self, sample_set: SampleSet, shown: list[Candidate], config: RunnableConfig | None) -> Aggregation:
        started = time.perf_counter()
        if not shown:
            return self._fall_back(sample_set, {"parse_status": "no_candidates_to_show"}, None, started, config)
        try:
            response = await self.model.ainvoke(self.render(sample_set, shown), config, **self.invoke_kwargs)
        except Exception as exc:
            return self._model_failed(sample_set, shown, exc, started, config)
        return self._aggregation(sample_set, shown, response, started, config)

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        return self.run(sample_set, shown_candidates(sample_set, self.k), config)

    async def aaggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        return await self.arun(sample_set, shown_candidates(sample_set, self.k), config)


def as_messages(prompt: str) -> list[BaseMessage]:
    """A rendered aggregator prompt as the one-turn conversation the aggregator model is asked."""
    return [HumanMessage(prompt)]
