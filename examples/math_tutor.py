"""A multi-turn math tutor: the user's own StateGraph, with AggregateNodes as its answering steps.

    python examples/math_tutor.py                                   # a scripted conversation, embedded SmolLM2
    python examples/math_tutor.py "What is 15% of 80?" "hint" "I got 12" "Thanks!"
    python examples/math_tutor.py "What is 15% of 80?" --model gpt-4o-mini --base-url https://api.openai.com/v1

Each argument is one student turn, all in one thread (an InMemorySaver checkpointer keeps it). The tutor greets
on the first turn, answers math questions with n candidates and majority vote and says how sure it is from the
votes, gives hints (the winning solution's steps, one per "hint", the final answer masked), checks the student's
own answer ("I got 12", "is it 12?") against the aggregated one with `equivalent`, and answers small talk
("Thanks!") through the same kind of node: no candidate states an answer there, so the graph falls back to the
medoid reply. Routing is rule-based (regular expressions): no model call decides where a turn goes.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict  # pydantic builds Studio's JSON schemas from it before Python 3.12

from aggregate_graph import AggregateNode, SampleSet, checkpoint_serde, extract_answer
from aggregate_graph.drawing.models import LOCAL_PREFIXES, load_chat_model
from aggregate_graph.reading.answers import equivalent

SOLVE_PROMPT = (
    "You are a patient math tutor. Solve the student's problem step by step, one short step per line, "
    "and end with a last line 'The answer is' followed by the final number."
)
CHAT_PROMPT = "You are a friendly math tutor. Reply to the student in one or two short sentences."
GREETING = (
    "Hi! I'm your math tutor. Ask me a problem and I'll solve it and tell you how sure I am; say \"hint\" "
    'for one step at a time, or tell me your answer ("I got 12") and I\'ll check it.'
)

HINT = re.compile(r"\b(?:hints?|clues?|nudge|stuck|where\s+do\s+i\s+start|how\s+do\s+i\s+start)\b", re.I)
CHECK = re.compile(
    r"^\W*(?:so\s+|then\s+|ok\s+|okay\s+)?"
    r"(?:i\s+(?:got|get|have|think\s+it'?s|think\s+the\s+answer\s+is)|my\s+answer\s+is|is\s+it|is\s+the\s+answer|"
    r"the\s+answer\s+is|it'?s|answer\s*:)"
    r"\s*(?P<answer>[^\s?!]+(?:\s+[^\s?!]+){0,2}?)\s*[?.!]*\s*$",
    re.I,
)
MATH_WORDS = re.compile(
    r"[+*/^=×÷%]|\b(?:plus|minus|times|divided|sum|product|difference|quotient|percent|solve|calculate|"
    r"compute|how\s+many|how\s+much|equation|fraction|square|root|area|perimeter|average)\b",
    re.I,
)
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
FINAL_LINE = re.compile(r"answer\s+is|####|\\boxed|^\s*final\b", re.I)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class TutorState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    problem: str | None  # the problem being worked on
    answer: str | None  # its aggregated answer
    votes: dict[str, float]  # the vote that chose it
    agree: int  # candidates that stated `answer`
    attempts: int  # candidates that succeeded (an answerless one counts against agreement)
    confidence: float  # agree / attempts
    steps: list[str]  # the winning solution's steps before the answer, the answer masked
    hints_given: int


class TutorInput(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


# --- rule-based routing ---------------------------------------------------------------------------------------


def last_human_text(state: TutorState) -> str:
    for message in reversed(state.get("messages") or []):
        if isinstance(message, HumanMessage):
            return message.text.strip()
    return ""


def student_answer(text: str) -> str | None:
    """The answer in "I got 12" / "is it 12?" / "my answer is 1/2", or None when the turn is not one."""
    match = CHECK.match(text)
    if match is None:
        return None
    said = match["answer"].rstrip(".,;:")
    return said if extract_answer(said) is not None else None


def is_new_problem(text: str) -> bool:
    """A problem stated along with a hint request: two numbers, or an operator or a math word besides a number."""
    rest = HINT.sub(" ", text)
    numbers = NUMBER.findall(rest)
    return len(numbers) >= 2 or (bool(numbers) and MATH_WORDS.search(rest) is not None)


def intent(text: str) -> str:
    """The turn's kind: "hint", "hint+solve" (a hint on a new problem), "check", "solve" or "chat"."""
    if HINT.search(text):
        return "hint+solve" if is_new_problem(text) else "hint"
    if student_answer(text) is not None:
        return "check"
    return "solve" if re.search(r"\d", text) or MATH_WORDS.search(text) else "chat"


