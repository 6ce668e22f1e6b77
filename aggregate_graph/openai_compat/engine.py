"""The engine behind `wrap_openai` and the proxy: a chat-completions or Responses API request becomes a run of
the prebuilt graph over the wrapped client's own (unwrapped) methods, and the run's sample set becomes the
API's answer — a `ChatCompletion` (or its chunks), or a `Response` (or its events)."""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple, NoReturn

from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from openai.resources.chat.completions import AsyncCompletions

from aggregate_graph.aggregators import StructuredVote, WeightedVote
from aggregate_graph.aggregators.registry import missing_options, registration
from aggregate_graph.drawing.settings import CandidatePolicy
from aggregate_graph.drawing.settling import stopping_stream
from aggregate_graph.errors import AggregatorOptionError, QuorumError
from aggregate_graph.graph import build_aggregate_graph
from aggregate_graph.openai_compat.chat_output import (
    AsyncChunkStream,
    ChunkStream,
    ChunkWriter,
    aheld_until_under_way,
    completion,
    held_until_under_way,
    stream_modes,
)
from aggregate_graph.openai_compat.client_model import (
    CALL_CONFIG_KEY,
    CallSettings,
    ClientChatModel,
    OpenAIClientChatModel,
)
from aggregate_graph.openai_compat.quorum_errors import upstream_error
from aggregate_graph.openai_compat.request import Plan, RequestError, plan_request, split_options
from aggregate_graph.openai_compat.responses_model import OpenAIResponsesChatModel
from aggregate_graph.openai_compat.responses_output import aggregated_response, typed_events
from aggregate_graph.openai_compat.responses_request import plan_responses_request
from aggregate_graph.options import AggregationOptions
from aggregate_graph.sample_set import Aggregation, SampleSet

WRAPPED_ATTRIBUTE = "_aggregate_graph_unwrapped_create"  # a patched resource keeps its own create here
ENGINE_ATTRIBUTE = "_aggregate_graph_engine"  # the wrapped `chat.completions` keeps its `ClientAggregator` here
_PER_CALL = ("extra_headers", "extra_query", "timeout", "user")
_RAW_RESPONSE_HEADER = "x-stainless-raw-response"  # what the SDK's with_raw_response sends
_NO_TIMEOUT_S = 7 * 24 * 3600.0  # a client without a timeout: the graph does not add one
# Where a wrapper's or proxy's aggregator options come from, for the error naming one it lacks.
_GIVEN_BY = {"weights": "come from aggregator_weights= (wrap_openai) or --aggregator-weights (the proxy)"}
_GRAPHS_KEPT = 64  # compiled graphs kept per wrapped client, one per shape of call (n, method, quorum, bound)


def _graph_input(plan: Plan) -> dict[str, Any]:
    # The graph's conversation is the question alone: the candidate model sends the caller's own messages, which
    # it reads from the call's settings in the config (see `OpenAIClientChatModel.call_key`).
    return {"messages": [HumanMessage(plan.question)]}


def _config(calls: dict[str, CallSettings]) -> RunnableConfig:
    return {"configurable": {CALL_CONFIG_KEY: calls}}


class ClientMethods(NamedTuple):
    """A client's own generation methods — `chat.completions.create` and `responses.create` — as they were before
    wrapping, and whether the client is async (their decorator hides that from `inspect`, so it is read off the
    resource's class)."""

    chat: Callable[..., Any]
    responses: Callable[..., Any]
    is_async: bool

    def create(self, api: str) -> Callable[..., Any]:
        return self.responses if api == "responses" else self.chat


