"""SSA, the Sample Set Aggregator (arXiv 2506.09014): a compact model reads the question and k candidate
solutions and answers `<think>…</think> <answer>…</answer>`.

`render_ssa_prompt` and `parse_ssa_output` are the only copies of the prompt and the parser: the training
package imports them, so the model is trained on exactly what it is served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from aggregate_graph.aggregators.llm import (
    CHARS_PER_TOKEN,
    Decision,
    LLMAggregator,
    as_messages,
    fit_budget,
    neutralise,
    render_candidates,
    supporting,
)
from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.aggregators.registry import register
from aggregate_graph.aggregators.trained import SHIPPED_SSA, load_trained_aggregator
from aggregate_graph.aggregators.weighted import WeightedVote, posterior, source_of
from aggregate_graph.errors import AggregationError
from aggregate_graph.reading.answers import extract_answer, last_answer_tag, stated_answer
from aggregate_graph.sample_set import Candidate, SampleSet

SSA_INSTRUCTION = (
    "Given the question and the proposed answers, reason step by step about which answer is correct, or work "
    "out the correct answer yourself. Think inside <think> </think>, then give only the final answer inside "
    "<answer> </answer>."
)
SSA_SHORT_INSTRUCTION = "Which final answer is correct? Reply with it inside <answer> </answer>."


@dataclass(frozen=True)
class SSAStyle:
    """How the candidates are rendered for an SSA model. A trained model records the style it was trained on
    (`aggregator.json` beside its weights) so the runtime renders exactly that.

    The default is the paper's: each candidate's text, head and tail kept. The compact style for small CPU
    models keeps each candidate's tail (the answer lives at the end), states the answer the runtime extracted
    ("Final: 18"; many candidates are programs whose answer is never written out), names the candidate's
    source, and adds the vote tally (weighted by the aggregator's `WeightedVote` when it has one).
    """

    max_candidate_tokens: int = 1024
    tail_only: bool = False
    chars_per_token: float = CHARS_PER_TOKEN  # SmolLM2's tokenizer measures ~2.96 on GSM8K solutions
    show_answers: bool = False
    show_sources: bool = False
    show_tally: bool = False
    short_instruction: bool = False  # a one-line request for the answer alone (no <think>): ~35 tokens fewer

    def __post_init__(self) -> None:
        if self.max_candidate_tokens < 1 or self.chars_per_token <= 0:
            raise ValueError(f"SSAStyle needs max_candidate_tokens >= 1 and chars_per_token > 0, got {self}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SSAStyle:
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(data) - known):
            raise ValueError(f"unknown SSA style settings {unknown}; known: {sorted(known)}")
        return cls(**data)


def _as_candidates(candidates: Sequence[str | Candidate]) -> list[Candidate]:
    """Texts become candidates as the runtime would draw them: an abstention ("unknown") states no answer."""
    out = []
    for i, c in enumerate(candidates):
        if not isinstance(c, Candidate):
            answer, abstention = stated_answer(c)
            c = Candidate(index=i, text=c, answer=answer, abstention=abstention)
        out.append(c)
    return out


def _tally_line(candidates: list[Candidate], weights: WeightedVote | None) -> str | None:
    """The vote split: counts, or with learned weights each answer's probability of being the right one
    (the one-coin model's posterior: a softmax over the weighted scores)."""
    try:
        votes = (weights or MajorityVote()).invoke(SampleSet(question="-", candidates=candidates)).votes
    except AggregationError:
        return None
    ranked = sorted(votes.items(), key=lambda item: -item[1])
    if weights is None:
        return "Votes: " + "; ".join(f"{answer} = {score:g}" for answer, score in ranked)
    shares = posterior([score for _, score in ranked])
    parts = [f"{answer} = {round(100 * share)}%" for (answer, _), share in zip(ranked, shares, strict=True)]
    return "Weighted votes: " + "; ".join(parts)


def _block(i: int, candidate: Candidate, style: SSAStyle) -> str:
    header = f"Answer {i}" + (f" [{source_of(candidate)}]" if style.show_sources else "") + ":"
    text = neutralise(fit_budget(candidate.text, style.max_candidate_tokens, tail_only=style.tail_only,
                                 chars_per_token=style.chars_per_token).strip())  # fmt: skip
    final = f"\nFinal: {neutralise(candidate.answer or 'none')}" if style.show_answers else ""
    return f"{header}\n{text}{final}"


def render_ssa_prompt(
    question: str,
    candidates: Sequence[str | Candidate],
    max_candidate_tokens: int = 1024,
    *,
    style: SSAStyle | None = None,
    weights: WeightedVote | None = None,
) -> str:
    """The SSA prompt: the question, "Below are the proposed answers:", and one "Answer i:" block each, rendered
    in `style` (default: the paper's, each text cut to `max_candidate_tokens`)."""
    if style is None:
        texts = [c.text if isinstance(c, Candidate) else c for c in candidates]
        blocks = render_candidates(texts, "Answer", max_candidate_tokens)
        return f"Question: {question}\n\nBelow are the proposed answers:\n\n{blocks}\n\n{SSA_INSTRUCTION}"
    shown = _as_candidates(candidates)
    blocks = "\n\n".join(_block(i, c, style) for i, c in enumerate(shown, 1))
    tally = _tally_line(shown, weights) if style.show_tally else None
    tally_block = f"\n\n{tally}" if tally else ""
    instruction = SSA_SHORT_INSTRUCTION if style.short_instruction else SSA_INSTRUCTION
    return f"Question: {question}\n\nBelow are the proposed answers:\n\n{blocks}{tally_block}\n\n{instruction}"


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
    tag = last_answer_tag(text)
    if tag is None:
        return SSAOutput(None, "no_answer_tag")
    answer = extract_answer(f"<answer>{tag}</answer>", last_number=False)
    return SSAOutput(answer, "parsed" if answer else "empty_answer")


@register
class SSAAggregator(LLMAggregator):
    """Aggregates with an SSA model (any chat model: a vLLM server via `ChatOpenAI(base_url=…)`, or local).

    Shows the model the first k successful candidates, each cut to `max_candidate_tokens` (head and tail
    kept). If the output has no parsable `<answer>`, the result is `fallback`'s (majority vote) and
    `details["fallback"]` says so.
    """

    name = "ssa"
    trained_format = "ssa"
    max_tokens = 32  # the shipped SSA answers with a letter, older ones `<answer>…</answer>`: a handful of tokens

    def __init__(  # type: ignore[no-untyped-def]
        self, model, k: int = 5, *, style: SSAStyle | None = None, weights: WeightedVote | None = None, **kwargs
    ) -> None:
        if style is not None:
            kwargs["max_candidate_tokens"] = style.max_candidate_tokens
        super().__init__(model, k=k, **kwargs)
        self.style, self.weights = style, weights

    @classmethod
    def from_options(  # type: ignore[override]
        cls,
        model: Any = None,
        *,
        base_url: str | None = None,
        served_model_name: str = "aggregator",
        api_key: str | None = None,
        max_tokens: int | None = None,
        weights: WeightedVote | str | Path | None = None,
        **options: Any,
    ) -> LLMAggregator:
        """By name: with neither `model` nor `base_url`, the SSA shipped in this package, run in-process on the
        CPU; with `base_url`, the shipped adapter served there, rendered with its settings; with `model`, SSA's
        prompt over that chat model. `weights` replaces the vote weights in the tally the model reads."""
        if isinstance(weights, str | Path):
            weights = WeightedVote.load(weights)
        if model is None:
            served = cls.served_or_given(None, base_url, served_model_name, api_key, max_tokens)
            budget = {"max_tokens": max_tokens} if max_tokens else {}
            return load_trained_aggregator(SHIPPED_SSA, model=served, weights=weights, **budget, **options)
        return super().from_options(model, base_url=base_url, weights=weights, **options)

    @classmethod
    def from_trained(
        cls, model: Any, record: Mapping[str, Any], *, weights: Any = None, **options: Any
    ) -> LLMAggregator:
        """The trained SSA of `record`: its render settings, k and (unless `weights` replaces them) vote weights."""
        options.setdefault("k", record.get("k", 5))
        return cls(model, style=SSAStyle.from_dict(record["style"]), weights=weights, **options)

    def render(self, sample_set: SampleSet, shown: list[Candidate]) -> list[BaseMessage]:
        return as_messages(
            render_ssa_prompt(
                sample_set.question, shown, self.max_candidate_tokens, style=self.style, weights=self.weights
            )
        )

    def decide(self, output: str, shown: list[Candidate]) -> Decision:
        parsed = parse_ssa_output(output)
        backing = supporting(shown, parsed.answer)
        # The user gets a full solution when a candidate agrees with the aggregator, else its bare answer.
        text = backing[0].text if backing else f"The answer is {parsed.answer}."
        return Decision(parsed.answer, text, parsed.status, {})