def first_turn(state: TutorState) -> bool:
    return not any(isinstance(m, AIMessage) for m in state.get("messages") or [])


def route_turn(state: TutorState) -> str:
    if first_turn(state):
        return "greet"
    return after_greeting(state, greeted=False)


def after_greeting(state: TutorState, greeted: bool = True) -> str:
    kind = intent(last_human_text(state))
    if kind == "chat":
        return END if greeted else "chat"  # the greeting is the reply to a first "Hi!"
    return {"hint+solve": "solve", "hint": "hint", "check": "check", "solve": "solve"}[kind]


def after_assess(state: TutorState) -> str:
    # a hint request whose solution was recorded (and taken out of the transcript) gets its first hint; one whose
    # candidates found no answer keeps their reply
    solved_quietly = isinstance(state["messages"][-1], HumanMessage)
    return "hint" if intent(last_human_text(state)) == "hint+solve" and solved_quietly else END


# --- reading the votes ------------------------------------------------------------------------------------------


def how_sure(agree: int, attempts: int, answer: str) -> str:
    """How sure the vote makes the tutor: the share of the candidates that agree on the answer."""
    share = agree / attempts if attempts else 0.0
    word = "very sure" if share >= 0.8 else "fairly sure" if share > 0.5 else "not sure"
    return f"I'm {word}: {agree} of {attempts} attempts agree on {answer} ({share:.0%})."


def mask(step: str, answer: str) -> str:
    """The step with every number equal to the final answer replaced by '?'."""
    return NUMBER.sub(lambda m: "?" if equivalent(m.group().replace(",", ""), answer) else m.group(), step)


def solution_steps(text: str, answer: str) -> list[str]:
    """The steps of a solution before its final-answer line, one per line (or per sentence), answer masked."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        lines = [s.strip() for s in SENTENCE_END.split(text) if s.strip()]
    return [mask(line, answer) for line in lines if not FINAL_LINE.search(line)]


# --- nodes ------------------------------------------------------------------------------------------------------


def greet(state: TutorState) -> dict[str, Any]:
    return {"messages": [AIMessage(GREETING)]}


def assess(state: TutorState) -> dict[str, Any]:
    """After the solver: record the problem, its answer and its steps, and say how sure the vote is. A turn whose
    candidates stated no answer (the medoid reply) records nothing. On a hint request the solution is taken out
    of the transcript: the student gets the hint, not the answer."""
    reply = state["messages"][-1]
    sample_set = SampleSet.model_validate(reply.response_metadata["sample_set"])
    agg = sample_set.aggregation
    if agg is None or agg.answer is None:
        return {}
    attempts = len(sample_set.succeeded)
    agree = len(agg.support)
    by_index = {c.index: c for c in sample_set.candidates}
    steps: list[str] = []
    for index in agg.support:  # the winning text first, then the other candidates that agree with it
        steps = solution_steps(by_index[index].text, agg.answer)
        if steps:
            break
    record = {
        "problem": sample_set.question,
        "answer": agg.answer,
        "votes": agg.votes,
        "agree": agree,
        "attempts": attempts,
        "confidence": agree / attempts if attempts else 0.0,
        "steps": steps,
        "hints_given": 0,
    }
    if intent(last_human_text(state)) == "hint+solve":
        return {**record, "messages": [RemoveMessage(id=reply.id)]}
    others = ", ".join(f"{a} ({v:g})" for a, v in agg.votes.items() if not equivalent(a, agg.answer))
    note = how_sure(agree, attempts, agg.answer) + (f" Other answers: {others}." if others else "")
    return {**record, "messages": [AIMessage(note)]}


def hint(state: TutorState) -> dict[str, Any]:
    if state.get("answer") is None:
        return {"messages": [AIMessage("Tell me the problem first and I'll give you a hint.")]}
    steps, given = state.get("steps") or [], state.get("hints_given", 0)
    if given >= len(steps):
        text = "That's every step I can give short of the answer itself: finish it and tell me what you got."
        return {"messages": [AIMessage(text)]}
    return {"messages": [AIMessage(f"Hint {given + 1}: {steps[given]}")], "hints_given": given + 1}


def check(state: TutorState) -> dict[str, Any]:
    said = student_answer(last_human_text(state)) or ""
    answer = state.get("answer")
    if answer is None:
        return {"messages": [AIMessage("Which problem is that for? Ask me one first, then tell me your answer.")]}
    mine = extract_answer(said) or said
    agree, attempts = state.get("agree", 0), state.get("attempts", 0)
    if equivalent(mine, answer):
        text = f"Yes, {said} is right! {agree} of my {attempts} attempts got it too."
    else:
        backing = sum(v for a, v in (state.get("votes") or {}).items() if equivalent(a, mine))
        text = f"Not quite: I don't get {said}."
        if backing:
            text += f" {backing:g} of my {attempts} attempts did too, so look for the slip we share."
        text += ' Say "hint" for a step.'
    if state.get("confidence", 0.0) <= 0.5:
        text += f" Mind you, I'm not sure of my own answer: only {agree} of my {attempts} attempts agree on it."
    return {"messages": [AIMessage(text)]}


def build(
    model: Any, n: int = 3, *, checkpointer: BaseCheckpointSaver | None = None, name: str = "math_tutor"
) -> CompiledStateGraph:
    """The tutor graph. `model` is a chat model or a spec string ("local", "openai:gpt-4o-mini"). Compile it with a
    checkpointer to keep threads (main does); LangGraph's server (langgraph dev, Studio) supplies its own."""
    builder = StateGraph(TutorState, input_schema=TutorInput)
    builder.add_node("greet", greet)
    builder.add_node("solve", AggregateNode(model, n=n, system_prompts=[SOLVE_PROMPT], name="solve"))
    builder.add_node("assess", assess)
    builder.add_node("hint", hint)
    builder.add_node("check", check)
    builder.add_node("chat", AggregateNode(model, n=n, system_prompts=[CHAT_PROMPT], name="chat"))
    builder.add_conditional_edges(START, route_turn, ["greet", "solve", "hint", "check", "chat"])
    builder.add_conditional_edges("greet", after_greeting, ["solve", "hint", "check", END])
    builder.add_edge("solve", "assess")
    builder.add_conditional_edges("assess", after_assess, ["hint", END])
    for node in ("hint", "check", "chat"):
        builder.add_edge(node, END)
    return builder.compile(checkpointer=checkpointer, name=name)


