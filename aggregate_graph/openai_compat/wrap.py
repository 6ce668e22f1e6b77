"""`wrap_openai(client)`: the client's `chat.completions.create` answers with an aggregation of n candidates,
drawn in parallel by the prebuilt graph through the client's own (unwrapped) `create`.

One patch point, as LangSmith's `wrap_openai`: the same client object comes back, sync or async alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from openai.resources.chat.completions import AsyncCompletions

from aggregate_graph.aggregators import StructuredVote, WeightedVote
from aggregate_graph.graph import MAX_N, build_aggregate_graph, check_n
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from aggregate_graph.openai_compat.request import Plan, RequestError, plan_request, split_options
from aggregate_graph.openai_compat.responses import AsyncChunkStream, ChunkStream, ChunkWriter, completion
from aggregate_graph.registry import AGGREGATOR_NAMES, MODEL_AGGREGATORS, load_aggregator
from aggregate_graph.sample_set import Aggregation, SampleSet
from aggregate_graph.sampling import CandidatePolicy

_WRAPPED = "_aggregate_graph_unwrapped_create"
_PER_CALL = ("extra_headers", "extra_query", "timeout", "user")
_RAW_RESPONSE_HEADER = "x-stainless-raw-response"  # what the SDK's with_raw_response sends
_NO_TIMEOUT_S = 7 * 24 * 3600.0  # a client without a timeout: the graph does not add one


def _graph_input(plan: Plan) -> dict[str, Any]:
    # The graph's conversation is the question alone: the candidate model sends the caller's own messages.
    return {"messages": [HumanMessage(plan.question)]}


def _unwrapped_create(client: Any) -> tuple[Callable[..., Any], bool]:
    """The client's own `create`, and whether it is async (its decorator hides that from `inspect`)."""
    completions = client.chat.completions
    return getattr(completions, _WRAPPED, None) or completions.create, isinstance(completions, AsyncCompletions)


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
        policy: CandidatePolicy | None,
        client_timeout: Any,
        client_retries: int,
        min_candidates: int,
        max_n: int,
        max_concurrency: int,
        store: BaseStore | None,
        weights: WeightedVote | None = None,
    ) -> None:
        self.create, self.is_async = create
        self.aggregator_create, self.aggregator_is_async = aggregator_create or create
        self.n, self.aggregator, self.policy = check_n(n, max_n), aggregator, policy
        self.client_timeout, self.client_retries = client_timeout, client_retries
        self.aggregator_model, self.weights = aggregator_model, weights
        self.min_candidates, self.max_n = min_candidates, max_n
        self.max_concurrency, self.store = max_concurrency, store
        if isinstance(aggregator, str) and aggregator not in AGGREGATOR_NAMES:
            raise ValueError(
                f"unknown aggregator {aggregator!r}; use one of {', '.join(AGGREGATOR_NAMES)} or an Aggregator"
            )
        if aggregator == "weighted" and weights is None:
            raise ValueError(
                "aggregator='weighted' needs aggregator_weights=: a file from WeightedVote.save or `aggregate-train "
                "weights`"
            )

    def _aggregator_for(self, method: str, plan: Plan) -> Runnable[SampleSet, Aggregation]:
        if method not in MODEL_AGGREGATORS:  # majority, weighted: votes, no model to ask
            if method == "weighted" and self.weights is None:
                raise RequestError(
                    "method 'weighted' needs vote weights, and none were given to wrap_openai (aggregator_weights=) "
                    "or the proxy (--aggregator-weights)",
                    param="method",
                )
            return load_aggregator(method, weights=self.weights)
        # Through the same client, the call's own transport options (a gateway's headers, its timeout) apply
        # to the aggregator's request too; another client's server gets none of them.
        same_client = self.aggregator_create is self.create
        request = {k: plan.params[k] for k in _PER_CALL if k in plan.params} if same_client else {}
        chat_model = OpenAIClientChatModel(
            create=self.aggregator_create,
            is_async=self.aggregator_is_async,
            model=self.aggregator_model or plan.model,
            request=request,
        )
        return load_aggregator(method, model=chat_model)

    def _policy(self, plan: Plan) -> CandidatePolicy:
        """The graph's bound on each candidate: never shorter than the client's own timeout and retries,
        which do the waiting and retrying (a per-call `timeout` counts)."""
        if self.policy is not None:
            return self.policy
        timeout = plan.params.get("timeout", self.client_timeout)
        if isinstance(timeout, httpx.Timeout):
            timeout = max((t for t in (timeout.connect, timeout.read, timeout.write, timeout.pool) if t), default=None)
        if not isinstance(timeout, int | float) or timeout <= 0:
            return CandidatePolicy(max_attempts=1, timeout_s=_NO_TIMEOUT_S)
        # every attempt, the client's backoff between them (at most 8 s each in openai's client), and slack so
        # that the client's own timeout, with its own error, is the one that fires
        cycle = timeout * (self.client_retries + 1) + 8 * self.client_retries
        return CandidatePolicy(max_attempts=1, timeout_s=cycle + 5)

    def plan(self, kwargs: dict[str, Any]) -> tuple[Plan | None, dict[str, Any]]:
        """The plan, or None and the request to send unchanged when aggregation is turned off."""
        options, rest = split_options(kwargs)
        if any(str(k).lower() == _RAW_RESPONSE_HEADER for k in (rest.get("extra_headers") or {})):
            if options.enabled:
                raise RequestError(
                    "with_raw_response / with_streaming_response return the HTTP response of one request; an "
                    "aggregation is made of many. Call create() itself, or turn aggregation off for this call.",
                    param="extra_headers",
                )
            return None, rest
        if not options.enabled:
            choices = rest.get("n")
            if isinstance(choices, int) and choices > self.max_n:
                raise RequestError(f"n={choices} is over the cap of {self.max_n} per request", param="n")
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
        if plan.structured:  # JSON output: the parsed objects are voted on (plan_request refused other methods)
            aggregator: Runnable[SampleSet, Aggregation] = StructuredVote()
        elif plan.method is not None:
            aggregator = self._aggregator_for(plan.method, plan)
        elif isinstance(self.aggregator, str):
            aggregator = self._aggregator_for(self.aggregator, plan)
        else:
            aggregator = self.aggregator
        model = OpenAIClientChatModel(
            create=self.create, is_async=self.is_async, model=plan.model, request=plan.params, messages=plan.messages
        )
        return build_aggregate_graph(
            model,
            n=n,
            aggregator=aggregator,
            policy=self._policy(plan),
            min_candidates=min_candidates,
            max_n=self.max_n,
            max_concurrency=self.max_concurrency,
            store=self.store,
        )

    @staticmethod
    def _outcomes(results: list[Any]) -> list[SampleSet]:
        """Each choice's sample set (with nothing to vote on, the graph gives the medoid candidate)."""
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [result["sample_set"] for result in results]

    def run(self, plan: Plan) -> Any:
        graph, inputs = self.graph(plan), [_graph_input(plan)] * plan.choices
        if plan.stream:
            return ChunkStream(self._stream(graph, plan))
        return completion(plan, self._outcomes(graph.batch(inputs, return_exceptions=True)))

    async def arun(self, plan: Plan) -> Any:
        graph, inputs = self.graph(plan), [_graph_input(plan)] * plan.choices
        if plan.stream:
            return AsyncChunkStream(self._astream(graph, plan))
        return completion(plan, self._outcomes(await graph.abatch(inputs, return_exceptions=True)))

    @staticmethod
    def _stream(graph: CompiledStateGraph, plan: Plan) -> Iterator[Any]:
        writer, state = ChunkWriter(plan), {}
        yield writer.opening()
        for mode, data in graph.stream(_graph_input(plan), stream_mode=["custom", "messages", "values"]):
            if mode == "values":
                state = data
            elif (chunk := writer.event(mode, data)) is not None:
                yield chunk
        yield from writer.closing(state["sample_set"])

    @staticmethod
    async def _astream(graph: CompiledStateGraph, plan: Plan) -> AsyncIterator[Any]:
        writer, state = ChunkWriter(plan), {}
        yield writer.opening()
        async for mode, data in graph.astream(_graph_input(plan), stream_mode=["custom", "messages", "values"]):
            if mode == "values":
                state = data
            elif (chunk := writer.event(mode, data)) is not None:
                yield chunk
        for chunk in writer.closing(state["sample_set"]):
            yield chunk


