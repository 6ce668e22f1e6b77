"""`wrap_openai(client)`: the client's `chat.completions.create` answers with an aggregation of n candidates,
drawn in parallel by the prebuilt graph through the client's own (unwrapped) `create`.

One patch point, as LangSmith's `wrap_openai`: the same client object comes back, sync or async alike.
`chat.completions.parse` and `.stream` aggregate too (through the patched `create`); every other entry point that
makes the model answer (`responses`, legacy `completions`, Assistants runs, realtime sessions) is refused with a
`RequestError` unless aggregation is turned off for the call: refused, never silently sent unaggregated.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from openai.resources.chat.completions import AsyncCompletions

from aggregate_graph.aggregators import StructuredVote, WeightedVote
from aggregate_graph.errors import QuorumError
from aggregate_graph.graph import MAX_CANDIDATES, build_aggregate_graph, check_n
from aggregate_graph.openai_compat.client_model import (
    CALL_CONFIG_KEY,
    CallSettings,
    OpenAIClientChatModel,
)
from aggregate_graph.openai_compat.entry_points import forget_raw_wrappers, patch_parse, refuse_unaggregated, resource
from aggregate_graph.openai_compat.errors import upstream_error
from aggregate_graph.openai_compat.request import Plan, RequestError, plan_request, split_options
from aggregate_graph.openai_compat.responses import (
    STREAM_MODES,
    AsyncChunkStream,
    ChunkStream,
    ChunkWriter,
    aheld_until_under_way,
    completion,
    held_until_under_way,
)
from aggregate_graph.registry import AGGREGATOR_NAMES, MODEL_AGGREGATORS, load_aggregator
from aggregate_graph.sample_set import Aggregation, SampleSet
from aggregate_graph.samplers import CandidatePolicy

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

ClientT = TypeVar("ClientT", bound="OpenAI | AsyncOpenAI")

_WRAPPED = "_aggregate_graph_unwrapped_create"
ENGINE_ATTRIBUTE = "_aggregate_graph_engine"  # the wrapped `chat.completions` keeps its `CompletionsAggregator` here
_PER_CALL = ("extra_headers", "extra_query", "timeout", "user")
_RAW_RESPONSE_HEADER = "x-stainless-raw-response"  # what the SDK's with_raw_response sends
_NO_TIMEOUT_S = 7 * 24 * 3600.0  # a client without a timeout: the graph does not add one
_GRAPHS_KEPT = 64  # compiled graphs kept per wrapped client, one per shape of call (n, method, quorum, bound)


def _graph_input(plan: Plan) -> dict[str, Any]:
    # The graph's conversation is the question alone: the candidate model sends the caller's own messages, which
    # it reads from the call's settings in the config (see `OpenAIClientChatModel.call_key`).
    return {"messages": [HumanMessage(plan.question)]}


def _config(calls: dict[str, CallSettings]) -> RunnableConfig:
    return {"configurable": {CALL_CONFIG_KEY: calls}}


class ClientCreate(NamedTuple):
    """A client's own `chat.completions.create`, and whether it is async (its decorator hides that from
    `inspect`, so it is read off the resource's class)."""

    create: Callable[..., Any]
    is_async: bool


def _unwrapped_create(client: Any) -> ClientCreate:
    completions = client.chat.completions
    return ClientCreate(
        getattr(completions, _WRAPPED, None) or completions.create, isinstance(completions, AsyncCompletions)
    )


def _longest(timeout: Any) -> Any:
    """A number of seconds from a client's or call's timeout: an httpx(2) `Timeout` gives its longest part."""
    parts = [getattr(timeout, a, None) for a in ("connect", "read", "write", "pool")]
    if any(isinstance(p, int | float) for p in parts) and not isinstance(timeout, int | float):
        return max(p for p in parts if isinstance(p, int | float))
    return timeout


class Prepared(NamedTuple):
    """A call's compiled graph (shared by every call of the same shape), what the call itself sends (by the
    graph's models' `call_key`), and the successful candidates it needs."""

    graph: CompiledStateGraph
    calls: dict[str, CallSettings]
    min_candidates: int


