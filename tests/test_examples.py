"""Every example in examples/, run through its main (or build) against real OpenAI-compatible test servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from aggregate_graph import SampleSet, checkpoint_serde
from aggregate_graph.aggregators.trained import SHIPPED_SSA
from examples import math_tutor, openai_script, proxy_client, react_agent, trained_aggregator
from tests.conftest import chat

# --- the math tutor ---------------------------------------------------------------------------------------------

SOLUTIONS = {  # three candidates per problem, by a phrase of the question
    "15% of 80": [
        "15% of 80 is 0.15 * 80.\n0.15 * 80 = 12.\nThe answer is 12.",
        "10% of 80 is 8 and 5% is 4.\n8 + 4 = 12.\nThe answer is 12.",
        "15% of 80 is 0.15 * 80 = 11.\nThe answer is 11.",
    ],
    "7 times 6": ["7 * 6 = 42.\nThe answer is 42."] * 3,
    "9 * 8 + 4": ["First multiply: 9 * 8 = 72.\nThen add 4: 72 + 4 = 76.\nThe answer is 76."] * 3,
}
SMALL_TALK = ["You're welcome! Happy to help.", "You're welcome!", "Any time, keep practising!"]


def tutor_reply(body: dict[str, Any], sample_no: int) -> str:
    """The scripted model: solutions under the solving prompt, small talk (no answer in it) under the chat one."""
    system = body["messages"][0]["content"]
    question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    if system == math_tutor.SOLVE_PROMPT:
        return next((r[sample_no % 3] for key, r in SOLUTIONS.items() if key in question), "I am not sure.")
    assert system == math_tutor.CHAT_PROMPT
    return SMALL_TALK[sample_no % 3]


class Student:
    """One thread of the tutor graph: `say` runs a turn and returns the tutor's new messages."""

    def __init__(self, graph: Any, thread: str) -> None:
        self.graph, self.config, self.state = graph, {"configurable": {"thread_id": thread}}, {}

    def say(self, text: str) -> list[AIMessage]:
        seen = {m.id for m in self.state.get("messages", [])}
        self.state = self.graph.invoke({"messages": [HumanMessage(text)]}, self.config)
        return [m for m in self.state["messages"] if m.id not in seen and isinstance(m, AIMessage)]


def aggregation(message: AIMessage) -> Any:
    return SampleSet.model_validate(message.response_metadata["sample_set"]).aggregation


def test_tutor_greets_answers_with_confidence_hints_checks_and_chats(serve):
    server = serve(tutor_reply)
    graph = math_tutor.build(chat(server), n=3, checkpointer=InMemorySaver(serde=checkpoint_serde()))
    ada = Student(graph, "ada")

    [greeting] = ada.say("Hi!")
    assert greeting.content == math_tutor.GREETING and server.calls == 0  # a greeting costs no model call

    answer, note = ada.say("What is 15% of 80?")
    assert aggregation(answer).method == "majority" and aggregation(answer).answer == "12"
    assert note.content == "I'm fairly sure: 2 of 3 attempts agree on 12 (67%). Other answers: 11 (1)."
    assert ada.state["confidence"] == 2 / 3 and ada.state["problem"] == "What is 15% of 80?"
    assert server.requests[-1]["messages"][0]["content"] == math_tutor.SOLVE_PROMPT

    calls = server.calls
    assert [m.content for m in ada.say("hint")] == ["Hint 1: 15% of 80 is 0.15 * 80."]
    [second] = ada.say("Can I have another hint?")
    assert second.content == "Hint 2: 0.15 * 80 = ?." and "12" not in second.content  # the answer is masked
    assert "short of the answer" in ada.say("hint")[0].content
    assert server.calls == calls  # hints come from the recorded solution, not from new calls

    [wrong] = ada.say("I got 11")
    assert wrong.content.startswith("Not quite: I don't get 11.") and "1 of my 3 attempts did too" in wrong.content
    [right] = ada.say("Is it 12?")
    assert right.content == "Yes, 12 is right! 2 of my 3 attempts got it too."
    [also_right] = ada.say("my answer is 12.0")
    assert also_right.content.startswith("Yes")  # `equivalent`, not string equality
    assert server.calls == calls

    [thanks] = ada.say("Thanks!")
    assert thanks.content in SMALL_TALK and aggregation(thanks).method == "medoid"  # nothing to vote on
    assert server.requests[-1]["messages"][0]["content"] == math_tutor.CHAT_PROMPT
    assert ada.state["problem"] == "What is 15% of 80?"  # small talk records no problem

    answer, note = ada.say("What is 7 times 6?")
    assert aggregation(answer).method == "majority" and aggregation(answer).answer == "42"
    assert note.content == "I'm very sure: 3 of 3 attempts agree on 42 (100%)."
    # the thread is remembered: the candidates saw the whole conversation, and the checkpointer kept the state
    seen = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert seen == ["Hi!", "What is 15% of 80?", "hint", "Can I have another hint?", "hint", "I got 11",
                    "Is it 12?", "my answer is 12.0", "Thanks!", "What is 7 times 6?"]  # fmt: skip
    assert graph.get_state(ada.config).values["answer"] == "42"

    bo = Student(graph, "bo")  # another thread: greeted afresh, and none of Ada's conversation
    greeting, answer, _ = bo.say("What is 7 times 6?")
    assert greeting.content == math_tutor.GREETING and aggregation(answer).answer == "42"
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["system", "user"]
    _, nothing_yet = Student(graph, "cy").say("I got 5")
    assert nothing_yet.content.startswith("Which problem")


