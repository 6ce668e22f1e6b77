"""The choice SSA: the candidates' distinct answers as lettered options, one generated letter, its probabilities
calibrated and recorded, deferral to the vote when unsure, and sets with one answer never reaching the model.

The wiring tests use a scripted chat model; the log-probabilities are checked on the real SmolLM2 (in-process and
served by the local engine over HTTP with the real openai client, as vLLM serves them)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import SSAStyle, WeightedVote
from aggregate_graph.aggregators.choice import (
    SSAChoiceAggregator,
    choice_distribution,
    choice_target,
    letter_logprobs,
    option_groups,
    render_choice_prompt,
)

STYLE = SSAStyle(max_candidate_tokens=24, tail_only=True, show_answers=True, show_tally=True)


def sample_set(*answers: str | None, model: str = "m") -> SampleSet:
    candidates = [
        Candidate(index=i, text=f"Step one.\nSo the total is {a}.\n#### {a}" if a else "I am not sure.", answer=a,
                  model=model)
        for i, a in enumerate(answers)
    ]  # fmt: skip
    return SampleSet(question="How many apples are left?", gold="18", candidates=candidates)


def reply(letter: str, logprobs: dict[str, float] | None) -> AIMessage:
    meta: dict[str, Any] = {}
    if logprobs is not None:
        top = [{"token": t, "logprob": v} for t, v in sorted(logprobs.items(), key=lambda kv: -kv[1])]
        meta["logprobs"] = {"content": [{"token": letter, "logprob": top[0]["logprob"], "top_logprobs": top}]}
    return AIMessage(content=letter, response_metadata=meta)


class Scripted(GenericFakeChatModel):
    """Replies in order and keeps every call's options (a real chat model gets them as request fields)."""

    calls: list[dict[str, Any]]

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append(kwargs)
        return super()._generate(messages, stop, run_manager, **kwargs)


def scripted(*replies: AIMessage) -> Scripted:
    return Scripted(messages=iter(replies), calls=[])


def test_options_are_the_distinct_answers_plurality_first() -> None:
    s = sample_set("20", "18", "18.0", None, "20", "18", "7")
    assert option_groups(s.candidates) == [[1, 2, 5], [0, 4], [6]]  # 18 (3 votes), 20 (2), 7; None is no option
    assert option_groups(sample_set("5", "6").candidates) == [[0], [1]]  # a tie: the earlier candidate's first
    assert choice_target("18", s.candidates) == "A" and choice_target("7", s.candidates) == "C"
    assert choice_target("99", s.candidates) is None  # no option to choose: build drops such a set
    # with vote weights, the options are in the weighted vote's order: A is what the fallback would answer
    trusted = [c.model_copy(update={"model": "good" if c.answer == "20" else "bad"}) for c in s.candidates]
    weights = WeightedVote({"good": 2.0, "bad": 0.5})
    assert option_groups(trusted, weights) == [[0, 4], [1, 2, 5], [6]]
    assert weights.invoke(SampleSet(question="q", candidates=trusted)).answer == "20"
    assert choice_target("18", trusted, weights) == "B"


def test_prompt_shows_lettered_options_with_backing_and_mentions() -> None:
    s = sample_set("18", "20", "18")
    s.candidates[1].text = "There were 18 apples, minus nothing... no: 20.\n#### 20"
    prompt = render_choice_prompt(s.question, s.candidates, style=STYLE)
    assert "Solution 1:" in prompt and "Final: 20" in prompt
    assert "A) 18: solutions 1, 3 (2 of 3; 2 with work); in the work of 1 other" in prompt
    assert "B) 20: solution 2 (1 of 3; 1 with work)" in prompt
    assert prompt.endswith("Which option is correct? Reply with its letter only.")
    bare = s.model_copy(update={"candidates": [c.model_copy(update={"text": f"The answer is {c.answer}."})
                                               for c in s.candidates]})  # fmt: skip
    bare_prompt = render_choice_prompt(s.question, bare.candidates, style=STYLE)
    assert "A) 18: solutions 1, 3 (2 of 3; 0 with work)" in bare_prompt
    weights = WeightedVote({"good": 2.0, "bad": -1.0})
    mixed = [c.model_copy(update={"model": m}) for c, m in zip(s.candidates, ["bad", "good", "bad"], strict=True)]
    weighted = render_choice_prompt(s.question, mixed, style=STYLE, weights=weights)
    assert "A) 20: solution 2 (1 of 3, weighted 98%; 1 with work)" in weighted  # the weighted vote's order
    assert "B) 18: solutions 1, 3 (2 of 3, weighted 2%; 2 with work)" in weighted