class CompletionsAggregator:
    """Turns a chat-completions request into the prebuilt graph over the wrapped client, and runs it.

    One graph is compiled per shape of call — the model, n, min_candidates, the aggregator, the candidate
    bound — and kept (the last `_GRAPHS_KEPT`); the call's options and messages reach the graph's models at
    invoke time (`CallSettings` in the config), so a call pays no graph compilation."""

    def __init__(
        self,
        create: ClientCreate,
        *,
        n: int,
        aggregator: str | Runnable[SampleSet, Aggregation],
        aggregator_create: ClientCreate | None,
        aggregator_model: str | None,
        policy: CandidatePolicy | None,
        client_timeout: Any,
        client_retries: int,
        min_candidates: int,
        max_n: int,
        max_concurrency: int,
        store: BaseStore | None,
        weights: WeightedVote | None = None,
        url: str = "http://wrap-openai.invalid/v1/chat/completions",
    ) -> None:
        self.create, self.is_async = create
        self.aggregator_create, self.aggregator_is_async = aggregator_create or create
        self.n, self.aggregator, self.policy = check_n(n, max_n), aggregator, policy
        self.client_timeout, self.client_retries = client_timeout, client_retries
        self.aggregator_model, self.weights = aggregator_model, weights
        self.min_candidates, self.max_n = min_candidates, max_n
        self.max_concurrency, self.store, self.url = max_concurrency, store, url
        self._graphs: OrderedDict[tuple[Any, ...], CompiledStateGraph] = OrderedDict()
        self._lock = threading.Lock()
        self.graphs_built = 0
        if isinstance(aggregator, str) and aggregator not in AGGREGATOR_NAMES:
            raise ValueError(
                f"unknown aggregator {aggregator!r}; use one of {', '.join(AGGREGATOR_NAMES)} or an Aggregator"
            )
        if aggregator == "weighted" and weights is None:
            raise ValueError(
                "aggregator='weighted' needs aggregator_weights=: a file from WeightedVote.save or `aggregate-train "
                "weights`"
            )

    def _aggregator_for(self, method: str, model: str) -> Runnable[SampleSet, Aggregation]:
        if method not in MODEL_AGGREGATORS:  # majority, weighted: votes, no model to ask
            if method == "weighted" and self.weights is None:
                raise RequestError(
                    "method 'weighted' needs vote weights, and none were given to wrap_openai (aggregator_weights=) "
                    "or the proxy (--aggregator-weights)",
                    param="method",
                )
            return load_aggregator(method, weights=self.weights)
        chat_model = OpenAIClientChatModel(
            create=self.aggregator_create,
            is_async=self.aggregator_is_async,
            model=self.aggregator_model or model,
            call_key="aggregator",
            cache=False,
        )
        return load_aggregator(method, model=chat_model)

    def _aggregator_call(self, plan: Plan) -> CallSettings:
        # Through the same client, the call's own transport options (a gateway's headers, its timeout) apply
        # to the aggregator's request too; another client's server gets none of them.
        same_client = self.aggregator_create is self.create
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

    def graph(self, plan: Plan) -> Prepared:
        """The compiled graph for the plan's shape (built once), and the config that carries the call."""
        n = plan.n or self.n
        min_candidates = plan.min_candidates or min(self.min_candidates, n)
        if min_candidates > n:
            raise RequestError(f"min_candidates={min_candidates} is more than n={n}", param="min_candidates")
        # JSON output: the parsed objects are voted on (plan_request refused other methods)
        method = "structured" if plan.structured else plan.method
        if method is None and isinstance(self.aggregator, str):
            method = self.aggregator
        policy = self._policy(plan)
        key = (plan.model, n, min_candidates, method, tuple(policy.model_dump().items()))
        # Built under the lock (~3 ms, once per shape): concurrent first calls of one shape share one graph.
        with self._lock:
            graph = self._graphs.get(key)
            if graph is not None:
                self._graphs.move_to_end(key)
            else:
                graph = self._graphs[key] = self._build(plan.model, n, min_candidates, method, policy)
                self.graphs_built += 1
                while len(self._graphs) > _GRAPHS_KEPT:
                    self._graphs.popitem(last=False)
        calls = {
            "candidates": CallSettings(model=plan.model, request=plan.params, messages=plan.messages),
            "aggregator": self._aggregator_call(plan),
        }
        return Prepared(graph, calls, min_candidates)

    def _build(
        self, model_name: str, n: int, min_candidates: int, method: str | None, policy: CandidatePolicy
    ) -> CompiledStateGraph:
        if method == "structured":
            aggregator: Runnable[SampleSet, Aggregation] = StructuredVote()
        elif method is not None:
            aggregator = self._aggregator_for(method, model_name)
        else:
            assert not isinstance(self.aggregator, str)
            aggregator = self.aggregator
        model = OpenAIClientChatModel(
            create=self.create,
            is_async=self.is_async,
            model=model_name,
            call_key="candidates",
            endpoint=self.url.removesuffix("/chat/completions"),
            cache=False,
        )
        return build_aggregate_graph(
            model,
            n=n,
            aggregator=aggregator,
            policy=policy,
            min_candidates=min_candidates,
            max_n=self.max_n,
            max_concurrency=self.max_concurrency,
            store=self.store,
        )

    def error(self, exc: BaseException) -> BaseException:
        """What a call raises for `exc`: total failure as the upstream's openai exception (`errors`)."""
        return upstream_error(exc, self.url) if isinstance(exc, QuorumError) else exc

    def _raise_as_openai(self, exc: BaseException) -> NoReturn:
        mapped = self.error(exc)
        if mapped is exc:
            raise exc
        raise mapped from exc

    def _outcomes(self, results: list[Any]) -> list[SampleSet]:
        """Each choice's sample set (with nothing to vote on, the graph gives the medoid candidate)."""
        for result in results:
            if isinstance(result, BaseException):
                self._raise_as_openai(result)
        return [result["sample_set"] for result in results]

    def run(self, plan: Plan) -> Any:
        graph, calls, quorum = self.graph(plan)
        if plan.stream:
            chunks = self._stream(graph, calls, plan)
            return ChunkStream(chunks, held_until_under_way(chunks, quorum))
        results = graph.batch([_graph_input(plan)] * plan.choices, _config(calls), return_exceptions=True)
        return completion(plan, self._outcomes(results))

    async def arun(self, plan: Plan) -> Any:
        graph, calls, quorum = self.graph(plan)
        if plan.stream:
            chunks = self._astream(graph, calls, plan)
            return AsyncChunkStream(chunks, await aheld_until_under_way(chunks, quorum))
        results = await graph.abatch([_graph_input(plan)] * plan.choices, _config(calls), return_exceptions=True)
        return completion(plan, self._outcomes(results))

    def _stream(self, graph: CompiledStateGraph, calls: dict[str, CallSettings], plan: Plan) -> Iterator[Any]:
        writer = ChunkWriter(plan)
        yield writer.opening()
        try:
            for mode, data in graph.stream(_graph_input(plan), _config(calls), stream_mode=STREAM_MODES):
                if (chunk := writer.event(mode, data)) is not None:
                    yield chunk
        except QuorumError as exc:
            self._raise_as_openai(exc)
        yield from writer.closing()

    async def _astream(
        self, graph: CompiledStateGraph, calls: dict[str, CallSettings], plan: Plan
    ) -> AsyncIterator[Any]:
        writer = ChunkWriter(plan)
        yield writer.opening()
        try:
            async for mode, data in graph.astream(_graph_input(plan), _config(calls), stream_mode=STREAM_MODES):
                if (chunk := writer.event(mode, data)) is not None:
                    yield chunk
        except QuorumError as exc:
            self._raise_as_openai(exc)
        for chunk in writer.closing():
            yield chunk


