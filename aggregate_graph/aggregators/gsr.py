"""GSR, generative self-refinement (arXiv 2509.00084): the model reads the candidates and writes a new,
complete solution ending in `\\boxed{…}` — which can be right when every candidate is wrong."""

from __future__ import annotations

import time
from collections.abc import Sequence

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from aggregate_graph.aggregators.llm import Decision, LLMAggregator, as_messages, render_candidates, shown_candidates
from aggregate_graph.aggregators.registry import register
from aggregate_graph.reading.answers import boxed_answer
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet, Usage

GSR_INSTRUCTION = (
    "The solutions above may contain mistakes, and may all be wrong. Check their reasoning, then write a new, "
    "complete and correct solution to the problem. End with the final answer in \\boxed{}."
)


def render_gsr_prompt(question: str, candidates: Sequence[str], max_candidate_tokens: int = 1024) -> str:
    """The GSR prompt: the problem, the candidate solutions, and the request for a refined solution."""
    blocks = render_candidates(candidates, "Solution", max_candidate_tokens)
    return f"Problem: {question}\n\nCandidate solutions:\n\n{blocks}\n\n{GSR_INSTRUCTION}"


def parse_gsr_output(text: str) -> str | None:
    """The refined solution's final answer: its last `\\boxed{}`, as the prompt asks (nothing else guessed)."""
    return boxed_answer(text)


@register
class GSRAggregator(LLMAggregator):
    """Refines the candidates into one new solution; `rounds > 1` refines again with the previous refinement
    shown beside the candidates. Falls back to majority vote (recorded) when no `\\boxed{}` answer is found."""

    name = "gsr"
    trained_format = "gsr"

    def __init__(self, model, rounds: int = 1, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {rounds}")
        super().__init__(model, **kwargs)
        self.rounds = rounds

    def render(self, sample_set: SampleSet, shown: list[Candidate]) -> list[BaseMessage]:
        return as_messages(render_gsr_prompt(sample_set.question, [c.text for c in shown], self.max_candidate_tokens))

    def decide(self, output: str, shown: list[Candidate]) -> Decision:
        answer = parse_gsr_output(output)
        return Decision(answer, output, "parsed" if answer else "no_boxed_answer", {})

    @staticmethod
    def _refinement(sample_set: SampleSet, refined: Aggregation) -> Candidate:
        """The previous round's solution, shown to the next round beside the original candidates."""
        return Candidate(index=len(sample_set.candidates), text=refined.text, answer=refined.answer, model="gsr")

    @staticmethod
    def _combine(rounds: list[Aggregation], started: float) -> Aggregation:
        """The last round's result, with every round's cost and record."""
        usage = sum((r.usage for r in rounds if r.usage), Usage())
        record = [{k: r.details.get(k) for k in ("raw_output", "parse_status")} | {"answer": r.answer} for r in rounds]
        details = {**rounds[-1].details, "round": len(rounds), "rounds": record}
        return rounds[-1].model_copy(
            update={"usage": usage, "latency_s": time.perf_counter() - started, "details": details}
        )

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started, shown = time.perf_counter(), shown_candidates(sample_set, self.k)
        rounds = [self.run(sample_set, shown, config)]
        while len(rounds) < self.rounds:
            rounds.append(self.run(sample_set, [*shown, self._refinement(sample_set, rounds[-1])], config))
        return self._combine(rounds, started)

    async def aaggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        started, shown = time.perf_counter(), shown_candidates(sample_set, self.k)
        rounds = [await self.arun(sample_set, shown, config)]
        while len(rounds) < self.rounds:
            rounds.append(await self.arun(sample_set, [*shown, self._refinement(sample_set, rounds[-1])], config))
        return self._combine(rounds, started)
