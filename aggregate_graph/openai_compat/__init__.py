"""The OpenAI surface: `wrap_openai` patches an `openai` client's chat completions and Responses API to answer with
aggregations. The proxy (`aggregate-graph proxy`), which serves the same over the OpenAI HTTP API, is part of the
serving layer: `aggregate_graph.openai_compat.proxy`.

    request.py, responses_request.py   a chat-completions / Responses call read as an aggregation plan (what goes
                                       to the candidates, what controls the aggregation, what is refused)
    client_model.py, responses_model.py
                                       the candidates' chat models, over the client's own (unwrapped) methods
    engine.py                          plan → the prebuilt graph → the API's answer, one compiled graph per shape
    chat_output.py, responses_output.py
                                       sample sets as a `ChatCompletion` (or chunks) / a `Response` (or events)
    quorum_errors.py                   total failure as the upstream's `openai` exception
    wrap.py, entry_points.py           the patch points: `create`, `parse`, and what is refused
"""

from aggregate_graph.openai_compat.chat_output import sample_sets_from
from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
from aggregate_graph.openai_compat.quorum_errors import QuorumAPIError
from aggregate_graph.openai_compat.request import RequestAggregation, RequestError
from aggregate_graph.openai_compat.wrap import wrap_openai

__all__ = [
    "OpenAIClientChatModel",
    "QuorumAPIError",
    "RequestAggregation",
    "RequestError",
    "sample_sets_from",
    "wrap_openai",
]