def wrap_openai(
    client: ClientT,
    *,
    n: int = 5,
    aggregator: str | Runnable[SampleSet, Aggregation] = "majority",
    aggregator_client: OpenAI | AsyncOpenAI | None = None,
    aggregator_model: str | None = None,
    aggregator_weights: str | Path | None = None,
    policy: CandidatePolicy | None = None,
    min_candidates: int = 1,
    max_n: int = MAX_CANDIDATES,
    max_concurrency: int = 64,
    store: BaseStore | None = None,
) -> ClientT:
    """Patch `client.chat.completions.create` (an `OpenAI` or `AsyncOpenAI`, Azure included) to answer with
    an aggregation of `n` candidates, and return the same client (typed as it came).

    With `tools`, the candidates' choices are voted on first: each distinct tool plan (the same calls with equal
    arguments, in any order) is one choice and answering now another; a winning plan comes back as the
    message's `tool_calls` (finish_reason "tool_calls"). With `response_format` json_object / json_schema the
    candidates' parsed JSON objects are voted on (`StructuredVote`) whatever the aggregator.
    `chat.completions.parse(response_format=Model)` and `chat.completions.stream(...)` aggregate the same way
    (through the patched `create`). The client's other entry points that make a model answer — `responses`,
    legacy `completions`, Assistants runs, realtime sessions — raise `RequestError` unless the call turns
    aggregation off (`extra_body={"aggregation": {"enabled": False}}`); nothing is sent unaggregated silently.

    `aggregator` is a name from `registry.AGGREGATOR_NAMES` or any runtime Aggregator. "majority" and "weighted"
    (the `WeightedVote` in the `aggregator_weights` file, which it requires) are votes; "ssa", "gsr" and "usc"
    ask `aggregator_model` — default: the request's model — through `aggregator_client`, default: this client
    (the same kind, sync or async). The shipped trained SSA, run locally on the CPU, is an Aggregator object:
    `aggregator=load_aggregator("ssa")`. A request's own `method` may be any of the names ("weighted" only when
    `aggregator_weights` was given).

    Retries and timeouts are the client's own (`max_retries`, `timeout`, a per-call `timeout`); the graph's
    `policy` defaults to one attempt per candidate bounded by the client's whole retry cycle, and still falls
    back from one `n` request to single requests. When too few candidates succeed, the call raises the `openai`
    exception the upstream's failure maps to — `RateLimitError` for 429s, `APITimeoutError`, … (an
    `openai.APIError` for mixed causes) — which is also a `QuorumError` carrying the sample set
    (`openai_compat.errors`); a streamed call raises it at `create()`. `client.with_options(...)` returns a
    wrapped copy.
    """
    completions: Any = client.chat.completions
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
    if aggregator_create is not None and aggregator_create.is_async != is_async:
        kinds = ("OpenAI", "AsyncOpenAI")
        raise ValueError(
            f"aggregator_client must be the same kind of client as the wrapped one ({kinds[is_async]}), "
            f"got {type(aggregator_client).__name__}"
        )
    engine = CompletionsAggregator(
        ClientCreate(original, is_async),
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
        url=f"{str(getattr(client, 'base_url', 'http://wrap-openai.invalid/v1')).rstrip('/')}/chat/completions",
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
    patched = functools.wraps(original)(patched)
    patched.__doc__ = f"{original.__doc__ or ''}\n\nWrapped by aggregate_graph.wrap_openai (n={n})."
    setattr(completions, _WRAPPED, original)
    setattr(completions, ENGINE_ATTRIBUTE, engine)
    # `beta.chat.completions` is a second chat-completions resource of the same client (in openai < 1.92 the
    # home of `parse` / `stream`): it aggregates the same way. Its `stream` calls its own `create`.
    for chat_completions in (completions, resource(client, "beta.chat.completions")):
        if chat_completions is None:
            continue
        chat_completions.create = patched
        patch_parse(chat_completions, patched, is_async)
        forget_raw_wrappers(chat_completions)
    refuse_unaggregated(client)
    _wrap_copies(client, settings)
    return client


def _wrap_copies(client: Any, settings: dict[str, Any]) -> None:
    """`client.with_options(...)` / `client.copy(...)` return new clients: wrap those the same way, so that
    `client.with_options(timeout=5).chat.completions.create(...)` still aggregates."""
    copy = client.copy

    def wrapped_copy(*args: Any, **kwargs: Any) -> Any:
        return wrap_openai(copy(*args, **kwargs), **settings)

    client.copy = client.with_options = wrapped_copy
