"""`AggregationMiddleware`: aggregation for `langchain.agents.create_agent`, the LangChain v1 way.

Each model call of the agent becomes n candidates and a vote. The middleware's `wrap_model_call` hands the
rest of the chain the agent's own request with its model swapped for an `AggregatingChatModel` around it, so
the agent binds its tools, tool choice, model settings and response format to that as it would to the model
itself, and every candidate request carries them. The candidates are drawn by the prebuilt graph (one request
with `n` where the model honours it, retries, deadline, quorum); the agent gets one AIMessage back — the voted
text, the voted tool-call plan, or the voted structured response (parsed by the agent, as from any model) —
with the sample set in `response_metadata["sample_set"]`.

Put it last in `middleware=[...]`, innermost: it then aggregates whichever model the middleware around it
chose (`ModelFallbackMiddleware`'s fallback, a router's pick), and `ModelRetryMiddleware` outside it retries a
whole aggregation that failed its quorum. Hooks that run before or after the model (summarization, call
limits) see one model call per aggregation wherever it sits.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langgraph.store.base import BaseStore

from aggregate_graph.aggregating_chat_model import AggregatingChatModel
from aggregate_graph.options import AggregationOptions

_MODELS_KEPT = 16  # aggregating wrappers kept, one per model the agent's requests name


class AggregationMiddleware(AgentMiddleware):
    """Answers each of the agent's model calls with `n` candidates from the request's own model, aggregated.

    The options are an `AggregationOptions` (`options=`) or its fields as keyword arguments, as for
    `build_aggregate_graph` and `AggregatingChatModel`, checked here, at construction: a bad one fails when the
    agent is built, not on its first question.

    ```python
    agent = create_agent(model, tools, middleware=[ModelRetryMiddleware(), AggregationMiddleware(n=5)])
    ```
    """

    def __init__(
        self,
        n: int | None = None,
        *,
        options: AggregationOptions | None = None,
        store: BaseStore | None = None,
        **fields: Any,
    ) -> None:
        super().__init__()
        # validated here, a named aggregator loaded once: every model's aggregating wrapper shares it (one SSA)
        self.options = AggregationOptions.of(options, **({"n": n} if n is not None else {}), **fields)
        self.store = store
        self._models: OrderedDict[int, tuple[BaseChatModel, AggregatingChatModel]] = OrderedDict()
        self._lock = threading.Lock()

    def aggregating(self, model: BaseChatModel) -> AggregatingChatModel:
        """The aggregating chat model around `model`, made once per model and kept: its compiled graphs serve
        every later call (an agent's request names the same model object each turn)."""
        if isinstance(model, AggregatingChatModel):
            return model  # already aggregating (the agent's own model): never n × n candidates
        with self._lock:
            kept = self._models.get(id(model))
            if kept is not None and kept[0] is model:
                self._models.move_to_end(id(model))
                return kept[1]
            wrapper = AggregatingChatModel(model, options=self.options, store=self.store)
            self._models[id(model)] = (model, wrapper)
            while len(self._models) > _MODELS_KEPT:
                self._models.popitem(last=False)
            return wrapper

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        return handler(request.override(model=self.aggregating(request.model)))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(request.override(model=self.aggregating(request.model)))


__all__ = ["AggregationMiddleware"]
