"""`AggregationOptions`: how candidates are drawn and aggregated, declared once for every surface.

The prebuilt graph (`build_aggregate_graph`), `AggregateNode`, `AggregatingChatModel` and `AggregationMiddleware`
take one `options=` object, or its fields as keyword arguments (the short form); keywords given beside `options=`
replace its fields. The options are validated once, when made: a bad one fails with the same message on every
surface, and an aggregator named by the registry ("ssa") is loaded once, here.

```python
from aggregate_graph.options import AggregationOptions

options = AggregationOptions(n=5, aggregator="majority", answer_type="boolean")
```
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.medoid import Medoid
from aggregate_graph.aggregators.registry import resolve_aggregator
from aggregate_graph.drawing.settings import AdaptiveSampling, CandidatePolicy
from aggregate_graph.reading.answer_types import check_answer_type

MAX_CANDIDATES = 512  # candidates one graph run may draw (`n`), unless `max_n` raises the cap
DEFAULT_FALLBACK = Medoid()  # the pick when the aggregator finds no answer to decide on (small talk, prose)


def check_n(n: Any, max_n: int = MAX_CANDIDATES) -> int:
    """`n` if it is a count of candidates under the cap, else an error that says what to give."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an integer, got {n!r}")
    if n <= 0:
        raise ValueError(f"n must be at least 1, got {n}")
    if n > max_n:
        raise ValueError(f"n={n} is over the cap of {max_n} candidates; raise max_n if you really mean it")
    return n


class AggregationOptions(BaseModel):
    """How candidates are drawn and aggregated: the options every graph surface takes.

    Attributes:
        n: candidates per question.
        aggregator: an Aggregator or a registered name ("majority", the default; "ssa": the shipped trained SSA).
        system_prompts: candidate i is drawn with system_prompts[i % len] (combined with `temperatures`).
        temperatures: candidate i is drawn at temperatures[i % len].
        policy: retries, timeouts, deadline, whether to ask for `n` in one request, abstentions.
        adaptive: draw in waves and stop once enough candidates agree.
        min_candidates: fewer successful candidates is a `QuorumError`.
        max_n: the cap on `n`.
        max_concurrency: candidate requests in flight at once.
        fallback: the pick when the aggregator finds no answer to decide on (None: raise).
        answer_type: how each candidate's answer is read: "auto", "math", "choice", "boolean", "span", a compiled
            regular expression or a function of the text (`answer_types`).
        settle: decide as soon as the candidates still out can no longer change the decision, and cancel them
            (`Aggregator.settled`): the same answer as waiting for all under majority, weighted and structured
            votes, at about the latency of the fastest majority instead of the slowest candidate. Async runs
            cancel requests in flight; blocking runs skip the requests not yet sent and, with
            `stream_candidates`, close those in flight.
        stream_candidates: with `settle`, stream candidate requests and close those still out once the vote is
            settled, so that they stop generating: a request with `n`, through an `openai` client's Chat Completions
            (`wrap_openai`, the proxy; a Responses call is not streamed) when nothing observes the call, and a
            blocking run's single requests, which it cannot cancel otherwise — through the client, or the chat
            model's own `stream` (`ChatOpenAI` with `use_n=False`, any LangChain chat model that streams and neither
            caches nor batches calls itself; its callbacks see each closed request as ended by `GeneratorExit`). An
            async run cancels its single requests unstreamed. Off by default: a closed request reports no usage (the
            upstream sends it at the end; `sample_set.metadata["usage_unreported"]` names the candidates whose
            request reported none), the client's read timeout bounds the wait between chunks rather than the whole
            request, parsing a stream costs the client more CPU than one reply, and some upstreams refuse to stream
            some models (a request refused so, 400 naming `stream` — or `stream_options`, on older Azure OpenAI
            api-versions — is asked again unstreamed, and so are that endpoint's later requests).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", frozen=True)

    n: int = 5
    aggregator: Runnable = Field(default_factory=MajorityVote)
    system_prompts: tuple[str | None, ...] | None = None
    temperatures: tuple[float | None, ...] | None = None
    policy: CandidatePolicy = Field(default_factory=CandidatePolicy)
    adaptive: AdaptiveSampling | None = None
    min_candidates: int = 1
    max_n: int = MAX_CANDIDATES
    max_concurrency: int = Field(default=64, ge=1)
    fallback: Runnable | None = DEFAULT_FALLBACK
    answer_type: Any = "auto"
    settle: bool = True
    stream_candidates: bool = False

    @field_validator("n", mode="before")
    @classmethod
    def _n_is_a_count(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"n must be an integer, got {value!r}")
        return value

    @field_validator("aggregator", "fallback", mode="before")
    @classmethod
    def _resolve(cls, value: Any, info: ValidationInfo) -> Any:
        # a name loads here, once: every graph built with these options shares one aggregator (one SSA model)
        resolved = resolve_aggregator(value, info.field_name or "aggregator")
        return MajorityVote() if resolved is None and info.field_name == "aggregator" else resolved

    @field_validator("policy", mode="before")
    @classmethod
    def _default_policy(cls, value: Any) -> Any:
        return CandidatePolicy() if value is None else value

    @field_validator("answer_type")
    @classmethod
    def _readable(cls, value: Any) -> Any:
        return check_answer_type(value)

    @model_validator(mode="after")
    def _consistent(self) -> AggregationOptions:
        check_n(self.n, self.max_n)
        if not 1 <= self.min_candidates <= self.n:
            raise ValueError(f"min_candidates must be between 1 and n={self.n}, got {self.min_candidates}")
        if self.adaptive is not None and self.adaptive.min_agreeing > self.n:
            raise ValueError(f"adaptive.min_agreeing={self.adaptive.min_agreeing} can never be reached with n={self.n}")
        return self

    @classmethod
    def of(cls, options: AggregationOptions | None = None, **fields: Any) -> AggregationOptions:
        """`options` with `fields` over it (a surface's keyword arguments), validated; the defaults without either.

        Raises:
            TypeError / ValueError: naming the option, what was given and what to give instead.
        """
        if options is not None and not isinstance(options, AggregationOptions):
            raise TypeError(f"options must be an AggregationOptions, got {type(options).__name__}")
        if options is not None and not fields:
            return options
        # only the fields set on `options`: a surface can still tell a field left at its default (`model_fields_set`)
        given = {name: getattr(options, name) for name in options.model_fields_set} if options is not None else {}
        try:
            return cls(**{**given, **fields})
        except ValidationError as error:
            raise _plain(error) from None


def _plain(error: ValidationError) -> Exception:
    """A validation error as the short message of its first problem: "n must be at least 1, got 0", or for an
    option no surface takes, which ones there are."""
    problem = error.errors()[0]
    field = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "extra_forbidden" and len(problem["loc"]) == 1:
        known = ", ".join(AggregationOptions.model_fields)
        return TypeError(f"unknown aggregation option {field!r}; the options are {known}")
    if problem["type"] == "extra_forbidden" and problem["loc"][0] == "policy":
        known = ", ".join(CandidatePolicy.model_fields)
        return TypeError(f"unknown policy setting {problem['loc'][-1]!r}; the settings are {known}")
    message = str(problem.get("ctx", {}).get("error") or problem["msg"])
    if problem["type"] not in ("value_error", "assertion_error") and field:
        message = f"{field}: {message}"
    return ValueError(message)
