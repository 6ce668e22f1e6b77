"""`wrap_openai(client)`: the client's `chat.completions.create` answers with an aggregation of n candidates,
drawn in parallel by the prebuilt graph through the client's own (unwrapped) `create`.

One patch point, as LangSmith's `wrap_openai`: the same client object comes back, sync or async alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from langchain_core.runnables import Runnable
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from openai.resources.chat.completions import AsyncCompletions

from aggregate_graph.aggregators import (
    AggregationError,
    GSRAggregator,
    MajorityVote,
    SSAAggregator,
    USCAggregator,
)
from aggregate_graph.graph import MAX_N, QuorumError, build_aggregate_graph, check_n
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from aggregate_graph.openai_compat.request import Plan, RequestError, plan_request, split_options
from aggregate_graph.openai_compat.responses import AsyncChunkStream, ChunkStream, ChunkWriter, completion
from aggregate_graph.sample_set import Aggregation, SampleSet
from aggregate_graph.sampling import CandidatePolicy

_MODEL_AGGREGATORS = {"ssa": SSAAggregator, "gsr": GSRAggregator, "usc": USCAggregator}
_WRAPPED = "_aggregate_graph_unwrapped_create"


def _unwrapped_create(client: Any) -> tuple[Callable[..., Any], bool]:
    """The client's own `create`, and whether it is async (its decorator hides that from `inspect`)."""
    completions = client.chat.completions
    return getattr(completions, _WRAPPED, None) or completions.create, isinstance(completions, AsyncCompletions)


def first_candidate(exc: AggregationError) -> SampleSet:
    """When no candidate states an answer that can be voted on (a greeting, an essay), the answer is the first
    successful candidate — recorded as such — rather than an error that throws the candidates away."""
    sample_set = exc.sample_set
    if isinstance(exc, QuorumError) or sample_set is None or not sample_set.succeeded:
        raise exc
    chosen = sample_set.succeeded[0]
    details = {**(sample_set.aggregation.details if sample_set.aggregation else {})}
    details.update(fallback="first_candidate", reason=str(exc))
    aggregation = Aggregation(
        method="first_candidate",
        answer=chosen.answer,
        text=chosen.text,
        support=[chosen.index],
        # a model-backed aggregator that was asked still cost what it cost
        usage=sample_set.aggregation.usage if sample_set.aggregation else None,
        details=details,
    )
    return sample_set.model_copy(update={"aggregation": aggregation})


