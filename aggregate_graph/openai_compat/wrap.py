"""`wrap_openai(client)`: the client's `chat.completions.create` and `responses.create` answer with an aggregation
of n candidates, drawn in parallel by the prebuilt graph through the client's own (unwrapped) methods.

One patch point, as LangSmith's `wrap_openai`: the same client object comes back, sync or async alike.
`chat.completions.parse` / `.stream` and `responses.parse` / `.stream` aggregate too (through the patched
`create`s); every other entry point that makes the model answer (legacy `completions`, `responses.compact`, the
beta Responses preview, Assistants runs, realtime sessions) is refused with a `RequestError` unless aggregation
is turned off for the call: refused, never silently sent unaggregated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.runnables import Runnable
from langgraph.store.base import BaseStore

from aggregate_graph.aggregators import WeightedVote
from aggregate_graph.aggregators.registry import known_aggregator
from aggregate_graph.openai_compat.chat_output import AsyncStreamedAggregation, StreamedAggregation
from aggregate_graph.openai_compat.engine import (
    ENGINE_ATTRIBUTE,
    WRAPPED_ATTRIBUTE,
    ClientAggregator,
    client_methods,
)
from aggregate_graph.openai_compat.entry_points import (
    forget_raw_wrappers,
    patch_parse,
    patch_responses_parse,
    refuse_unaggregated,
    resource,
)
from aggregate_graph.options import AggregationOptions
from aggregate_graph.sample_set import Aggregation, SampleSet

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

ClientT = TypeVar("ClientT", bound="OpenAI | AsyncOpenAI")


def _patched(engine: ClientAggregator, original: Callable[..., Any], api: str) -> Callable[..., Any]:
    """`original` (a resource's own `create`) aggregating every call to `api` that does not turn aggregation off."""
    if engine.is_async:

        async def acreate(**kwargs: Any) -> Any:
            plan, rest = engine.plan(kwargs, api)
            if plan is None:
                return await original(**rest)
            answer = await engine.arun(plan)
            return AsyncStreamedAggregation(answer) if plan.streamed_response else answer

        patched: Callable[..., Any] = acreate
    else:

        def create(**kwargs: Any) -> Any:
            plan, rest = engine.plan(kwargs, api)
            if plan is None:
                return original(**rest)
            answer = engine.run(plan)
            return StreamedAggregation(answer) if plan.streamed_response else answer

        patched = create
    patched = functools.wraps(original)(patched)
    patched.__doc__ = f"{original.__doc__ or ''}\n\nWrapped by aggregate_graph.wrap_openai (n={engine.n})."
    return patched


def wrap_openai(
    client: ClientT,
    n: int | None = None,
    *,
    options: AggregationOptions | None = None,
    aggregator: str | Runnable[SampleSet, Aggregation] | None = None,
    aggregator_client: OpenAI | AsyncOpenAI | None = None,
    aggregator_model: str | None = None,
    aggregator_weights: str | Path | None = None,
    store: BaseStore | None = None,
    **fields: Any,
) -> ClientT:
    """Patch `client.chat.completions.create` (an `OpenAI` or `AsyncOpenAI`, Azure included) to answer with
    an aggregation of `n` candidates, and return the same client (typed as it came).

    How candidates are drawn and aggregated is an `AggregationOptions` (`options=`), or its fields as keyword
    arguments (`n=5, min_candidates=3, answer_type="boolean"`), as on every other surface; keywords replace the
    object's fields.

    With `tools`, the candidates' choices are voted on first: each distinct tool plan (the same calls with equal
    arguments, in any order) is one choice and answering now another; a winning plan comes back as the
    message's `tool_calls` (finish_reason "tool_calls"). With `response_format` json_object / json_schema the
    candidates' parsed JSON objects are voted on (`StructuredVote`) whatever the aggregator.
    `chat.completions.parse(response_format=Model)` and `chat.completions.stream(...)` aggregate the same way
    (through the patched `create`), and so do `responses.create`, `.parse` and `.stream`. The client's other entry
    points that make a model answer — legacy `completions`, `responses.compact`, Assistants runs, realtime sessions —
    raise `RequestError` unless the call turns aggregation off (`extra_body={"aggregation": {"enabled": False}}`);
    nothing is sent unaggregated silently.

    `aggregator` is a registered name (`registry.aggregator_names()`, your own included) or any runtime
    Aggregator (default: `options.aggregator`, majority vote). A name is built per request by the registry with
    what the wrapper has: an aggregator that takes a model ("ssa", "gsr", "usc", "recursive") asks
    `aggregator_model` — default: the request's model — through `aggregator_client`, default: this client (the
    same kind, sync or async); one that takes weights gets the `WeightedVote` of the `aggregator_weights` file
    ("weighted" reads the shipped weights without it). The shipped trained SSA, run locally on the CPU, is an
    Aggregator object: `aggregator=load_aggregator("ssa")`. A request's own `method` may be any name whose options
    the wrapper can give.

    Retries and timeouts are the client's own (`max_retries`, `timeout`, a per-call `timeout`); unless the options
    set a `policy`, the graph's defaults to one attempt per candidate bounded by the client's whole retry cycle,
    and still falls back from one `n` request to single requests. When too few candidates succeed, the call
    raises the `openai` exception the upstream's failure maps to — `RateLimitError` for 429s, `APITimeoutError`, …
    (an `openai.APIError` for mixed causes) — which is also a `QuorumError` carrying the sample set
    (`openai_compat.quorum_errors`); a streamed call raises it at `create()`. `client.with_options(...)` returns a
    wrapped copy.

    Args:
        client: an `openai.OpenAI` or `openai.AsyncOpenAI` (Azure included).
        n: candidates per call (`options.n`).
        options: an `AggregationOptions`; its fields may also be given as keywords (`fields`), which replace it.
        aggregator: a registered name or an Aggregator (default: `options.aggregator`).
        aggregator_client: the client a model-backed aggregator asks (default: `client`).
        aggregator_model: the model it asks (default: the request's model).
        aggregator_weights: a WeightedVote file, for aggregators that take weights.
        store: where each sample set is logged.
        **fields: `AggregationOptions` fields (`min_candidates`, `answer_type`, `settle`, …).

    Returns:
        The same client, its chat completions and Responses calls answered with aggregations.

    Example:
        ```python
        from openai import OpenAI
        from aggregate_graph import sample_sets_from, wrap_openai
        from aggregate_graph.testing import OpenAITestServer

        with OpenAITestServer(["The answer is 42.", "42", "It is 41."]) as server:
            client = wrap_openai(OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0), n=3)
            question = [{"role": "user", "content": "What is 6 times 7?"}]
            completion = client.chat.completions.create(model="any", messages=question)
        assert completion.choices[0].message.content == "The answer is 42."
        assert sample_sets_from(completion)[0].aggregation.answer == "42"
        ```
    """
    completions: Any = client.chat.completions
    if getattr(completions, WRAPPED_ATTRIBUTE, None) is not None:
        raise ValueError("this client is already wrapped by wrap_openai")
    if n is not None:
        fields["n"] = n
    if aggregator is not None and not isinstance(aggregator, str):
        fields["aggregator"] = aggregator
    settings = AggregationOptions.of(options, **fields)
    if isinstance(aggregator, str):
        known_aggregator(aggregator)  # a name is built per request, with the request's model
    copies = {
        "options": settings,
        "aggregator": aggregator,
        "aggregator_client": aggregator_client,
        "aggregator_model": aggregator_model,
        "aggregator_weights": aggregator_weights,
        "store": store,
    }
    methods = client_methods(client)
    aggregator_methods = client_methods(aggregator_client) if aggregator_client is not None else None
    if aggregator_methods is not None and aggregator_methods.is_async != methods.is_async:
        kinds = ("OpenAI", "AsyncOpenAI")
        raise ValueError(
            f"aggregator_client must be the same kind of client as the wrapped one ({kinds[methods.is_async]}), "
            f"got {type(aggregator_client).__name__}"
        )
    engine = ClientAggregator(
        methods,
        options=settings,
        aggregator=aggregator if isinstance(aggregator, str) else settings.aggregator,
        aggregator_client=aggregator_methods,
        aggregator_model=aggregator_model,
        # read once, here: a missing or malformed file is an error at wrap time, not on the first request
        weights=None if aggregator_weights is None else WeightedVote.load(aggregator_weights),
        client_timeout=getattr(client, "timeout", None),
        client_retries=int(getattr(client, "max_retries", 0) or 0),
        store=store,
        base_url=str(getattr(client, "base_url", "http://wrap-openai.invalid/v1")),
    )
    patched = _patched(engine, methods.chat, "chat")
    setattr(completions, WRAPPED_ATTRIBUTE, methods.chat)
    setattr(completions, ENGINE_ATTRIBUTE, engine)
    # `beta.chat.completions` is a second chat-completions resource of the same client (in openai < 1.92 the
    # home of `parse` / `stream`): it aggregates the same way. Its `stream` calls its own `create`.
    for chat_completions in (completions, resource(client, "beta.chat.completions")):
        if chat_completions is None:
            continue
        chat_completions.create = patched
        patch_parse(chat_completions, patched, methods.is_async)
        forget_raw_wrappers(chat_completions)
    # openai's `responses.stream()` calls the resource's `create`, so it aggregates through the patched one
    responses: Any = client.responses
    responses.create = _patched(engine, methods.responses, "responses")
    setattr(responses, WRAPPED_ATTRIBUTE, methods.responses)
    patch_responses_parse(responses, responses.create, methods.is_async)
    forget_raw_wrappers(responses)
    refuse_unaggregated(client)
    _wrap_copies(client, copies)
    return client


def _wrap_copies(client: Any, settings: dict[str, Any]) -> None:
    """`client.with_options(...)` / `client.copy(...)` return new clients: wrap those the same way, so that
    `client.with_options(timeout=5).chat.completions.create(...)` still aggregates."""
    copy = client.copy

    def wrapped_copy(*args: Any, **kwargs: Any) -> Any:
        return wrap_openai(copy(*args, **kwargs), **settings)

    client.copy = client.with_options = wrapped_copy