def wrap_openai(
    client: Any,
    *,
    n: int = 5,
    aggregator: str | Runnable[SampleSet, Aggregation] = "majority",
    aggregator_client: Any | None = None,
    aggregator_model: str | None = None,
    aggregator_weights: str | Path | None = None,
    policy: CandidatePolicy | None = None,
    min_candidates: int = 1,
    max_n: int = MAX_N,
    max_concurrency: int = 64,
    store: BaseStore | None = None,
) -> Any:
    """Patch `client.chat.completions.create` (an `OpenAI` or `AsyncOpenAI`, Azure included) to answer with
    an aggregation of `n` candidates, and return the same client.

    With `tools`, the candidates' choices are voted on first: each distinct tool plan (the same calls with equal
    arguments, in any order) is one choice and answering now another; a winning plan comes back as the
    message's `tool_calls` (finish_reason "tool_calls"). With `response_format` json_object / json_schema the
    candidates' parsed JSON objects are voted on (`StructuredVote`) whatever the aggregator.

    `aggregator` is a name from `registry.AGGREGATOR_NAMES` or any runtime Aggregator. "majority" and "weighted"
    (the `WeightedVote` in the `aggregator_weights` file, which it requires) are votes; "ssa", "gsr" and "usc"
    ask `aggregator_model` — default: the request's model — through `aggregator_client`, default: this client
    (the same kind, sync or async). The shipped trained SSA, run locally on the CPU, is an Aggregator object:
    `aggregator=load_aggregator("ssa")`. A request's own `method` may be any of the names ("weighted" only when
    `aggregator_weights` was given).

    Retries and timeouts are the client's own (`max_retries`, `timeout`, a per-call `timeout`); the graph's
    `policy` defaults to one attempt per candidate bounded by the client's whole retry cycle, and still falls
    back from one `n` request to single requests. `client.with_options(...)` returns a wrapped copy.
    """
    completions = client.chat.completions
    if getattr(completions, _WRAPPED, None) is not None:
        raise ValueError("this client is already wrapped by wrap_openai")
    settings = {
        "n": n,
        "aggregator": aggregator,
        "aggregator_client": aggregator_client,
        "aggregator_model": aggregator_model,
        "aggregator_weights": aggregator_weights,
        "policy": policy,
        "min_candidates": min_candidates,
        "max_n": max_n,
        "max_concurrency": max_concurrency,
        "store": store,
    }
    original, is_async = _unwrapped_create(client)
    aggregator_create = _unwrapped_create(aggregator_client) if aggregator_client is not None else None
    if aggregator_create is not None and aggregator_create[1] != is_async:
        kinds = ("OpenAI", "AsyncOpenAI")
        raise ValueError(
            f"aggregator_client must be the same kind of client as the wrapped one ({kinds[is_async]}), "
            f"got {type(aggregator_client).__name__}"
        )
    engine = Aggregating(
        (original, is_async),
        n=n,
        aggregator=aggregator,
        aggregator_create=aggregator_create,
        aggregator_model=aggregator_model,
        # read once, here: a missing or malformed file is an error at wrap time, not on the first request
        weights=None if aggregator_weights is None else WeightedVote.load(aggregator_weights),
        policy=policy,
        client_timeout=getattr(client, "timeout", None),
        client_retries=int(getattr(client, "max_retries", 0) or 0),
        min_candidates=min_candidates,
        max_n=max_n,
        max_concurrency=max_concurrency,
        store=store,
    )
    if is_async:

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
    _wrap_copies(client, settings)
    return client


def _wrap_copies(client: Any, settings: dict[str, Any]) -> None:
    """`client.with_options(...)` / `client.copy(...)` return new clients: wrap those the same way, so that
    `client.with_options(timeout=5).chat.completions.create(...)` still aggregates."""
    copy = client.copy

    def wrapped_copy(*args: Any, **kwargs: Any) -> Any:
        return wrap_openai(copy(*args, **kwargs), **settings)

    client.copy = client.with_options = wrapped_copy
