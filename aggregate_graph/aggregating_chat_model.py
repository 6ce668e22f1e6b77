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
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.structured import StructuredVote
from aggregate_graph.answer_types import check_answer_type
from aggregate_graph.draw_settings import AdaptiveSampling, CandidatePolicy, Sampler, describe_model
from aggregate_graph.graph import DEFAULT_FALLBACK, MAX_CANDIDATES, build_aggregate_graph
from aggregate_graph.models import ModelSpec, load_chat_model
from aggregate_graph.registry import resolve_aggregator
from aggregate_graph.sample_set import Aggregation, SampleSet

# Keys LangChain adds to a structured-output call for tracing; they are not options of the candidate model.
_TRACING_KWARGS = ("ls_structured_output_format", "structured_output_format")
_GRAPHS_KEPT = 32  # compiled graphs kept per chat model, one per shape of call (tools, response format, options)
_JSON_FORMATS = ("json_object", "json_schema")


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


class AggregatingChatModel(BaseChatModel):
    """Answers every call with n candidates from `model` and an aggregator, through the prebuilt graph.

    `model` is a chat model, a bound one, a spec string ("openai:gpt-4o-mini", "local") or a list of them;
    the other options are those of `build_aggregate_graph` (the aggregator, too, may be a name: "ssa"). The
    returned AIMessage has the aggregated text (or the voted `tool_calls`), the sample set in
    `response_metadata["sample_set"]` and the summed usage.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any = Field(description="the candidates' chat model(s)")
    n: int = 5
    aggregator: Runnable[SampleSet, Aggregation] | None = None
    system_prompts: list[str | None] | None = None
    temperatures: list[float | None] | None = None
    policy: CandidatePolicy | None = None
    adaptive: AdaptiveSampling | None = None
    min_candidates: int = 1
    max_n: int = MAX_CANDIDATES
    max_concurrency: int = 64
    fallback: Runnable[SampleSet, Aggregation] | None = DEFAULT_FALLBACK
    answer_type: Any = Field(default="auto", description="how each candidate's answer is read (`answer_types`)")
    store: BaseStore | None = Field(default=None, exclude=True)
    _graphs: OrderedDict[str, CompiledStateGraph] = PrivateAttr(default_factory=OrderedDict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _graphs_built: int = PrivateAttr(default=0)

    def __init__(self, model: ModelSpec | Sequence[ModelSpec], n: int = 5, **options: Any) -> None:
        super().__init__(model=model, n=n, **options)

    @field_validator("aggregator", "fallback", mode="before")
    @classmethod
    def _resolve_aggregator(cls, value: Any, info: ValidationInfo) -> Any:
        # a name loads here, once, not per compiled graph: the shipped SSA's model is loaded by one instance
        return resolve_aggregator(value, info.field_name or "aggregator")

    @field_validator("answer_type")
    @classmethod
    def _check_answer_type(cls, value: Any) -> Any:
        return check_answer_type(value)

    @model_validator(mode="after")
    def _resolve_models(self) -> AggregatingChatModel:
        """Spec strings load once, here; the options are checked by building the graph once."""
        models = self.model if isinstance(self.model, list | tuple) else [self.model]
        resolved = [m if isinstance(m, Runnable) else load_chat_model(m) for m in models]
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
        if self.aggregator is None:
            return MajorityVote.name
        return getattr(self.aggregator, "name", None) or type(self.aggregator).__name__

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

    @staticmethod
    def _options(stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        """This call's options for the candidate requests."""
        options = {k: v for k, v in kwargs.items() if k not in _TRACING_KWARGS}
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
        return build_aggregate_graph(
            self._candidate_models(options),
            self.n,
            aggregator=StructuredVote() if _wants_json(options) else self.aggregator,
            system_prompts=self.system_prompts,
            temperatures=self.temperatures,
            policy=self.policy,
            adaptive=self.adaptive,
            min_candidates=self.min_candidates,
            max_n=self.max_n,
            max_concurrency=self.max_concurrency,
            fallback=self.fallback,
            answer_type=self.answer_type,
            store=self.store,
            checkpointer=False,
            name="aggregating_chat_model",
        )

    @staticmethod
    def _config(run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None) -> RunnableConfig:
        # The candidates' and the aggregator model's runs nest under this call in traces (a model run has no
        # `get_child`; this is what it does for chains); "nostream" keeps their tokens out of a parent's
        # `stream_mode="messages"`, where only this model's answer belongs.
        if run_manager is None:
            return {"tags": [TAG_NOSTREAM]}
        manager = AsyncCallbackManager if isinstance(run_manager, AsyncCallbackManagerForLLMRun) else CallbackManager
        children = manager(handlers=[], parent_run_id=run_manager.run_id)
        children.set_handlers(run_manager.inheritable_handlers)
        children.add_tags(run_manager.inheritable_tags)
        children.add_metadata(run_manager.inheritable_metadata)
        return {"callbacks": children, "tags": [TAG_NOSTREAM]}

    @staticmethod
    def _result(state: dict[str, Any]) -> ChatResult:
        message: AIMessage = state["messages"][-1]
        sample_set: SampleSet = state["sample_set"]
        return ChatResult(
            generations=[ChatGeneration(message=message)],
            llm_output={"token_usage": sample_set.usage.model_dump(), "sample_set_id": sample_set.id},
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        graph, config = self._graph(stop, kwargs), self._config(run_manager)
        with _nested(config):
            return self._result(graph.invoke({"messages": messages}, config))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        graph, config = self._graph(stop, kwargs), self._config(run_manager)
        with _nested(config):
            return self._result(await graph.ainvoke({"messages": messages}, config))