def accepted_arguments(create: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments `create` takes (None: any)."""
    parameters = inspect.signature(create).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


def unwrapped(resource: Any) -> Callable[..., Any]:
    """A resource's own `create`, also once `wrap_openai` has patched it."""
    return getattr(resource, WRAPPED_ATTRIBUTE, None) or resource.create


def client_methods(client: Any) -> ClientMethods:
    completions = client.chat.completions
    return ClientMethods(unwrapped(completions), unwrapped(client.responses), isinstance(completions, AsyncCompletions))


def _longest(timeout: Any) -> Any:
    """A number of seconds from a client's or call's timeout: an httpx(2) `Timeout` gives its longest part."""
    parts = [getattr(timeout, a, None) for a in ("connect", "read", "write", "pool")]
    if any(isinstance(p, int | float) for p in parts) and not isinstance(timeout, int | float):
        return max(p for p in parts if isinstance(p, int | float))
    return timeout


class Prepared(NamedTuple):
    """A call's compiled graph (shared by every call of the same shape), what the call itself sends (by the
    graph's models' `call_key`), the successful candidates it needs, and what a streamed call reads of the graph
    (`stream_modes`)."""

    graph: CompiledStateGraph
    calls: dict[str, CallSettings]
    min_candidates: int
    stream_modes: list[str]


_MODELS: dict[str, type[ClientChatModel]] = {"chat": OpenAIClientChatModel, "responses": OpenAIResponsesChatModel}
_PATHS = {"chat": "/chat/completions", "responses": "/responses"}


class ClientAggregator:
    """Turns a chat-completions or Responses API request into the prebuilt graph over the wrapped client, and
    runs it: candidates are drawn through the same API as the call (a Responses call's as separate upstream
    Responses calls, that API having no `n`), and so is a model-backed aggregator asked.

    One graph is compiled per shape of call — the API, the model, n, min_candidates, the aggregator, the
    candidate bound — and kept (the last `_GRAPHS_KEPT`); the call's options and messages reach the graph's
    models at invoke time (`CallSettings` in the config), so a call pays no graph compilation."""

    def __init__(
        self,
        client: ClientMethods,
        *,
        options: AggregationOptions,
        aggregator: str | Runnable[SampleSet, Aggregation],
        aggregator_client: ClientMethods | None,
        aggregator_model: str | None,
        client_timeout: Any,
        client_retries: int,
        store: BaseStore | None,
        weights: WeightedVote | None = None,
        base_url: str = "http://wrap-openai.invalid/v1",
    ) -> None:
        self.client, self.is_async = client, client.is_async
        self.options, self.aggregator = options, aggregator
        # a policy left at its default is the client's: its own timeout and retries do the waiting (`_policy`)
        self.policy = options.policy if "policy" in options.model_fields_set else None
        self.aggregator_client = aggregator_client or client
        self.client_timeout, self.client_retries = client_timeout, client_retries
        self.aggregator_model, self.weights = aggregator_model, weights
        self.store, self.base_url = store, base_url.rstrip("/")
        self._accepted = {"chat": accepted_arguments(client.chat), "responses": accepted_arguments(client.responses)}
        self._graphs: OrderedDict[tuple[Any, ...], tuple[CompiledStateGraph, list[str]]] = OrderedDict()
        self._lock = threading.Lock()
        self.graphs_built = 0
        if isinstance(aggregator, str) and (missing := missing_options(aggregator, self.provided)):
            source = _GIVEN_BY.get(missing[0], "neither wrap_openai nor the proxy can give: choose another")
            raise ValueError(f"aggregator={aggregator!r} needs {missing[0]}=, which {source}")

    @property
    def n(self) -> int:
        return self.options.n

    @property
    def max_n(self) -> int:
        return self.options.max_n

    @property
    def provided(self) -> set[str]:
        """The options this engine gives an aggregator it builds by name: the model it asks (the request's, or
        `aggregator_model`, through the aggregator client), and the vote weights when it has them."""
        return {"model", "weights"} if self.weights is not None else {"model"}

    def _aggregator_for(self, method: str, model: str, api: str) -> Runnable[SampleSet, Aggregation]:
        named = registration(method)
        options: dict[str, Any] = {"weights": self.weights} if named.takes("weights") else {}
        if named.takes("model"):
            # The upstream is asked through the call's own API (a Responses-only upstream has no other); a separate
            # aggregator server (vLLM, `serve-aggregator`) through chat completions, which every such server serves.
            api = api if self.aggregator_client is self.client else "chat"
            options["model"] = _MODELS[api](
                create=self.aggregator_client.create(api),
                is_async=self.aggregator_client.is_async,
                model=self.aggregator_model or model,
                call_key="aggregator",
                cache=False,
            )
        try:
            return named.build(options)
        except AggregatorOptionError as exc:
            where = f", which {_GIVEN_BY[exc.option]}" if exc.missing and exc.option in _GIVEN_BY else ""
            raise RequestError(f"method {method!r}: {exc}{where}", param="method") from exc

    def _aggregator_call(self, plan: Plan) -> CallSettings:
        # Through the same client, the call's own transport options (a gateway's headers, its timeout) apply
        # to the aggregator's request too; another client's server gets none of them.
        same_client = self.aggregator_client is self.client
        request = {k: plan.params[k] for k in _PER_CALL if k in plan.params} if same_client else {}
        return CallSettings(model=self.aggregator_model or plan.model, request=request)

    def _policy(self, plan: Plan) -> CandidatePolicy:
        """The graph's bound on each candidate: never shorter than the client's own timeout and retries,
        which do the waiting and retrying (a per-call `timeout` counts)."""
        if self.policy is not None:
            return self.policy
        timeout = _longest(plan.params.get("timeout", self.client_timeout))
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            return CandidatePolicy(max_attempts=1, timeout_s=_NO_TIMEOUT_S)
        # every attempt, the client's backoff between them (at most 8 s each in openai's client), and slack so
        # that the client's own timeout, with its own error, is the one that fires
        cycle = timeout * (self.client_retries + 1) + 8 * self.client_retries
        return CandidatePolicy(max_attempts=1, timeout_s=cycle + 5)

    def plan(self, kwargs: dict[str, Any], api: str = "chat") -> tuple[Plan | None, dict[str, Any]]:
        """The plan of a call to `api` ("chat" or "responses"), or None and the request to send unchanged when
        aggregation is turned off."""
        options, rest = split_options(kwargs)
        headers = rest.get("extra_headers") or {}
        raw = next((v for k, v in headers.items() if str(k).lower() == _RAW_RESPONSE_HEADER), None)
        if raw is not None and options.enabled:
            # with_streaming_response on a stream: the stream, in a stand-in for its HTTP response (the OpenAI
            # Agents SDK streams this way). Any other raw response would be one request's, not an aggregation.
            if raw != "stream" or rest.get("stream") is not True:
                raise RequestError(
                    "with_raw_response / with_streaming_response return the HTTP response of one request; an "
                    "aggregation is made of many. Call create() itself (with_streaming_response works for "
                    "stream=True), or turn aggregation off for this call.",
                    param="extra_headers",
                )
            rest = {**rest, "extra_headers": {k: v for k, v in headers.items() if v is not raw}}
        elif raw is not None:
            return None, rest
        if not options.enabled:
            choices = rest.get("n")
            if isinstance(choices, int) and choices > self.max_n:
                raise RequestError(f"n={choices} is over the cap of {self.max_n} per request", param="n")
            return None, rest
        # an argument the client's method does not take fails at once, as unwrapped: sent to n candidates, it
        # would fail each of them and come back as an API error
        accepted = self._accepted[api]
        if accepted is not None and (unknown := sorted(set(rest) - accepted)):
            name = "responses.create" if api == "responses" else "chat.completions.create"
            raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
        plan = plan_responses_request(options, rest) if api == "responses" else plan_request(options, rest)
        plan.streamed_response = raw is not None
        n = plan.n or self.n
        if plan.choices * n > self.max_n:
            raise RequestError(
                f"{plan.choices} answer(s) × {n} candidates = {plan.choices * n} samples, over the cap of "
                f"{self.max_n} per request",
                param="n",
            )
        return plan, rest

    def graph(self, plan: Plan) -> Prepared:
        """The compiled graph for the plan's shape (built once), and the config that carries the call."""
        n = plan.n or self.n
        min_candidates = plan.min_candidates or min(self.options.min_candidates, n)
        if min_candidates > n:
            raise RequestError(f"min_candidates={min_candidates} is more than n={n}", param="min_candidates")
        # JSON output: the parsed objects are voted on (plan_request refused other methods)
        method = "structured" if plan.structured else plan.method
        if method is None and isinstance(self.aggregator, str):
            method = self.aggregator
        policy = self._policy(plan)
        key = (plan.api, plan.model, n, min_candidates, method, tuple(policy.model_dump().items()))
        # Built under the lock (~3 ms, once per shape): concurrent first calls of one shape share one graph.
        with self._lock:
            built = self._graphs.get(key)
            if built is not None:
                self._graphs.move_to_end(key)
            else:
                built = self._graphs[key] = self._build(plan, n, min_candidates, method, policy)
                self.graphs_built += 1
                while len(self._graphs) > _GRAPHS_KEPT:
                    self._graphs.popitem(last=False)
        calls = {
            "candidates": CallSettings(model=plan.model, request=plan.params, messages=plan.messages),
            "aggregator": self._aggregator_call(plan),
        }
        graph, modes = built
        return Prepared(graph, calls, min_candidates, modes)

    def _build(
        self, plan: Plan, n: int, min_candidates: int, method: str | None, policy: CandidatePolicy
    ) -> tuple[CompiledStateGraph, list[str]]:
        if method == "structured":
            aggregator: Runnable[SampleSet, Aggregation] = StructuredVote()
        elif method is not None:
            aggregator = self._aggregator_for(method, plan.model, plan.api)
        else:
            assert not isinstance(self.aggregator, str)
            aggregator = self.aggregator
        model = _MODELS[plan.api](
            create=self.client.create(plan.api),
            is_async=self.is_async,
            model=plan.model,
            call_key="candidates",
            endpoint=self.base_url,
            cache=False,
        )
        options = AggregationOptions.of(
            self.options, n=n, aggregator=aggregator, policy=policy, min_candidates=min_candidates
        )
        return build_aggregate_graph(model, options=options, store=self.store), stream_modes(aggregator)

    def error(self, exc: BaseException, api: str = "chat") -> BaseException:
        """What a call raises for `exc`: total failure as the upstream's openai exception (`errors`)."""
        return upstream_error(exc, self.base_url + _PATHS[api]) if isinstance(exc, QuorumError) else exc

    def _raise_as_openai(self, exc: BaseException, api: str = "chat") -> NoReturn:
        mapped = self.error(exc, api)
        if mapped is exc:
            raise exc
        raise mapped from exc

    def _outcomes(self, results: list[Any], api: str) -> list[SampleSet]:
        """Each choice's sample set (with nothing to vote on, the graph gives the medoid candidate)."""
        for result in results:
            if isinstance(result, BaseException):
                self._raise_as_openai(result, api)
        return [result["sample_set"] for result in results]

    def run(self, plan: Plan) -> Any:
        graph, calls, quorum, modes = self.graph(plan)
        if plan.stream and plan.api == "chat":
            chunks = self._stream(graph, calls, plan, modes)
            return ChunkStream(chunks, held_until_under_way(chunks, quorum))
        results = graph.batch([_graph_input(plan)] * plan.choices, _config(calls), return_exceptions=True)
        answer = self._answer(plan, self._outcomes(results, plan.api))
        return ChunkStream(iter(typed_events(answer))) if plan.stream else answer

    async def arun(self, plan: Plan) -> Any:
        graph, calls, quorum, modes = self.graph(plan)
        if plan.stream and plan.api == "chat":
            chunks = self._astream(graph, calls, plan, modes)
            return AsyncChunkStream(chunks, await aheld_until_under_way(chunks, quorum))
        results = await graph.abatch([_graph_input(plan)] * plan.choices, _config(calls), return_exceptions=True)
        answer = self._answer(plan, self._outcomes(results, plan.api))
        return AsyncChunkStream(_replayed(typed_events(answer))) if plan.stream else answer

    @staticmethod
    def _answer(plan: Plan, sample_sets: list[SampleSet]) -> Any:
        """The API's answer: a `ChatCompletion`, or a `Response`. (A streamed Responses call is answered once the
        aggregate is known, its parts all being decided together: `run` replays it as the standard events.)"""
        return completion(plan, sample_sets) if plan.api == "chat" else aggregated_response(plan, sample_sets[0])

    def _stream(
        self, graph: CompiledStateGraph, calls: dict[str, CallSettings], plan: Plan, modes: list[str]
    ) -> Iterator[Any]:
        writer = ChunkWriter(plan)
        yield writer.opening()
        try:
            for mode, data in stopping_stream(graph, _graph_input(plan), _config(calls), stream_mode=modes):
                if (chunk := writer.event(mode, data)) is not None:
                    yield chunk
        except QuorumError as exc:
            self._raise_as_openai(exc)
        yield from writer.closing()

    async def _astream(
        self, graph: CompiledStateGraph, calls: dict[str, CallSettings], plan: Plan, modes: list[str]
    ) -> AsyncIterator[Any]:
        writer = ChunkWriter(plan)
        yield writer.opening()
        try:
            async for mode, data in graph.astream(_graph_input(plan), _config(calls), stream_mode=modes):
                if (chunk := writer.event(mode, data)) is not None:
                    yield chunk
        except QuorumError as exc:
            self._raise_as_openai(exc)
        for chunk in writer.closing():
            yield chunk


async def _replayed(events: list[Any]) -> AsyncIterator[Any]:
    for event in events:
        yield event
