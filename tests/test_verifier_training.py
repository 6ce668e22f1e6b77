"""The per-candidate verifier (`training.verifier`): `aggregate-train build --format verify` writes one candidate per
example with Yes / No as its target, `sft` trains it on a tiny Qwen2 built offline, and `verifier_scores` reads
the trained model's Yes / No log-odds through the runtime's `LocalChatModel`; the vote adds them to its weights."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from langchain_core.messages import AIMessage

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import SSAStyle
from aggregate_graph.local import LocalChatModel
from aggregate_graph.log import read_sample_sets
from tests.test_training_chain import run
from tests.training_fixtures import build_tiny_qwen2, corpus, toy_sample_sets
from training.build import BuildConfig
from training.grpo import rewards
from training.targets import FORMATS
from training.verifier import best_verified, render_verify_prompt, verdict_log_odds, verified_vote, verifier_scores

STYLE = SSAStyle(max_candidate_tokens=24, tail_only=True, show_answers=True)


def reply(top: dict[str, float]) -> AIMessage:
    """A one-token reply in OpenAI's logprobs schema, as `LocalChatModel` and vLLM return it."""
    entries = [{"token": token, "logprob": value} for token, value in top.items()]
    first = entries[0]
    return AIMessage(first["token"], response_metadata={"logprobs": {"content": [first | {"top_logprobs": entries}]}})


def test_the_log_odds_read_yes_against_no_and_bound_a_missing_verdict() -> None:
    assert verdict_log_odds(reply({"Yes": -0.1, "No": -2.5})) == pytest.approx(2.4)
    assert verdict_log_odds(reply({" No": -0.2, "Maybe": -1.0, "Yes": -3.0})) == pytest.approx(-2.8)
    # "No" is not among the top tokens: it is at most the smallest listed log-probability
    assert verdict_log_odds(reply({"Yes": -0.05, "Maybe": -4.0})) == pytest.approx(3.95)
    with pytest.raises(ValueError, match="top_logprobs"):
        verdict_log_odds(AIMessage("Yes"))


def test_the_verified_vote_adds_beta_times_the_log_odds_to_each_weight() -> None:
    candidates = [Candidate(index=i, text=f"so {a}", answer=a, model="m") for i, a in enumerate(["7", "7", "9"])]
    sample_set = SampleSet(question="q", candidates=candidates)
    scores = {0: -3.0, 1: -3.0, 2: 4.0}
    assert verified_vote(None, scores, 0.0).invoke(sample_set).answer == "7"  # beta 0: the vote as it is
    assert verified_vote(None, scores, 1.0).invoke(sample_set).answer == "9"  # 5 against 2 × 0.01 (floored)
    assert verified_vote(lambda c: 10.0, scores, 1.0).invoke(sample_set).answer == "7"  # heavy base weights win
    assert best_verified(scores).invoke(sample_set).answer == "9"


def test_grpo_rewards_the_right_verdict() -> None:
    correctness, well_formed = rewards(FORMATS["verify"], format_reward=0.1)
    completions = [[{"role": "assistant", "content": text}] for text in ("Yes", "No.", "Nope", "No, it is 12")]
    assert correctness(completions, answer_key=["Yes", "No", "No", "No"]) == [1.0, 1.0, 0.0, 1.0]
    assert well_formed(completions) == [0.1, 0.0, 0.0, 0.0]  # the verdict alone is the format


def test_build_refuses_a_verifier_that_reads_more_than_one_candidate() -> None:
    with pytest.raises(ValueError, match="k_min = k_max = 1"):
        BuildConfig(sample_sets="x", output_dir="y", format="verify", k_min=1, k_max=2)


@pytest.mark.slow
def test_verifier_chain_build_sft_then_scores_rank_right_candidates_higher(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    sets = toy_sample_sets(32)
    texts = corpus(sets) + [render_verify_prompt(s.question, c, STYLE) for s in sets for c in s.candidates]
    base = build_tiny_qwen2(tmp_path / "base", [*texts, "Yes", "No"])
    pool = tmp_path / "sets.jsonl"
    pool.write_text("".join(s.model_dump_json() + "\n" for s in sets), encoding="utf-8")
    data = tmp_path / "data"
    run("build", sample_sets=pool, output_dir=data, format="verify", k_min=1, k_max=1, subsets_per_problem=5,
        hard_fraction=0.5, validation_fraction=0.25, max_candidate_tokens=24, tail_only=True,
        show_answers=True)  # fmt: skip
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    targets = [r["completion"][0]["content"] for r in rows]
    assert len(rows) >= 40 and set(targets) == {"Yes", "No"}
    assert [r["hard"] for r in rows] == [t == "No" for t in targets]  # a wrong candidate is a hard example
    built = json.loads((data / "build.json").read_text())
    split = (built["train"], built["validation"])
    assert 2 * sum(b["hard"] for b in split) == sum(b["examples"] for b in split)  # half wrong, as hard_fraction asks
    for r in rows:  # the target says whether the one candidate shown reached the gold answer
        assert r["prompt"][0]["content"].count("Final: ") == 1
        assert (r["completion"][0]["content"] == "Yes") == ("Final: 42\n" in r["prompt"][0]["content"])

    sft = tmp_path / "sft"
    run("sft", model=base, data_dir=data, output_dir=sft, learning_rate=1e-2, max_steps=30,
        per_device_train_batch_size=4, lora_r=32, lora_alpha=32, logging_steps=10, save_steps=30)  # fmt: skip
    model = LocalChatModel(model_path=str(base), adapter_path=str(sft), temperature=0, max_new_tokens=1,
                           dtype="float32")  # fmt: skip
    scored = []
    for s in read_sample_sets(data / "validation_sets.jsonl"):
        scores = verifier_scores(model, s, STYLE)
        assert set(scores) == {c.index for c in s.candidates}
        scored += [(scores[c.index], c.answer == "42") for c in s.candidates]
    right = [score for score, is_right in scored if is_right]
    wrong = [score for score, is_right in scored if not is_right]
    assert right and wrong and statistics.fmean(right) > statistics.fmean(wrong) + 1.0, scored