DEFAULT_TURNS = ["Hi!", "What is 15% of 80?", "hint", "I got 12", "Thanks!", "What is 7 times 6?"]


def chat_model(model: str = "local", base_url: str | None = None) -> Any:
    """The model named `model` on an OpenAI-compatible server when `base_url` is given (key from OPENAI_API_KEY),
    else a spec string: "local" (the embedded SmolLM2, offline, 96 new tokens), "openai:gpt-4o-mini", ..."""
    if base_url:
        from langchain_openai import ChatOpenAI

        key = os.environ.get("OPENAI_API_KEY", "EMPTY")
        return ChatOpenAI(model=model, base_url=base_url, api_key=key, max_tokens=256, max_retries=0)
    if model.partition(":")[0] in LOCAL_PREFIXES:
        return load_chat_model(model, max_new_tokens=96)
    return load_chat_model(model)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="A multi-turn math tutor: every argument is one student turn.")
    p.add_argument("turns", nargs="*", help=f"the student's turns (default: {DEFAULT_TURNS})")
    p.add_argument("--n", type=int, default=3, help="candidates per answer")
    p.add_argument("--model", default="local", help="model spec, or the served model's name with --base-url")
    p.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, OpenAI, ...)")
    p.add_argument("--thread", default="student")
    args = p.parse_args(argv)
    graph = build(chat_model(args.model, args.base_url), args.n, checkpointer=InMemorySaver(serde=checkpoint_serde()))
    config = {"configurable": {"thread_id": args.thread}}
    state: dict[str, Any] = {}
    for turn in args.turns or DEFAULT_TURNS:
        seen = {m.id for m in state.get("messages", [])}
        state = graph.invoke({"messages": [HumanMessage(turn)]}, config)
        print(f"student> {turn}")
        for message in state["messages"]:
            if message.id not in seen and isinstance(message, AIMessage):
                print("tutor>   " + str(message.content).strip().replace("\n", "\n         "))
    return state


if __name__ == "__main__":
    main()
