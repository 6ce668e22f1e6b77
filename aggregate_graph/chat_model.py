"""`AggregatingChatModel`: a chat model that answers each call with an aggregation of n candidates.

It wraps any chat model and runs the prebuilt graph per call, so it drops in wherever code takes a chat
model: `langchain.agents.create_agent`, `langgraph.prebuilt.create_react_agent`, LCEL chains. Tools bound to
it are bound to every candidate request; when candidates call tools the graph votes on the plans and the
returned AIMessage carries the agreed `tool_calls`, so the tool node runs one plan. `with_structured_output`
goes through tool calling, so it votes on the parsed object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from langchain_core.tools import BaseTool
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from pydantic import ConfigDict, Field, model_validator

from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.graph import DEFAULT_FALLBACK, MAX_CANDIDATES, build_aggregate_graph
from aggregate_graph.models import ModelSpec, load_chat_model
from aggregate_graph.sample_set import Aggregation, SampleSet
from aggregate_graph.samplers import AdaptiveSampling, CandidatePolicy, describe_model

# Keys LangChain adds to a structured-output call for tracing; they are not options of the candidate model.
_TRACING_KWARGS = ("ls_structured_output_format", "structured_output_format")


class AggregatingChatModel(BaseChatModel):
    """Answers every call with n candidates from `model` and an aggregator, through the prebuilt graph.

    `model` is a chat model, a bound one, a spec string ("openai:gpt-4o-mini", "local") or a list of them;
    the other options are those of `build_aggregate_graph`. The returned AIMessage has the aggregated text
    (or the voted `tool_calls`), the sample set in `response_metadata["sample_set"]` and the summed usage.
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
    store: BaseStore | None = Field(default=None, exclude=True)

    def __init__(self, model: ModelSpec | Sequence[ModelSpec], n: int = 5, **options: Any) -> None:
        super().__init__(model=model, n=n, **options)

    @model_validator(mode="after")
    def _resolve_models(self) -> AggregatingChatModel:
        """Spec strings load once, here; the options are checked by building the graph once."""
        models = self.model if isinstance(self.model, list | tuple) else [self.model]
        resolved = [m if isinstance(m, Runnable) else load_chat_model(m) for m in models]
        self.model = resolved if isinstance(self.model, list | tuple) else resolved[0]
        self._graph(self.model)
        return self

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

    def _candidate_models(self, stop: list[str] | None, kwargs: dict[str, Any]) -> list[Runnable]:
        """The wrapped model(s) with this call's options bound: tools through their `bind_tools`, the rest as is."""
        options = {k: v for k, v in kwargs.items() if k not in _TRACING_KWARGS}
        if stop is not None:
            options["stop"] = stop
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

    def _graph(self, models: Runnable | list[Runnable]) -> CompiledStateGraph:
        # checkpointer=False: the graph is this call's private work. Inside a parent graph's node it would
        # otherwise act as a subgraph and share the node's checkpoint namespace, so two calls from one node
        # would see each other's state.
        return build_aggregate_graph(
            models,
            self.n,
            aggregator=self.aggregator,
            system_prompts=self.system_prompts,
            temperatures=self.temperatures,
            policy=self.policy,
            adaptive=self.adaptive,
            min_candidates=self.min_candidates,
            max_n=self.max_n,
            max_concurrency=self.max_concurrency,
            fallback=self.fallback,
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
        graph = self._graph(self._candidate_models(stop, kwargs))
        return self._result(graph.invoke({"messages": messages}, self._config(run_manager)))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        graph = self._graph(self._candidate_models(stop, kwargs))
        return self._result(await graph.ainvoke({"messages": messages}, self._config(run_manager)))