def test_decides_by_the_letters_probabilities_and_records_them() -> None:
    model = scripted(reply("B", {"B": math.log(0.7), "A": math.log(0.2), "Z": math.log(0.1)}))
    result = SSAChoiceAggregator(model, k=5).invoke(sample_set("20", "18", "20", "18", "18"))
    assert result.answer == "20" and result.method == "ssa"  # B is 20 (2 votes), against the vote's 18
    assert result.details["choice_probs"] == pytest.approx({"18": 2 / 9, "20": 7 / 9}, abs=1e-4)
    assert result.details["parse_status"] == "parsed" and result.details["deferred"] is False
    assert model.calls == [{"max_tokens": 1, "logprobs": True, "top_logprobs": 20}]
    assert result.support == [0, 2] and "20" in result.text


def test_unsure_defers_to_the_vote_and_says_so() -> None:
    probs = {"B": math.log(0.55), "A": math.log(0.45)}
    sure = SSAChoiceAggregator(scripted(reply("B", probs)), threshold=0.5).invoke(sample_set("18", "18", "20"))
    assert sure.answer == "20"
    unsure = SSAChoiceAggregator(scripted(reply("B", probs)), threshold=0.6).invoke(sample_set("18", "18", "20"))
    assert unsure.answer == "18" and unsure.details["deferred"] is True
    assert unsure.details["parse_status"] == "deferred" and unsure.details["fallback"] == "majority"
    assert unsure.details["choice"] == "20" and unsure.details["confidence"] == pytest.approx(0.55, abs=1e-4)
    assert unsure.details["choice_logprobs"] == pytest.approx({"18": math.log(0.45), "20": math.log(0.55)})
    certain = {"B": 0.0, "A": -50.0}  # threshold 1 is "always the vote", even for a probability that rounds to 1
    always = SSAChoiceAggregator(scripted(reply("B", certain)), threshold=1.0).invoke(sample_set("18", "18", "20"))
    assert always.answer == "18" and always.details["deferred"] is True
    unscored = SSAChoiceAggregator(scripted(reply("B", None)), threshold=1.0).invoke(sample_set("18", "18", "20"))
    assert unscored.answer == "18" and unscored.details["deferred"] is True  # a server without log-probabilities
    written = SSAChoiceAggregator(scripted(reply("B", None)), threshold=0.9).invoke(sample_set("18", "18", "20"))
    assert written.answer == "20" and written.details["confidence"] is None  # below 1: the letter it wrote
    # a temperature above 1 softens the model's probabilities (what calibration fits on validation)
    assert choice_distribution({"A": 0.0, "B": -2.0}, 2.0)["A"] == pytest.approx(1 / (1 + math.exp(-1)))


def test_the_vote_can_weigh_in_beside_the_model() -> None:
    even = {"A": math.log(0.5), "B": math.log(0.5)}  # the model cannot tell 18 (2 votes) from 20 (1)
    result = SSAChoiceAggregator(scripted(reply("B", even)), vote_weight=1.0).invoke(sample_set("18", "18", "20"))
    shares = result.details["vote_shares"]
    assert shares == pytest.approx({"18": math.e / (math.e + 1), "20": 1 / (math.e + 1)})  # one-coin posterior
    assert result.answer == "18" and result.details["choice_probs"]["18"] == pytest.approx(shares["18"], abs=1e-4)
    # without log-probabilities the letter is the model alone, and a calibration that weighs the vote defers
    unscored = SSAChoiceAggregator(scripted(reply("B", None)), vote_weight=1.0, threshold=0.5)
    deferred = unscored.invoke(sample_set("18", "18", "20"))
    assert deferred.answer == "18" and deferred.details["deferred"] is True and deferred.details["confidence"] is None
    with pytest.raises(ValueError, match="vote_weight"):
        SSAChoiceAggregator(scripted(), vote_weight=-1)