def test_a_hint_on_a_new_problem_solves_it_without_showing_the_answer(serve):
    server = serve(tutor_reply)
    graph = math_tutor.build(chat(server), n=3, checkpointer=InMemorySaver(serde=checkpoint_serde()))
    dee = Student(graph, "dee")
    dee.say("Hello")
    [hint] = dee.say("Can I get a hint on 9 * 8 + 4?")
    assert hint.content == "Hint 1: First multiply: 9 * 8 = 72."
    assert not any("76" in str(m.content) for m in dee.state["messages"])  # the solution left the transcript
    assert dee.state["answer"] == "76" and dee.state["confidence"] == 1.0
    assert dee.say("hint")[0].content == "Hint 2: Then add 4: 72 + 4 = ?."
    assert dee.say("I got 76")[0].content.startswith("Yes, 76 is right!")
    # no candidate answers: their reply stands, and no hint comes from the previous problem
    assert [m.content for m in dee.say("A hint on 3 * 5 + 1 please")] == ["I am not sure."]
    assert dee.state["answer"] == "76"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Hi!", "chat"),
        ("Thanks!", "chat"),
        ("I got lost", "chat"),
        ("What is 15% of 80?", "solve"),
        ("What is the square root of a million", "solve"),
        ("hint", "hint"),
        ("I'm stuck, a hint please", "hint"),
        ("hint for step 2", "hint"),
        ("Can I get a hint on 9 * 8 + 4?", "hint+solve"),
        ("I got 12", "check"),
        ("is it 1/2?", "check"),
        ("It's 12 dollars.", "check"),
        ("I got 12 apples and ate 3, how many are left?", "solve"),
    ],
)
def test_tutor_routes_by_rules(text, kind):
    assert math_tutor.intent(text) == kind


def test_tutor_main_runs_its_turns_in_one_thread(serve, capsys):
    server = serve(tutor_reply)
    state = math_tutor.main(["Hi!", "What is 15% of 80?", "hint", "Is it 12?", "--base-url", server.base_url])
    out = capsys.readouterr().out
    assert "student> What is 15% of 80?" in out and "tutor>   I'm fairly sure: 2 of 3 attempts agree on 12" in out
    assert "tutor>   Hint 1: 15% of 80 is 0.15 * 80." in out and "tutor>   Yes, 12 is right!" in out
    assert len([m for m in state["messages"] if isinstance(m, HumanMessage)]) == 4
    assert server.calls == 1


# --- the tool-calling agent ------------------------------------------------------------------------------------


def test_react_agent_runs_the_voted_tool_call_once(capsys):
    out = react_agent.main([])
    plan, result, final = out["messages"][1:]
    assert plan.tool_calls[0]["name"] == "multiply" and plan.tool_calls[0]["args"] == {"a": 6, "b": 7}
    assert sorted(aggregation(plan).votes.values()) == [1.0, 2.0]  # two candidates right, one slipped
    assert isinstance(result, ToolMessage) and result.content == "42"
    assert [m for m in out["messages"] if isinstance(m, ToolMessage)] == [result]  # the tool ran once
    assert final.content == "6 times 7 is 42." and aggregation(final).votes == {"42": 3.0}
    printed = capsys.readouterr().out
    assert "ai:    calls multiply(a=6, b=7)   [votes: multiply(a=6, b=7) 2, multiply(a=6, b=8) 1]" in printed
    assert "tool:  multiply -> 42" in printed and "the tool ran 1 time(s)" in printed


