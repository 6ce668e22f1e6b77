"""The example math-tutor graph, with candidates from a real OpenAI-compatible server."""

from langchain_core.messages import HumanMessage

from examples.math_tutor import build
from tests.conftest import chat


def test_math_tutor_answers_and_reports_its_confidence(serve):
    server = serve(["15% of 80 is 12. The answer is 12.", "The answer is 12.", "The answer is 11."])
    graph = build(chat(server), n=3)
    out = graph.invoke({"messages": [HumanMessage("What is 15% of 80?")]}, {"configurable": {"thread_id": "s"}})
    assert out["confidence"] == 2 / 3
    assert out["messages"][-1].content == "(67% of 3 attempts agree on 12.)"
    assert server.requests[0]["messages"][0]["role"] == "system"
