"""The two aggregator formats (SSA, GSR) as training sees them, and the SFT targets: programmatic ones built from
the gold answer, or a teacher model's traces kept only when they reach the gold answer (GSR's distillation).

Prompts and parsers are the runtime's (`aggregate_graph.aggregators.ssa/gsr`); nothing here re-renders or re-parses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from aggregate_graph import Candidate, SampleSet, extract_answer
from aggregate_graph.aggregators import WeightedVote
from aggregate_graph.aggregators.choice import choice_target, parse_choice, render_choice_prompt
from aggregate_graph.aggregators.gsr import parse_gsr_output, render_gsr_prompt
from aggregate_graph.aggregators.ssa import SSAStyle, parse_ssa_output, render_ssa_prompt
from aggregate_graph.reading.answers import equivalent
from training.verifier import VERDICTS, parse_verdict, render_verify_prompt, verify_target


@dataclass(frozen=True)
class Format:
    """How one aggregator asks and answers: its prompt, its final-answer parser, and whether an output is in
    format (the GRPO format reward)."""

    name: str
    render: Callable[[str, Sequence[Candidate], SSAStyle, WeightedVote | None], str]
    answer: Callable[[str], str | None]
    well_formed: Callable[[str], bool]
    target: Callable[[str, Sequence[Candidate], bool, WeightedVote | None], str | None]
    key: Callable[[str, str], str] = lambda gold, _target: gold
    """What a right output's parsed answer is (GRPO's reward compares with it): the gold answer, or the letter."""
    same: Callable[[str | None, str], bool] = equivalent


def _agreeing(gold: str, answers: Sequence[str | None]) -> list[int]:
    return [i for i, a in enumerate(answers, 1) if equivalent(a, gold)]


def ssa_target(gold: str, answers: Sequence[str | None], answer_only: bool = False) -> str:
    """A short SSA completion that names which proposed answers reach the gold answer (`answer_only`: just
    `<answer>gold</answer>`, a few tokens, for small models trained on CPU)."""
    if answer_only:
        return f"<answer>{gold}</answer>"
    agree = _agreeing(gold, answers)
    if agree:
        names = ", ".join(str(i) for i in agree)
        reason = f"Answer{'s' if len(agree) > 1 else ''} {names} reach{'' if len(agree) > 1 else 'es'} {gold}."
        if len(agree) < len(answers):
            reason += " The others are wrong."
    else:
        reason = f"None of the proposed answers is right; working it out gives {gold}."
    return f"<think>{reason}</think> <answer>{gold}</answer>"


def gsr_target(gold: str, answers: Sequence[str | None], answer_only: bool = False) -> str:
    """A GSR refinement stand-in ending in the gold answer; real GSR training distils a teacher's full solutions."""
    agree = _agreeing(gold, answers)
    verdict = f"Solutions {', '.join(map(str, agree))} are right" if agree else "All candidate solutions are wrong"
    return f"{verdict}. Solving the problem again gives the final answer \\boxed{{{gold}}}."


def reference_solution(sample_set: SampleSet) -> str | None:
    """A real solution to imitate (GSR's targets, from the pool instead of a teacher): the shortest candidate of
    the whole set that reasons over several lines, states its final answer in words and reaches gold (a bare
    "The answer is 26." only when nothing else does), ending in `\\boxed{gold}` as GSR's output must. None when
    no candidate qualifies (e.g. only programs whose answer comes from running them)."""
    stated = [
        c.text
        for c in sample_set.succeeded
        if c.text.strip() and equivalent(extract_answer(c.text, last_number=False), sample_set.gold)
    ]
    if not stated or sample_set.gold is None:
        return None
    reasoned = [t for t in stated if len(t.strip().splitlines()) > 1]
    text = min(reasoned or stated, key=len).strip()
    return text if parse_gsr_output(text) else f"{text}\n\nThe final answer is \\boxed{{{sample_set.gold}}}."


FORMATS: dict[str, Format] = {
    "ssa": Format(
        "ssa",
        lambda question, candidates, style, weights: render_ssa_prompt(
            question, candidates, style=style, weights=weights
        ),
        lambda text: parse_ssa_output(text).answer,
        lambda text: parse_ssa_output(text).status == "parsed",
        lambda gold, candidates, answer_only, _weights: ssa_target(gold, [c.answer for c in candidates], answer_only),
    ),
    "ssa-choice": Format(
        "ssa-choice",
        lambda question, candidates, style, weights: render_choice_prompt(
            question, candidates, style=style, weights=weights
        ),
        parse_choice,  # the letter (the options live in the prompt)
        lambda text: parse_choice(text) is not None and len(text.strip()) == 1,
        lambda gold, candidates, _answer_only, weights: choice_target(gold, candidates, weights),
        key=lambda _gold, target: target,  # the right option's letter
        same=lambda letter, key: letter == key,
    ),
    # A per-candidate verifier (build it with k_min = k_max = 1): its Yes/No log-odds weigh that candidate's vote
    "verify": Format(
        "verify",
        lambda question, candidates, style, _weights: render_verify_prompt(question, candidates[0], style),
        parse_verdict,
        lambda text: text.strip() in VERDICTS,
        lambda gold, candidates, _answer_only, _weights: verify_target(gold, candidates[0]),
        key=lambda _gold, target: target,
        same=lambda verdict, key: verdict == key,
    ),
    "gsr": Format(
        "gsr",
        lambda question, candidates, style, weights: render_gsr_prompt(
            question, [c.text for c in candidates], style.max_candidate_tokens
        ),
        parse_gsr_output,
        lambda text: parse_gsr_output(text) is not None,
        lambda gold, candidates, answer_only, _weights: gsr_target(gold, [c.answer for c in candidates], answer_only),
    ),
}


def teacher_targets(
    model: Any, prompts: Sequence[str], golds: Sequence[str], fmt: Format, samples: int, concurrency: int
) -> list[str | None]:
    """One teacher trace per prompt whose parsed answer is equivalent to the gold answer (rejection sampling:
    up to `samples` tries each), or None where every try was wrong. `model` is any LangChain chat model, e.g.
    `ChatOpenAI(base_url=…)` over a vLLM server."""
    from langchain_core.messages import HumanMessage

    kept: list[str | None] = [None] * len(prompts)
    todo = list(range(len(prompts)))
    for attempt in range(samples):
        if not todo:
            break
        replies = model.batch(
            [[HumanMessage(prompts[i])] for i in todo], config={"max_concurrency": concurrency}, return_exceptions=True
        )
        for i, reply in zip(todo, tqdm(replies, desc=f"teacher try {attempt + 1}", leave=False), strict=True):
            text = reply.text if not isinstance(reply, Exception) else ""
            if text and equivalent(fmt.answer(text), golds[i]):
                kept[i] = text
        todo = [i for i in todo if kept[i] is None]
    return kept
