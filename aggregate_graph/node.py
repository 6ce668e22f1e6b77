"""`AggregateNode`: the prebuilt graph as one node for any StateGraph whose state has `messages`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from aggregate_graph.drawing.models import ModelSpec
from aggregate_graph.drawing.settings import Sampler
from aggregate_graph.graph import build_aggregate_graph


class AggregateNode(Runnable[Any, dict[str, Any]]):
    """Answers the parent state's conversation with n candidates and an aggregator.

    `model` may be bound (`llm.bind_tools(tools)`, `.with_config(...)`): every candidate request carries the
    tools, and when candidates call them the node returns the voted `tool_calls`, so it can be the agent node
    of a tool loop (`tools_condition` → `ToolNode` → back). Candidates see the whole conversation, tool calls
    and results included, except trailing AI messages: placed after a tool loop, the node writes the final
    answer from the tool results rather than continuing the agent's draft.

    Returns `{"messages": [AIMessage]}`; the AIMessage's `response_metadata["sample_set"]` holds the sample
    set (load it with `SampleSet.model_validate`). It runs the prebuilt graph as a subgraph, so the parent's
    checkpointer, store and stream (`subgraphs=True`, or `stream_mode="custom"` for candidate progress)
    apply to it. Keyword arguments are those of `build_aggregate_graph` (`options=` or its fields).
    """

    def __init__(
        self, model: ModelSpec | Sampler | Sequence[ModelSpec | Sampler], n: int | None = None, **kwargs: Any
    ) -> None:
        if "checkpointer" in kwargs or "store" in kwargs:
            raise TypeError("AggregateNode uses the parent graph's checkpointer and store; pass them to its compile()")
        self.graph = build_aggregate_graph(model, n, **kwargs)
        self.name = kwargs.get("name", "aggregate")

    def bind_tools(self, *args: Any, **kwargs: Any) -> Any:
        """What agent builders call on a chat model: say which class is the chat model."""
        raise TypeError(
            "AggregateNode is a graph node, not a chat model: give an agent AggregatingChatModel(model, n=...) as its "
            "model, or make this node the agent node with AggregateNode(model.bind_tools(tools), n=...)"
        )

    @staticmethod
    def _messages(state: Any) -> dict[str, Any]:
        messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
        if messages is None:
            raise ValueError("AggregateNode needs a state with `messages`")
        return {"messages": list(messages)}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        out = self.graph.invoke(self._messages(input), config, **kwargs)
        return {"messages": [out["messages"][-1]]}

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        out = await self.graph.ainvoke(self._messages(input), config, **kwargs)
        return {"messages": [out["messages"][-1]]}