def test_one_answer_never_reaches_the_model() -> None:
    model = scripted()
    result = SSAChoiceAggregator(model).invoke(sample_set("18", "18.0", None, "18"))
    assert result.answer == "18" and model.calls == []
    assert result.details["skipped"] == "unanimous" and result.details["parse_status"] == "skipped"


async def test_async_and_a_server_without_logprobs() -> None:
    result = await SSAChoiceAggregator(scripted(reply("B", None))).ainvoke(sample_set("18", "18", "20"))
    assert result.answer == "20" and result.details["confidence"] is None  # the letter it wrote
    bad = await SSAChoiceAggregator(scripted(reply("Q", None))).ainvoke(sample_set("18", "18", "20"))
    assert bad.answer == "18" and bad.details["parse_status"] == "no_choice" and bad.details["fallback"] == "majority"
    assert bad.details["deferred"] is True and bad.details["threshold"] == 0.0 and bad.details["raw_output"] == "Q"


def test_bad_settings_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="1 to 8 candidates"):
        SSAChoiceAggregator(scripted(), k=9)
    with pytest.raises(ValueError, match="threshold"):
        SSAChoiceAggregator(scripted(), threshold=1.5)


def test_letter_logprobs_read_the_openai_schema() -> None:
    message = reply("A", {"A": -0.1, " B": -2.5, "x": -3.0})
    assert letter_logprobs(message, "ABC") == {"A": -0.1, "B": -2.5, "C": -3.0}  # C absent: the smallest listed
    assert letter_logprobs(AIMessage("A"), "AB") is None


@pytest.mark.slow
def test_real_smollm2_returns_logprobs_in_process_and_served(smollm2_dir: Path) -> None:
    import openai

    from aggregate_graph.local import LocalChatModel
    from aggregate_graph.openai_compat.client_model import OpenAIClientChatModel
    from aggregate_graph.serve.local import create_app
    from aggregate_graph.testing import running

    model = LocalChatModel(temperature=0)  # dtype auto, as the served one
    message = model.invoke("Reply with the letter A.", max_tokens=1, logprobs=True, top_logprobs=5)
    (first,) = message.response_metadata["logprobs"]["content"]
    assert first["token"] == message.text and len(first["top_logprobs"]) == 5
    values = [e["logprob"] for e in first["top_logprobs"]]
    assert values == sorted(values, reverse=True) and first["logprob"] == pytest.approx(values[0])
    assert sum(math.exp(v) for v in values) <= 1 + 1e-6

    with running(create_app(smollm2_dir)) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        served = client.chat.completions.create(
            model="aggregator", messages=[{"role": "user", "content": "Reply with the letter A."}],
            max_tokens=1, temperature=0, logprobs=True, top_logprobs=5,
        )  # fmt: skip
        # The package's model over an `openai` client (what `wrap_openai` builds) keeps them too, as ChatOpenAI
        # does: in `response_metadata["logprobs"]`, where the choice SSA reads its letter probabilities.
        over_client = OpenAIClientChatModel(create=client.chat.completions.create, model="aggregator")
        kept = over_client.invoke("Reply with the letter A.", max_tokens=1, temperature=0, logprobs=True,
                                  top_logprobs=5).response_metadata["logprobs"]["content"][0]  # fmt: skip
    token = served.choices[0].logprobs.content[0]
    assert token.token == first["token"] and len(token.top_logprobs) == 5
    assert token.top_logprobs[0].logprob == pytest.approx(values[0], abs=1e-3)
    assert kept["token"] == token.token and [e["logprob"] for e in kept["top_logprobs"]] == pytest.approx(
        [e.logprob for e in token.top_logprobs]
    )