class Aggregating:
    """Turns a chat-completions request into the prebuilt graph over the wrapped client, and runs it."""

    def __init__(
        self,
        create: tuple[Callable[..., Any], bool],
        *,
        n: int,
        aggregator: str | Runnable[SampleSet, Aggregation],
        aggregator_create: tuple[Callable[..., Any], bool] | None,
        aggregator_model: str | None,
        policy: CandidatePolicy,
        min_candidates: int,
        max_n: int,
        max_concurrency: int,
        store: BaseStore | None,
    ) -> None:
        self.create, self.is_async = create
        self.aggregator_create, self.aggregator_is_async = aggregator_create or create
        self.n, self.aggregator, self.policy = check_n(n, max_n), aggregator, policy
        self.aggregator_model = aggregator_model
        self.min_candidates, self.max_n = min_candidates, max_n
        self.max_concurrency, self.store = max_concurrency, store
        if isinstance(aggregator, str) and aggregator not in ("majority", *_MODEL_AGGREGATORS):
            raise ValueError(f"unknown aggregator {aggregator!r}; use majority, ssa, gsr, usc or an Aggregator")

    def _aggregator_for(self, method: str, model: str) -> Runnable[SampleSet, Aggregation]:
        if method == "majority":
            return MajorityVote()
        if method not in _MODEL_AGGREGATORS:
            raise ValueError(f"unknown aggregator {method!r}; use majority, ssa, gsr, usc or an Aggregator")
        chat_model = OpenAIClientChatModel(
            create=self.aggregator_create,
            is_async=self.aggregator_is_async,
            model=self.aggregator_model or model,
        )
        return _MODEL_AGGREGATORS[method](chat_model)

    def plan(self, kwargs: dict[str, Any]) -> tuple[Plan | None, dict[str, Any]]:
        """The plan, or None and the request to send unchanged when aggregation is turned off."""
        options, rest = split_options(kwargs)
        if not options.enabled:
            return None, rest
        plan = plan_request(options, rest)
        n = plan.n or self.n
        if plan.choices * n > self.max_n:
            raise RequestError(
                f"{plan.choices} answer(s) × {n} candidates = {plan.choices * n} samples, over the cap of "
                f"{self.max_n} per request",
                param="n",
            )
        return plan, rest

    def graph(self, plan: Plan) -> CompiledStateGraph:
        n = plan.n or self.n
        min_candidates = plan.min_candidates or min(self.min_candidates, n)
        if min_candidates > n:
            raise RequestError(f"min_candidates={min_candidates} is more than n={n}", param="min_candidates")
        if plan.method is not None:
            aggregator = self._aggregator_for(plan.method, plan.model)
        elif isinstance(self.aggregator, str):
            aggregator = self._aggregator_for(self.aggregator, plan.model)
        else:
            aggregator = self.aggregator
        model = OpenAIClientChatModel(create=self.create, is_async=self.is_async, model=plan.model, request=plan.params)
        return build_aggregate_graph(
            model,
            n=n,
            aggregator=aggregator,
            policy=self.policy,
            min_candidates=min_candidates,
            max_n=self.max_n,
            max_concurrency=self.max_concurrency,
            store=self.store,
        )

    @staticmethod
    def _outcomes(results: list[Any]) -> list[SampleSet]:
        """Each choice's sample set; a graph that raised for want of an answer gives its first candidate."""
        sample_sets = []
        for result in results:
            if isinstance(result, AggregationError):
                sample_sets.append(first_candidate(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                sample_sets.append(result["sample_set"])
        return sample_sets

    def run(self, plan: Plan) -> Any:
        graph, inputs = self.graph(plan), [{"messages": plan.messages}] * plan.choices
        if plan.stream:
            return ChunkStream(self._stream(graph, plan))
        return completion(plan, self._outcomes(graph.batch(inputs, return_exceptions=True)))

    async def arun(self, plan: Plan) -> Any:
        graph, inputs = self.graph(plan), [{"messages": plan.messages}] * plan.choices
        if plan.stream:
            return AsyncChunkStream(self._astream(graph, plan))
        return completion(plan, self._outcomes(await graph.abatch(inputs, return_exceptions=True)))

    @staticmethod
    def _stream(graph: CompiledStateGraph, plan: Plan) -> Iterator[Any]:
        writer, state = ChunkWriter(plan), {}
        yield writer.opening()
        try:
            for mode, data in graph.stream({"messages": plan.messages}, stream_mode=["custom", "messages", "values"]):
                if mode == "values":
                    state = data
                elif (chunk := writer.event(mode, data)) is not None:
                    yield chunk
            sample_set = state["sample_set"]
        except AggregationError as exc:
            sample_set = first_candidate(exc)
        yield from writer.closing(sample_set)

    @staticmethod
    async def _astream(graph: CompiledStateGraph, plan: Plan) -> AsyncIterator[Any]:
        writer, state = ChunkWriter(plan), {}
        yield writer.opening()
        try:
            async for mode, data in graph.astream(
                {"messages": plan.messages}, stream_mode=["custom", "messages", "values"]
            ):
                if mode == "values":
                    state = data
                elif (chunk := writer.event(mode, data)) is not None:
                    yield chunk
            sample_set = state["sample_set"]
        except AggregationError as exc:
            sample_set = first_candidate(exc)
        for chunk in writer.closing(sample_set):
            yield chunk


def wrap_openai(
    client: Any,
    *,
    n: int = 5,
    aggregator: str | Runnable[SampleSet, Aggregation] = "majority",
    aggregator_client: Any | None = None,
    aggregator_model: str | None = None,
    policy: CandidatePolicy | None = None,
    min_candidates: int = 1,
    max_n: int = MAX_N,
    max_concurrency: int = 64,
    store: BaseStore | None = None,
) -> Any:
    """Patch `client.chat.completions.create` (an `OpenAI` or `AsyncOpenAI`, Azure included) to answer with
    an aggregation of `n` candidates, and return the same client.

    `aggregator` is "majority", "ssa", "gsr", "usc" (asking `aggregator_model` — default: the request's
    model — through `aggregator_client`, default: this client) or any runtime Aggregator. Retries and timeouts
    are the client's own (`max_retries`, `timeout`); `policy` adds the graph's per-candidate deadline and the
    fallback from one `n` request to single requests, and by default does not retry on top of the client.
    """
    completions = client.chat.completions
    if getattr(completions, _WRAPPED, None) is not None:
        raise ValueError("this client is already wrapped by wrap_openai")
    original, is_async = _unwrapped_create(client)
    engine = Aggregating(
        (original, is_async),
        n=n,
        aggregator=aggregator,
        aggregator_create=_unwrapped_create(aggregator_client) if aggregator_client is not None else None,
        aggregator_model=aggregator_model,
        policy=policy or CandidatePolicy(max_attempts=1),
        min_candidates=min_candidates,
        max_n=max_n,
        max_concurrency=max_concurrency,
        store=store,
    )
    if engine.is_async:

        async def acreate(**kwargs: Any) -> Any:
            plan, rest = engine.plan(kwargs)
            return await (original(**rest) if plan is None else engine.arun(plan))

        patched: Callable[..., Any] = acreate
    else:

        def create(**kwargs: Any) -> Any:
            plan, rest = engine.plan(kwargs)
            return original(**rest) if plan is None else engine.run(plan)

        patched = create
    patched.__doc__ = f"{original.__doc__ or ''}\n\nWrapped by aggregate_graph.wrap_openai (n={n})."
    completions.create = patched
    setattr(completions, _WRAPPED, original)
    return client
