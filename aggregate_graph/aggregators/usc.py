"""USC, universal self-consistency (arXiv 2311.17311): an off-the-shelf chat model picks the response that is
most consistent with the others."""

from __future__ import annotations

import re
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from aggregate_graph.aggregators.llm import Decision, LLMAggregator, as_messages, render_candidates
from aggregate_graph.aggregators.registry import register
from aggregate_graph.sample_set import Candidate, SampleSet

USC_INSTRUCTION = (
    "Evaluate these responses. Select the most consistent response based on majority consensus. "
    'Start your answer with "The most consistent response is Response X" (without quotes).'
)
_CHOICE = re.compile(r"most consistent response is\s*(?:\*\*)?\s*Response\s*(\d+)", re.IGNORECASE)


def render_usc_prompt(question: str, candidates: Sequence[str], max_candidate_tokens: int = 1024) -> str:
    blocks = render_candidates(candidates, "Response", max_candidate_tokens)
    return f"I have generated the following responses to the question: {question}\n\n{blocks}\n\n{USC_INSTRUCTION}"


def parse_usc_choice(text: str, count: int) -> int | None:
    """The 1-based response number the model chose, if it names one that exists (the last mention counts)."""
    choices = [int(m) for m in _CHOICE.findall(text)]
    return choices[-1] if choices and 1 <= choices[-1] <= count else None


@register
class USCAggregator(LLMAggregator):
    """Any chat model chooses among the candidates; the chosen candidate's text and answer are the result."""

    name = "usc"
    trained_format = "usc"

    def render(self, sample_set: SampleSet, shown: list[Candidate]) -> list[BaseMessage]:
        return as_messages(render_usc_prompt(sample_set.question, [c.text for c in shown], self.max_candidate_tokens))

    def decide(self, output: str, shown: list[Candidate]) -> Decision:
        choice = parse_usc_choice(output, len(shown))
        if choice is None:
            return Decision(None, "", "no_valid_choice", {})
        chosen = shown[choice - 1]
        status = "parsed" if chosen.answer is not None else "chosen_candidate_has_no_answer"
        return Decision(chosen.answer, chosen.text, status, {"chosen": chosen.index})
