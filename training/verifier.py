"""A per-candidate verifier (an issue-39 candidate): the model reads the question and one candidate and answers
Yes or No; the log-odds of its first token weigh that candidate's vote.

`render_verify_prompt` and `verify_target` are the only copies of the prompt and the target: `build --format
verify` writes examples with them and `verifier_scores` scores with them, so the model is scored on what it
learned from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import BestOfN, MajorityVote, SSAStyle
from aggregate_graph.aggregators.choice import letter_logprobs
from aggregate_graph.aggregators.llm import as_messages, fit_budget, neutralise
from aggregate_graph.aggregators.majority import is_voter
from aggregate_graph.aggregators.weighted import MIN_WEIGHT
from aggregate_graph.reading.answers import equivalent

VERIFY_INSTRUCTION = "Is this solution's final answer correct? Reply Yes or No."
VERIFY_QUESTION_TOKENS = 160  # a MATH level-5 question is rarely longer; a verifier must read what is asked
VERDICTS = ("Yes", "No")


def render_verify_prompt(question: str, candidate: Candidate, style: SSAStyle) -> str:
    """The verifier's prompt: the question, one candidate's tail (`style.max_candidate_tokens`) and the answer the
    runtime read from it, then a yes/no question about that answer."""
    text = neutralise(fit_budget(candidate.text.strip(), style.max_candidate_tokens, tail_only=True,
                                 chars_per_token=style.chars_per_token))  # fmt: skip
    head = fit_budget(question.strip(), VERIFY_QUESTION_TOKENS, chars_per_token=style.chars_per_token)
    final = neutralise(candidate.answer or "none")
    return f"Question: {head}\n\nSolution:\n{text}\nFinal: {final}\n\n{VERIFY_INSTRUCTION}"


def verify_target(gold: str, candidate: Candidate) -> str:
    """The verifier's target: whether the candidate's answer is equivalent to the gold answer."""
    return "Yes" if equivalent(candidate.answer, gold) else "No"


def parse_verdict(text: str) -> str | None:
    """The verdict a reply starts with (Yes or No), or None."""
    words = text.split()
    first = words[0].strip(".,!:;") if words else ""
    return first if first in VERDICTS else None


def verdict_log_odds(response: Any) -> float:
    """log P(Yes) − log P(No) of the first generated token, read as the choice SSA reads its letters
    (`letter_logprobs`: a verdict missing from the top list gets the smallest listed value, a bound). A reply
    without a top list is an error: one verdict's log-probability alone gives no odds."""
    content = ((getattr(response, "response_metadata", None) or {}).get("logprobs") or {}).get("content") or []
    if not content or not content[0].get("top_logprobs"):
        raise ValueError("the verifier's reply carries no top_logprobs: call it with logprobs=True, top_logprobs=20")
    logprobs = letter_logprobs(response, VERDICTS)
    assert logprobs is not None  # the top list is there
    return logprobs["Yes"] - logprobs["No"]


def verifier_scores(model: Any, sample_set: SampleSet, style: SSAStyle) -> dict[int, float]:
    """Each voting candidate's verdict log-odds, by candidate index: one call per candidate, sent together
    (`LocalChatModel` decodes concurrent calls as one batch)."""
    voters = [c for c in sample_set.candidates if is_voter(c)]
    prompts = [as_messages(render_verify_prompt(sample_set.question, c, style)) for c in voters]
    replies = model.batch(prompts, max_tokens=1, logprobs=True, top_logprobs=20)
    return {c.index: verdict_log_odds(reply) for c, reply in zip(voters, replies, strict=True)}


def verified_vote(base: Callable[[Candidate], float] | None, scores: dict[int, float], beta: float) -> MajorityVote:
    """The vote in which each candidate weighs its base weight (`base`, e.g. a `WeightedVote`'s `weight_of`;
    None: 1) plus `beta` times its verdict log-odds (`scores`, every voter's), floored at `MIN_WEIGHT` as fit
    weights are."""

    def weight(candidate: Candidate) -> float:
        own = base(candidate) if base is not None else 1.0
        return max(own + beta * scores[candidate.index], MIN_WEIGHT)

    return MajorityVote(weights=weight)


def best_verified(scores: dict[int, float]) -> BestOfN:
    """The verifier alone: best-of-n over the voters it scored (a candidate it did not score never wins)."""
    return BestOfN(lambda _, candidate: scores.get(candidate.index, -math.inf))
