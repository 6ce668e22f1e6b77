"""`AggregatingChatModel`: a chat model that answers each call with an aggregation of n candidates.

It wraps any chat model and runs the prebuilt graph per call, so it drops in wherever code takes a chat
model: `langchain.agents.create_agent`, `langgraph.prebuilt.create_react_agent`, LCEL chains. Tools bound to
it are bound to every candidate request; when candidates call tools the graph votes on the plans and the
returned AIMessage carries the agreed `tool_calls`, so the tool node runs one plan. `with_structured_output`
goes through tool calling, so it votes on the parsed object; a JSON `response_format` (LangChain's provider
strategy) votes on the parsed JSON (`StructuredVote`). The graph is compiled once per shape of call (the
options bound to it), not on every call.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import UUID, uuid4

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config, var_child_runnable_config
from langchain_core.tools import BaseTool
from langchain_core.tracers import BaseTracer
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from aggregate_graph.aggregators.structured import StructuredVote
from aggregate_graph.drawing.models import ModelSpec, load_chat_model
from aggregate_graph.drawing.settings import CandidatePolicy, Sampler, describe_model
from aggregate_graph.drawing.settling import stopping_stream
from aggregate_graph.graph import build_aggregate_graph
from aggregate_graph.options import AggregationOptions
from aggregate_graph.sample_set import SampleSet
from aggregate_graph.streaming import PROGRESS_EVENT, ChatCall, DecidedAnswerModel, streams_tokens

# Keys LangChain adds to a structured-output call for tracing; they are not options of the candidate model.
_TRACING_KWARGS = ("ls_structured_output_format", "structured_output_format")
_GRAPHS_KEPT = 32  # compiled graphs kept per chat model, one per shape of call (tools, response format, options)
_JSON_FORMATS = ("json_object", "json_schema")
# A chat model's own constructor options (LangChain's standard params), bound to every candidate request
_CALL_OPTIONS = ("temperature", "max_tokens", "stop")
# Standard params that make a model: they apply to the models given by spec string
_SPEC_OPTIONS = ("api_key", "base_url")
# The call being run by an AggregatingChatModel's public method: the model, the call's config and its run id.
_CALL: ContextVar[tuple[Any, RunnableConfig, UUID] | None] = ContextVar("aggregating_chat_model_call", default=None)


def _call_shape(value: Any) -> str:
    """A call's options as a key: tools by their OpenAI schema (an agent rebinds equal tools every turn), anything
    else JSON has no spelling for by identity (the cached graph holds it, so its id is not reused meanwhile)."""
    if isinstance(value, dict) and isinstance(value.get("tools"), list):
        value = {**value, "tools": [t if isinstance(t, dict) else convert_to_openai_tool(t) for t in value["tools"]]}
    return json.dumps(value, sort_keys=True, default=lambda o: f"{type(o).__qualname__}@{id(o)}")


def _wants_json(options: dict[str, Any]) -> bool:
    """Whether the call asks the candidates for JSON content (`response_format` json_schema / json_object, as
    LangChain's provider strategy binds it): their parsed objects are then what is voted on."""
    response_format = options.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") in _JSON_FORMATS


@contextmanager
def _nested(config: RunnableConfig) -> Iterator[None]:
    """Runs the graph with this call's callbacks as the ambient ones too. Inside a parent graph's node (an
    agent's model node), LangGraph merges the node's callbacks with the graph's config, and a merge keeps the
    node's parent run, which would make the candidates siblings of this call in traces instead of its children."""
    ambient = var_child_runnable_config.get()
    if not ambient:
        yield
        return
    token = var_child_runnable_config.set({**ambient, "callbacks": config.get("callbacks")})
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def _policy_from_params(policy: CandidatePolicy | None, params: dict[str, Any]) -> CandidatePolicy | None:
    """The candidate policy with LangChain's standard `timeout` (seconds per attempt) and `max_retries` taken out
    of `params`; None when neither was given."""
    timeout, retries = params.pop("timeout", None), params.pop("max_retries", None)
    if timeout is None and retries is None:
        return None
    update: dict[str, Any] = {}
    if timeout is not None:
        update["timeout_s"] = timeout
    if retries is not None:
        update["max_attempts"] = retries + 1
    return (policy or CandidatePolicy()).model_copy(update=update)


class AggregatingChatModel(DecidedAnswerModel):
    """Answers every call with n candidates from `model` and an aggregator, through the prebuilt graph.

    `model` is a chat model, a bound one, a spec string ("openai:gpt-4o-mini", "local") or a list of them;
    how candidates are drawn and aggregated is an `AggregationOptions` (`options=`), or its fields as keyword
    arguments (`n=5, aggregator="ssa"`), as for `build_aggregate_graph`. A chat model's standard parameters
    apply to the candidates: `temperature`, `max_tokens` and `stop` are bound to every candidate request,
    `timeout` (seconds per attempt) and `max_retries` set the candidate `policy`. The returned AIMessage has the
    aggregated text (or the voted `tool_calls`), the sample set in
    `response_metadata["sample_set"]` and the summed usage.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any = Field(description="the candidates' chat model(s)")
    options: AggregationOptions = Field(default_factory=AggregationOptions, description="how to draw and aggregate")
    call_options: dict[str, Any] = Field(
        default_factory=dict, description="bound to every candidate request (temperature, max_tokens, stop)"
    )
    streaming: bool = Field(default=False, description="invoke streams the answer (LangChain's standard param)")
    store: BaseStore | None = Field(default=None, exclude=True)
    spec_kwargs: dict[str, Any] = Field(
        default_factory=dict, exclude=True, description="api_key / base_url for the models given by spec string"
    )
    _graphs: OrderedDict[str, CompiledStateGraph] = PrivateAttr(default_factory=OrderedDict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _graphs_built: int = PrivateAttr(default=0)

    def __init__(
        self,
        model: ModelSpec | Sequence[ModelSpec],
        n: int | None = None,
        *,
        options: AggregationOptions | None = None,
        **kwargs: Any,
    ) -> None:
        # the aggregation options (validated once, a named aggregator loaded once), the standard chat-model
        # params (the candidates' call options; timeout and retries are how candidates are drawn: `policy`), and
        # the chat model's own fields; anything else is a mistake, named
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in AggregationOptions.model_fields}
        if n is not None:
            fields["n"] = n
        call_options = dict(kwargs.pop("call_options", None) or {})
        call_options.update({k: kwargs.pop(k) for k in _CALL_OPTIONS if k in kwargs})
        if not call_options.get("stop"):
            call_options.pop("stop", None)
        policy = _policy_from_params(fields.get("policy") or (options.policy if options else None), kwargs)
        if policy is not None:
            fields["policy"] = policy
        spec_kwargs = {k: kwargs.pop(k) for k in _SPEC_OPTIONS if kwargs.get(k) is not None}
        models = model if isinstance(model, list | tuple) else [model]
        if spec_kwargs and not any(isinstance(m, str) for m in models):
            warnings.warn(
                f"{', '.join(spec_kwargs)}: for models given by name ('openai:gpt-4o-mini'); the chat model objects "
                "given keep their own",
                stacklevel=2,
            )
        kwargs["spec_kwargs"] = spec_kwargs
        for unknown in set(kwargs) - set(type(self).model_fields):  # refused by the options, with their message
            fields[unknown] = kwargs.pop(unknown)
        super().__init__(model=model, options=AggregationOptions.of(options, **fields), call_options=call_options,
                         **kwargs)  # fmt: skip

    @property
    def n(self) -> int:
        """Candidates per call (`options.n`)."""
        return self.options.n

    @model_validator(mode="after")
    def _resolve_models(self) -> AggregatingChatModel:
        """Spec strings load once, here; the options are checked by building the graph once."""
        models = self.model if isinstance(self.model, list | tuple) else [self.model]
        resolved = [m if isinstance(m, Runnable) else load_chat_model(m, **self.spec_kwargs) for m in models]
        self.model = resolved if isinstance(self.model, list | tuple) else resolved[0]
        if self.profile is None:  # what LangChain reads of a model (structured output support …) is the candidates'
            self.profile = Sampler(resolved[0]).model.profile
        self._graph(None, {})
        return self

    @property
    def graphs_built(self) -> int:
        """Graphs compiled so far: one per shape of call (the options bound to it), reused by later calls."""
        return self._graphs_built

    @property
    def model_name(self) -> str:
        """The (first) candidate model's name: what code that reads a chat model's name sees, e.g.
        `create_agent` choosing how to ask for structured output."""
        models = self.model if isinstance(self.model, list) else [self.model]
        return Sampler(models[0]).model_name

    @property
    def _llm_type(self) -> str:
        return "aggregating"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        models = self.model if isinstance(self.model, list) else [self.model]
        return {"models": [describe_model(m) for m in models], "n": self.n, "aggregator": self._aggregator_name}

    @property
    def _aggregator_name(self) -> str:
        aggregator = self.options.aggregator
        return getattr(aggregator, "name", None) or type(aggregator).__name__

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools to every candidate request (through the wrapped model's own `bind_tools`, so each provider
        converts them its way)."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=list(tools), **kwargs)

    def _options(self, stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        """This call's options for the candidate requests, over those bound at construction (`call_options`)."""
        options = {**self.call_options, **{k: v for k, v in kwargs.items() if k not in _TRACING_KWARGS}}
        if stop is not None:
            options["stop"] = stop
        return options

    def _candidate_models(self, options: dict[str, Any]) -> list[Runnable]:
        """The wrapped model(s) with this call's options bound: tools through their `bind_tools`, the rest as is."""
        options = dict(options)
        tools = options.pop("tools", None)
        models = self.model if isinstance(self.model, list) else [self.model]
        out = []
        for model in models:
            if tools is not None:
                if not hasattr(model, "bind_tools"):
                    raise TypeError(
                        f"tools were bound, but the candidate model {describe_model(model)} has no bind_tools"
                    )
                out.append(model.bind_tools(tools, **options))
            else:
                out.append(model.bind(**options) if options else model)
        return out

    def _graph(self, stop: list[str] | None, kwargs: dict[str, Any]) -> CompiledStateGraph:
        """The compiled graph for this call's options, built on the first call of their shape (~3 ms) and kept."""
        options = self._options(stop, kwargs)
        key = _call_shape(options)
        with self._lock:
            if (graph := self._graphs.get(key)) is not None:
                self._graphs.move_to_end(key)
                return graph
            graph = self._graphs[key] = self._build(options)
            self._graphs_built += 1
            while len(self._graphs) > _GRAPHS_KEPT:
                self._graphs.popitem(last=False)
            return graph

    def _build(self, options: dict[str, Any]) -> CompiledStateGraph:
        # checkpointer=False: the graph is this call's private work. Inside a parent graph's node it would
        # otherwise act as a subgraph and share the node's checkpoint namespace, so two calls from one node
        # would see each other's state.
        aggregation = AggregationOptions.of(self.options, aggregator=StructuredVote()) if _wants_json(options) else None
        return build_aggregate_graph(
            self._candidate_models(options),
            options=aggregation or self.options,
            store=self.store,
            checkpointer=False,
            name="aggregating_chat_model",
        )

    def _run(
        self, run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None, is_async: bool
    ) -> tuple[RunnableConfig, UUID | None]:
        """The graph's config for this call, and this call's run id (None when no callbacks are configured).

        The candidates' and the aggregator model's runs nest under this call in traces (a model run has no
        `get_child`; this is what it does for chains); "nostream" keeps their tokens out of a parent's
        `stream_mode="messages"`, where only this model's answer belongs. LangChain calls `_stream` without its
        run manager: the call's config and run id then come from `_CALL`, which this model's public methods set."""
        if run_manager is not None:
            handlers, tags = run_manager.inheritable_handlers, run_manager.inheritable_tags
            metadata, run_id = run_manager.inheritable_metadata, run_manager.run_id
        elif (call := _CALL.get()) is not None and call[0] is self:
            _, config, run_id = call
            configure = AsyncCallbackManager.configure if is_async else CallbackManager.configure
            manager = configure(
                config.get("callbacks"), self.callbacks, self.verbose, config.get("tags"), self.tags,
                config.get("metadata"), self.metadata,
            )  # fmt: skip
            handlers, tags, metadata = (
                manager.inheritable_handlers,
                manager.inheritable_tags,
                manager.inheritable_metadata,
            )
        else:
            return {"tags": [TAG_NOSTREAM]}, None
        # The caller's own handlers see one model call, as from any chat model (its usage is every candidate's);
        # tracers and token streams (`astream_events`) see the candidates' runs below it.
        handlers = [h for h in handlers if isinstance(h, BaseTracer) or streams_tokens(h)]
        children = (AsyncCallbackManager if is_async else CallbackManager)(handlers=[], parent_run_id=run_id)
        children.set_handlers(handlers)
        children.add_tags(tags)
        children.add_metadata(metadata)
        return {"callbacks": children, "tags": [TAG_NOSTREAM]}, run_id

    @contextmanager
    def _call(self, config: RunnableConfig | None) -> Iterator[RunnableConfig]:
        """This call's config with its run id fixed, published in `_CALL` while LangChain runs it."""
        config = ensure_config(config)
        run_id = config.get("run_id") or uuid4()
        token = _CALL.set((self, config, run_id))
        try:
            yield {**config, "run_id": run_id}
        finally:
            _CALL.reset(token)

    def invoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *, stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:  # fmt: skip
        with self._call(config) as config:
            return super().invoke(input, config, stop=stop, **kwargs)

    async def ainvoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *, stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:  # fmt: skip
        with self._call(config) as config:
            return await super().ainvoke(input, config, stop=stop, **kwargs)

    def stream(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *, stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:  # fmt: skip
        chunks, config = None, ensure_config(config)
        config = {**config, "run_id": config.get("run_id") or uuid4()}
        while True:  # `_CALL` is set while each chunk is made, never across a yield into the caller's code
            with self._call(config):
                chunks = chunks or super().stream(input, config, stop=stop, **kwargs)
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk

    async def astream(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *, stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:  # fmt: skip
        chunks, config = None, ensure_config(config)
        config = {**config, "run_id": config.get("run_id") or uuid4()}
        while True:
            with self._call(config):
                chunks = chunks or super().astream(input, config, stop=stop, **kwargs)
                chunk = await anext(chunks, None)
            if chunk is None:
                return
            yield chunk

    def _message(self, state: dict[str, Any]) -> AIMessage:
        """The graph's answer, named as a chat model's reply is (`model_name`): for the model(s) the candidates'
        replies name (a call's `model=` override too), else the configured one."""
        message: AIMessage = state["messages"][-1]
        sample_set: SampleSet = state["sample_set"]
        models = list(dict.fromkeys(c.model for c in sample_set.succeeded if c.model))
        metadata = {**message.response_metadata, "model_name": ", ".join(models) or self.model_name}
        return message.model_copy(update={"response_metadata": metadata})

    def _result(self, state: dict[str, Any]) -> ChatResult:
        sample_set: SampleSet = state["sample_set"]
        return ChatResult(
            generations=[ChatGeneration(message=self._message(state))],
            llm_output={"token_usage": sample_set.usage.model_dump(), "sample_set_id": sample_set.id},
        )

    @staticmethod
    def _progress(config: RunnableConfig, run_id: UUID | None) -> Callable[[Any], None]:
        """Where each candidate's report goes: this call's callbacks, as the custom event `PROGRESS_EVENT`
        (`astream_events`), and the stream of the LangGraph graph that called this model, if any
        (`stream_mode="custom"`: an agent's model node)."""
        callbacks, writer = config.get("callbacks"), _parent_stream_writer()

        def report(data: Any) -> None:
            if run_id is not None and isinstance(callbacks, CallbackManager):
                callbacks.on_custom_event(PROGRESS_EVENT, data, run_id=run_id)
            if writer is not None:
                writer(data)

        return report

    @staticmethod
    def _aprogress(config: RunnableConfig, run_id: UUID | None) -> Callable[[Any], Any]:
        callbacks, writer = config.get("callbacks"), _parent_stream_writer()

        async def report(data: Any) -> None:
            if run_id is not None and isinstance(callbacks, AsyncCallbackManager):
                await callbacks.on_custom_event(PROGRESS_EVENT, data, run_id=run_id)
            if writer is not None:
                writer(data)

        return report

    def _decide(self, call: ChatCall) -> ChatResult:
        """The candidates are drawn and aggregated, each reported as it lands (`_progress`); `stream` then says the
        decided answer as chunks that add up to what `invoke` returns (`DecidedAnswerModel`)."""
        graph, (config, run_id) = self._graph(call.stop, call.kwargs), self._run(call.run_manager, is_async=False)
        report, state = self._progress(config, run_id), None
        with _nested(config):
            for mode, data in stopping_stream(
                graph, {"messages": call.messages}, config, stream_mode=["custom", "values"]
            ):
                if mode == "custom":
                    report(data)
                else:
                    state = data
        assert state is not None  # the graph ends by aggregating, or raises
        return self._result(state)

    async def _adecide(self, call: ChatCall) -> ChatResult:
        graph, (config, run_id) = self._graph(call.stop, call.kwargs), self._run(call.run_manager, is_async=True)
        report, state = self._aprogress(config, run_id), None
        with _nested(config):
            stream = graph.astream({"messages": call.messages}, config, stream_mode=["custom", "values"])
            async for mode, data in stream:
                if mode == "custom":
                    await report(data)
                else:
                    state = data
        assert state is not None
        return self._result(state)


def _parent_stream_writer() -> Callable[[Any], None] | None:
    """The stream writer of the LangGraph graph whose node calls this model (an agent's model node), or None
    outside one."""
    try:
        return get_stream_writer()
    except (RuntimeError, KeyError):  # no runnable context; a context that is no graph's (an LCEL chain)
        return None