def test_react_agent_against_a_given_server(serve):
    server = serve(react_agent.scripted_reply)
    out = react_agent.main(["What is 12 times 13?", "--n", "5", "--base-url", server.base_url])
    assert out["messages"][1].tool_calls[0]["args"] == {"a": 12, "b": 13} and out["messages"][2].content == "156"
    assert server.calls == 2 and all(r["n"] == 5 and r["tools"] for r in server.requests)  # tools on every draw
    assert server.requests[1]["messages"][-1]["role"] == "tool"


# --- the OpenAI surface ----------------------------------------------------------------------------------------


def test_openai_script_answers_with_the_vote(serve, capsys):
    response = openai_script.main([])
    assert response.choices[0].message.content == openai_script.SCRIPTED[0]
    assert "votes: {'42': 3.0, '41': 1.0, '48': 1.0}" in capsys.readouterr().out
    server = serve(openai_script.SCRIPTED)
    openai_script.main(["--base-url", server.base_url, "--n", "3"])
    assert server.calls == 1 and server.requests[0]["n"] == 3  # n candidates in one request


def test_proxy_client_uses_an_unmodified_openai_client(capsys):
    out = proxy_client.main([])
    assert "majority/test-model" in out["models"] and "ssa/test-model" in out["models"]
    assert out["sample_set"].aggregation.answer == "12" and out["sample_set"].aggregation.votes["12"] == 3.0
    assert out["response"].choices[0].message.content == proxy_client.SCRIPTED[0]
    assert out["streamed"] == proxy_client.SCRIPTED[0]  # streamed, the same aggregated answer
    assert "(3 of 5 candidates agree)" in capsys.readouterr().out


# --- the trained aggregator ------------------------------------------------------------------------------------


def test_trained_aggregator_over_a_served_ssa(serve, capsys):
    ssa = serve(["B"])  # option B: 82, the plurality's answer; A is the vote's 72
    sample_set = trained_aggregator.main(["--base-url", ssa.base_url])
    agg = sample_set.aggregation
    # The three 82s slip (48 + 24 = 82): the shipped weights count slipped work least, so the vote the model is
    # shown puts 72 first. A server without log-probabilities gives no confidence, and the shipped calibration
    # weighs the vote beside the model: the letter is recorded, and the vote decides.
    assert json.loads((SHIPPED_SSA / "aggregator.json").read_text())["vote_weight"] > 0
    assert agg.method == "ssa" and agg.details["raw_output"] == "B" and agg.details["deferred"] is True
    assert agg.answer == "72" and agg.support == [1, 3] and agg.details["confidence"] is None
    request = ssa.requests[0]
    prompt = request["messages"][-1]["content"]
    assert trained_aggregator.QUESTION[:40] in prompt and "Final: 82" in prompt  # the shipped SSA's rendering
    assert "A) 72: solutions 2, 4 (2 of 5, weighted 91%" in prompt and "B) 82: solutions 1, 3, 5 (3 of 5" in prompt
    limit = request.get("max_completion_tokens", request.get("max_tokens"))  # langchain-openai sends the former
    assert limit == 1 and request["logprobs"] is True  # one letter, and its probabilities
    printed = capsys.readouterr().out
    assert "SSA picks:     72 (right)" in printed and "majority vote: 82 (wrong)" in printed


@pytest.mark.slow
def test_trained_aggregator_with_the_shipped_ssa(smollm2_dir: Path, monkeypatch, capsys):
    monkeypatch.setenv("AGGREGATE_GRAPH_CACHE", str(smollm2_dir.parent))
    sample_set = trained_aggregator.main([])
    agg = sample_set.aggregation
    assert agg.method == "ssa" and agg.details["parse_status"] in ("parsed", "deferred")
    assert set(agg.details["choice_probs"]) == {"72", "82"}
    assert agg.answer in {"72", "82"}  # one of the candidates' answers; which one is reported, not asserted
    assert "SSA picks:" in capsys.readouterr().out
