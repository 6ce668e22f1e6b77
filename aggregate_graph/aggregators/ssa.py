"""SSA, the Sample Set Aggregator (arXiv 2506.09014): a compact model reads the question and k candidate
solutions and answers `<think>…</think> <answer>…</answer>`.

`render_ssa_prompt` and `parse_ssa_output` are the only copies of the prompt and the parser: the training
package imports them, so the model is trained on exactly what it is served.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from aggregate_graph.aggregators.llm import Decision, LLMAggregator, ask, render_candidates, supporting
from aggregate_graph.answers import _last_answer_tag, extract_answer
from aggregate_graph.sample_set import Candidate, SampleSet

SSA_INSTRUCTION = (
    "Given the question and the proposed answers, reason step by step about which answer is correct, or work "
    "out the correct answer yourself. Think inside <think> </think>, then give only the final answer inside "
    "<answer> </answer>."
)


def render_ssa_prompt(question: str, candidates: Sequence[str], max_candidate_tokens: int = 1024) -> str:
    """The SSA prompt: the question, "Below are the proposed answers:", and one "Answer i:" block each."""
    blocks = render_candidates(candidates, "Answer", max_candidate_tokens)
    return f"Question: {question}\n\nBelow are the proposed answers:\n\n{blocks}\n\n{SSA_INSTRUCTION}"


@dataclass(frozen=True)
class SSAOutput:
    answer: str | None
    status: str  # "parsed", "empty_answer", "no_answer_tag"


def parse_ssa_output(text: str) -> SSAOutput:
    """The final answer of an SSA completion: the content of its last `<answer>` tag (a `\\boxed{}` inside is
    unwrapped). Reasoning inside `<think>` never counts, and only the last tag does."""
    # Only what follows the reasoning counts: an <answer> quoted inside <think>, closed or cut off, does not.
    lowered = text.lower()
    if (close := lowered.rfind("</think>")) >= 0:
        text, lowered = text[close + len("</think>") :], lowered[close + len("</think>") :]
    if (still_thinking := lowered.find("<think>")) >= 0:
        text = text[:still_thinking]
    tag = _last_answer_tag(text)
    if tag is None:
        return SSAOutput(None, "no_answer_tag")
    answer = extract_answer(f"<answer>{tag}</answer>", last_number=False)
    return SSAOutput(answer, "parsed" if answer else "empty_answer")


class SSAAggregator(LLMAggregator):
    """Aggregates with an SSA model (any chat model: a vLLM server via `ChatOpenAI(base_url=…)`, or local).

    Shows the model the first k successful candidates, each cut to `max_candidate_tokens` (head and tail
    kept). If the output has no parsable `<answer>`, the result is `fallback`'s (majority vote) and
    `details["fallback"]` says so.
    """

    name = "ssa"

    def __init__(self, model, k: int = 5, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(model, k=k, **kwargs)

    def render(self, sample_set: SampleSet, shown: list[Candidate]) -> list[BaseMessage]:
        return ask(render_ssa_prompt(sample_set.question, [c.text for c in shown], self.max_candidate_tokens))

    def decide(self, output: str, shown: list[Candidate]) -> Decision:
        parsed = parse_ssa_output(output)
        backing = supporting(shown, parsed.answer)
        # The user gets a full solution when a candidate agrees with the aggregator, else its bare answer.
        text = backing[0].text if backing else f"The answer is {parsed.answer}."
        return Decision(parsed.answer, text, parsed.status, {})
