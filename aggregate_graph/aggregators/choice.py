"""SSA as a choice: the candidates' distinct answers are shown as lettered options and the model answers with
one letter, so it can only pick an answer some candidate stated (refining is GSR's job).

The model's probabilities over the letters (from the first token's log-probabilities, softened by a temperature
fit on validation) are the aggregation's `details["choice_probs"]`. When the top probability is below the
aggregator's `threshold` (chosen on validation) it defers to the vote and says so; so it does when a server
gives no log-probabilities and the calibration weighs the vote beside the model (`vote_weight` > 0: the letter
alone is not what was calibrated). A set whose candidates all agree never reaches the model.
`render_choice_prompt` and `choice_target` are the only copies of the prompt and the training target: `training`
imports them, so the model is trained on exactly what it is served.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from aggregate_graph.aggregators.base import Aggregator, tie_time
from aggregate_graph.aggregators.llm import (
    Decision,
    LLMAggregator,
    as_messages,
    fit_budget,
    neutralise,
    shown_candidates,
)
from aggregate_graph.aggregators.majority import MajorityVote, is_voter
from aggregate_graph.aggregators.ssa import SSAStyle, _as_candidates
from aggregate_graph.aggregators.weighted import WeightedVote, posterior
from aggregate_graph.reading.answers import equivalent, group_equivalent, normalize_answer
from aggregate_graph.reading.kinds import shows_work
from aggregate_graph.sample_set import Candidate, SampleSet

LETTERS = "ABCDEFGH"  # at most k = 8 candidates, so at most 8 distinct answers
CHOICE_INSTRUCTION = "Which option is correct? Reply with its letter only."
QUESTION_TOKENS = 64  # the question's head: enough to say what is asked, little of the latency


def option_groups(candidates: Sequence[Candidate], weights: WeightedVote | None = None) -> list[list[int]]:
    """The distinct answers as lists of positions in `candidates`, in the order the vote ranks them (`weights`'
    weighted votes, else counts; ties: the earliest landing, then the earliest candidate first, as the vote breaks
    them: `tie_keys`), so option A is the answer the vote — the aggregator's fallback — would give. Candidates
    that do not vote are no option."""
    voters = [i for i, c in enumerate(candidates) if is_voter(c)]
    classes = [[voters[j] for j in cls] for cls in group_equivalent([candidates[i].answer for i in voters])]
    time = tie_time([candidates[i] for i in voters])

    def rank(cls: list[int]) -> tuple[float, tuple[float, int]]:
        score = sum(weights.weight_of(candidates[i]) for i in cls) if weights is not None else float(len(cls))
        return -round(score, 9), min((time(candidates[i]), i) for i in cls)

    return sorted(classes, key=rank)[: len(LETTERS)]


def choice_target(gold: str, candidates: Sequence[Candidate], weights: WeightedVote | None = None) -> str | None:
    """The letter of the option equivalent to `gold` (the SFT target), or None when no candidate reached it."""
    for letter, cls in zip(LETTERS, option_groups(candidates, weights), strict=False):
        if equivalent(candidates[cls[0]].answer, gold):
            return letter
    return None


def _mentions(answer: str, text: str) -> bool:
    """Whether `answer` appears as a number or term inside `text` (another candidate's work)."""
    return re.search(rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\d)", text) is not None


def _option_line(letter: str, cls: list[int], shown: list[Candidate], shares: list[float] | None, rank: int) -> str:
    answer = normalize_answer(shown[cls[0]].answer) or ""
    members = ", ".join(str(i + 1) for i in cls)
    line = (
        f"{letter}) {neutralise(answer)}: solution{'s' if len(cls) > 1 else ''} {members} ({len(cls)} of {len(shown)}"
    )
    if shares is not None:
        line += f", weighted {round(100 * shares[rank])}%"
    line += f"; {sum(shows_work(shown[i]) for i in cls)} with work)"
    others = sum(_mentions(answer, c.text) for i, c in enumerate(shown) if i not in cls)
    return line + (f"; in the work of {others} other{'s' if others > 1 else ''}" if others else "")


def render_choice_prompt(
    question: str, candidates: Sequence[str | Candidate], *, style: SSAStyle, weights: WeightedVote | None = None
) -> str:
    """The choice prompt: the question's head, each candidate's tail ("Solution i:", with its stated answer when
    `style.show_answers`), then one lettered option per distinct answer with who backs it, its vote share weighted
    by `weights` (when `style.show_tally`) and whether other candidates' work mentions it."""
    shown = _as_candidates(candidates)
    blocks = []
    for i, c in enumerate(shown, 1):
        text = neutralise(fit_budget(c.text.strip(), style.max_candidate_tokens, tail_only=True,
                                     chars_per_token=style.chars_per_token))  # fmt: skip
        final = f"\nFinal: {neutralise(c.answer or 'none')}" if style.show_answers else ""
        blocks.append(f"Solution {i}:\n{text}{final}")
    groups = option_groups(shown, weights)
    shares = None
    if style.show_tally and weights is not None and groups:
        shares = vote_shares(shown, groups, weights)
    options = [_option_line(letter, cls, shown, shares, rank)
               for rank, (letter, cls) in enumerate(zip(LETTERS, groups, strict=False))]  # fmt: skip
    head = fit_budget(question.strip(), QUESTION_TOKENS, chars_per_token=style.chars_per_token)
    return "\n\n".join([f"Question: {head}", *blocks, "Options:\n" + "\n".join(options), CHOICE_INSTRUCTION])


def parse_choice(text: str, letters: str = LETTERS) -> str | None:
    """The option letter a reply names (its first character), or None when it names none of `letters`."""
    letter = text.strip()[:1]
    return letter if letter and letter in letters else None


def letter_logprobs(response: Any, letters: Collection[str]) -> dict[str, float] | None:
    """The first generated token's log-probability for each option letter (or each of a set of one-token replies:
    the verifier's Yes / No) in OpenAI's `logprobs` schema (which
    ChatOpenAI, vLLM and `LocalChatModel` all return); a letter missing from the top list gets the smallest
    listed value (an upper bound). None when the response carries no log-probabilities."""
    meta = getattr(response, "response_metadata", None) or {}
    content = (meta.get("logprobs") or {}).get("content") or []
    if not content:
        return None
    found: dict[str, float] = {}
    for entry in content[0].get("top_logprobs") or [{"token": content[0]["token"], "logprob": content[0]["logprob"]}]:
        token = str(entry["token"]).strip()
        if token in letters and token not in found:
            found[token] = float(entry["logprob"])
    floor = min([float(e["logprob"]) for e in content[0].get("top_logprobs") or []] or [-30.0])
    return {letter: found.get(letter, floor) for letter in letters}


def choice_distribution(
    logprobs: dict[str, float], temperature: float, vote: dict[str, float] | None = None, vote_weight: float = 0.0
) -> dict[str, float]:
    """Probabilities over the options: a softmax of the model's log-probabilities divided by `temperature`, plus
    `vote_weight` times the log of the vote's own probability per option (`vote`; a product of the two experts,
    both exponents fit on validation)."""
    scores = {k: v / temperature + (vote_weight * math.log(max(vote[k], 1e-12)) if vote else 0.0)
              for k, v in logprobs.items()}  # fmt: skip
    top = max(scores.values())
    weights = {k: math.exp(v - top) for k, v in scores.items()}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def vote_shares(candidates: Sequence[Candidate], groups: list[list[int]], weights: WeightedVote | None) -> list[float]:
    """The vote's probability that each option is right: the one-coin posterior of its (weighted) votes."""
    return posterior([sum(weights.weight_of(candidates[i]) if weights else 1.0 for i in cls) for cls in groups])


class SSAChoiceAggregator(LLMAggregator):
    """A trained SSA that chooses among the candidates' distinct answers (one generated letter).

    `temperature` calibrates the model's letter probabilities, `vote_weight` mixes in the vote's own probability of
    each option (0: the model alone), and `threshold` is the confidence below which the vote (`fallback`: the
    `WeightedVote` of `weights`, else majority) decides instead; all three are fit on validation and recorded with
    the trained model. A set with one distinct answer skips the model (`details["skipped"]`).
    """

    name = "ssa"  # the shipped SSA: `load_aggregator("ssa")` loads it (`SSAAggregator.from_options`)
    trained_format = "ssa-choice"

    def __init__(  # type: ignore[no-untyped-def]
        self,
        model,
        k: int = 5,
        *,
        style: SSAStyle | None = None,
        weights: WeightedVote | None = None,
        temperature: float = 1.0,
        threshold: float = 0.0,
        vote_weight: float = 0.0,
        top_logprobs: int = 20,
        fallback: Aggregator | None = None,
        **kwargs,
    ) -> None:
        if not 1 <= k <= len(LETTERS):
            raise ValueError(f"the choice SSA shows 1 to {len(LETTERS)} candidates, got k={k}")
        if temperature <= 0 or not 0 <= threshold <= 1 or vote_weight < 0:
            raise ValueError(
                f"need temperature > 0, 0 <= threshold <= 1 and vote_weight >= 0, got {temperature}, {threshold}, "
                f"{vote_weight}"
            )
        self.style = style or SSAStyle(max_candidate_tokens=24, tail_only=True, show_answers=True, show_tally=True)
        super().__init__(model, k=k, max_candidate_tokens=self.style.max_candidate_tokens,
                         fallback=fallback or weights or MajorityVote(), **kwargs)  # fmt: skip
        self.weights, self.temperature, self.threshold = weights, temperature, threshold
        self.vote_weight = vote_weight
        # One letter, and the probabilities of all of them: the options the OpenAI API (and vLLM) take.
        self.invoke_kwargs = {"max_tokens": 1, "logprobs": True, "top_logprobs": top_logprobs}

    @classmethod
    def from_trained(
        cls, model: Any, record: Mapping[str, Any], *, weights: Any = None, **options: Any
    ) -> LLMAggregator:
        """The trained choice SSA of `record`: its render settings, k, vote weights (unless `weights` replaces them)
        and its calibration, fit on validation: temperature, vote weight and threshold."""
        for key, default in (("k", 5), ("temperature", 1.0), ("threshold", 0.0), ("vote_weight", 0.0)):
            options.setdefault(key, record.get(key, default))
        return cls(model, style=SSAStyle.from_dict(record["style"]), weights=weights, **options)

    def render(self, sample_set: SampleSet, shown: list[Candidate]) -> list[BaseMessage]:
        return as_messages(render_choice_prompt(sample_set.question, shown, style=self.style, weights=self.weights))

    def decide(self, output: str, shown: list[Candidate]) -> Decision:
        return self.decide_response(output, shown)

    def decide_response(self, response: Any, shown: list[Candidate]) -> Decision:
        groups = option_groups(shown, self.weights)
        letters = LETTERS[: len(groups)]
        logprobs = letter_logprobs(response, letters)
        text = str(getattr(response, "text", response)).strip()
        if logprobs is None:  # a server without log-probabilities: the letter it wrote, confidence unknown
            if (written := parse_choice(text, letters)) is None:
                # no letter of an option: the vote decides, and the details say so as a low confidence would
                return Decision(None, "", "no_choice", {"deferred": True, "threshold": self.threshold})
            chosen, probs, confidence = written, None, None
        shares = dict(zip(letters, vote_shares(shown, groups, self.weights), strict=True))
        if logprobs is not None:
            probs = choice_distribution(logprobs, self.temperature, shares, self.vote_weight)
            chosen = max(probs, key=lambda letter: probs[letter])
            confidence = probs[chosen]
        answer_of = {letter: normalize_answer(shown[c[0]].answer) for letter, c in zip(letters, groups, strict=True)}
        details: dict[str, Any] = {
            "choice": answer_of[chosen],
            "confidence": confidence,
            "threshold": self.threshold,
            "choice_probs": {answer_of[k]: round(p, 4) for k, p in probs.items()} if probs else None,
            # the model's own letter log-probabilities, before the temperature: what calibration fits on
            "choice_logprobs": {answer_of[k]: v for k, v in logprobs.items()} if logprobs else None,
            "vote_shares": {answer_of[k]: v for k, v in shares.items()},
        }
        # 1: always the vote. Without log-probabilities the letter is the model alone; a calibration that weighs
        # the vote beside it (vote_weight > 0) was fit on the two together, so the vote decides then too.
        unscored = confidence is None and self.vote_weight > 0
        if self.threshold >= 1 or unscored or (confidence is not None and confidence < self.threshold):
            return Decision(None, "", "deferred", details | {"deferred": True})
        backing = shown[groups[letters.index(chosen)][0]]
        return Decision(answer_of[chosen], backing.text, "parsed", details | {"deferred": False})

    def _one_answer(self, sample_set: SampleSet, shown: list[Candidate], config: RunnableConfig | None):  # type: ignore[no-untyped-def]
        """A set whose shown candidates state one answer (or none) is decided by the vote (over all of the set's
        candidates, as when the model defers), without the model."""
        if not shown or len(option_groups(shown)) > 1:  # none shown: `run` records that
            return None
        details = {"parse_status": "skipped", "skipped": "unanimous", "candidates_shown": [c.index for c in shown]}
        return self._fall_back(sample_set, details, None, time.perf_counter(), config)

    def settled(self, sample_set: SampleSet, outstanding: int) -> bool:
        """Settled when the set would skip the model as unanimous (every shown candidate states one answer) and
        the vote it then defers to is settled: the outstanding candidates could not outvote that answer. (Waiting
        for them, the model might have read a dissenting one: the answer is the vote's, as on any unanimous set.)"""
        shown = shown_candidates(sample_set, self.k)
        return len(option_groups(shown)) == 1 and self.fallback.settled(sample_set, outstanding)

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None):  # type: ignore[no-untyped-def]
        shown = shown_candidates(sample_set, self.k)
        return self._one_answer(sample_set, shown, config) or self.run(sample_set, shown, config)

    async def aaggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None):  # type: ignore[no-untyped-def]
        shown = shown_candidates(sample_set, self.k)
        return self._one_answer(sample_set, shown, config) or await self.arun(sample_set, shown, config)
