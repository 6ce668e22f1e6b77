"""The choice SSA's training chain on CPU with a tiny Qwen2 built offline, every step through `aggregate-train`'s
own entry point: build (lettered options, the right one's letter as the target) → sft → grpo (the reward: the
right letter) → calibrate (temperature and threshold into aggregator.json) → export → the runtime decides with
it, recording its probabilities."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import SSAChoiceAggregator
from aggregate_graph.aggregators.trained import load_trained_aggregator
from aggregate_graph.log import read_sample_sets
from tests.test_training_chain import run
from tests.training_fixtures import CHOICE_STYLE, build_tiny_qwen2, corpus, toy_sample_sets
from training.calibrate import _Outcome, choose, decides_right, fit_temperature
from training.grpo import rewards
from training.targets import FORMATS

pytestmark = pytest.mark.slow


def disputed_sets(problems: int) -> list[SampleSet]:
    """The toy sets with every wrong candidate answering 13: where 42 has one or two backers, the vote is wrong."""
    sets = toy_sample_sets(problems)
    for s in sets:
        for c in s.candidates:
            if c.answer != "42":
                c.text, c.answer = "Working on it: the result is 13.\n#### 13", "13"
    return sets


def test_grpo_rewards_the_right_letter() -> None:
    correctness, well_formed = rewards(FORMATS["ssa-choice"], format_reward=0.1)
    completions = [[{"role": "assistant", "content": text}] for text in ("A", "B", " B", "B) 42")]
    assert correctness(completions, answer_key=["A", "A", "B", "B"]) == [1.0, 0.0, 1.0, 1.0]
    assert well_formed(completions) == [0.1, 0.1, 0.1, 0.0]  # one letter alone is the format


def test_choice_chain_build_sft_grpo_calibrate_export(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    sets = disputed_sets(32)
    base = build_tiny_qwen2(tmp_path / "base", corpus(sets))
    pool = tmp_path / "sets.jsonl"
    pool.write_text("".join(s.model_dump_json() + "\n" for s in sets), encoding="utf-8")
    data = tmp_path / "data"
    style = {"max_candidate_tokens": CHOICE_STYLE.max_candidate_tokens, "tail_only": True, "show_answers": True,
             "show_tally": True}  # fmt: skip
    run("build", sample_sets=pool, output_dir=data, format="ssa-choice", k_min=2, k_max=5, subsets_per_problem=4,
        within_model_subsets=2, min_answers=2, drop_unsolvable=True, hard_fraction=0.5, validation_fraction=0.25,
        **style)  # fmt: skip
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    assert len(rows) >= 16 and all(r["completion"][0]["content"] in "ABCDE" for r in rows)
    assert all(r["answer_key"] == r["completion"][0]["content"] for r in rows)  # GRPO's reward compares with it
    assert all("Options:\nA) " in r["prompt"][0]["content"] for r in rows)

    sft = tmp_path / "sft"
    run("sft", model=base, data_dir=data, output_dir=sft, learning_rate=1e-2, max_steps=40,
        per_device_train_batch_size=4, lora_r=32, lora_alpha=32, logging_steps=10, save_steps=20)  # fmt: skip
    grpo = tmp_path / "grpo"
    run("grpo", model=base, adapter=sft, data_dir=data, output_dir=grpo, num_generations=4,
        per_device_train_batch_size=4, max_completion_length=2, temperature=1.0, max_steps=2, learning_rate=1e-4,
        logging_steps=1, save_steps=2, beta=0.0)  # fmt: skip
    logged = json.loads((grpo / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    graded = [entry for entry in logged if "rewards/correctness/mean" in entry]  # sampled letters were graded
    assert graded and all(entry["rewards/well_formed/mean"] > 0 for entry in graded)  # and they were letters

    validation = data / "validation_sets.jsonl"
    run("calibrate", model_dir=grpo, validation_sets=validation, lms=["toy"], draws=2, dtype="float32")
    record = json.loads((grpo / "aggregator.json").read_text())
    assert record["format"] == "ssa-choice" and record["temperature"] > 0 and 0 <= record["threshold"] <= 1
    table = json.loads((grpo / "calibration.json").read_text())["rows"]
    assert set(table) == {"toy, anonymised"} and table["toy, anonymised"]["sets"] > 0

    export = tmp_path / "export"
    run("export", checkpoint=grpo, output_dir=export, merge=False)
    aggregator = load_trained_aggregator(export, base_model=str(base), dtype="float32")
    assert isinstance(aggregator, SSAChoiceAggregator) and aggregator.threshold == record["threshold"]
    assert (export / "calibration.md").is_file()  # the validation table travels with the model
    decided = [aggregator.invoke(s) for s in read_sample_sets(validation)]
    asked = [a for a in decided if a.details["parse_status"] != "skipped"]
    assert asked, [a.details for a in decided]
    for a in asked:
        assert a.details["parse_status"] in ("parsed", "deferred") and a.answer is not None
        assert sum(a.details["choice_probs"].values()) == pytest.approx(1, abs=1e-3)


def test_calibration_keeps_the_vote_when_the_model_only_agrees_with_it() -> None:
    """A model that picks the vote's answer on every set gains nothing: the threshold stays 1.0 (always the vote),
    though 354/477 as np.mean and as a division differ in the last bits."""
    agree = _Outcome({"x": -0.1, "y": -3.0}, {"x": 0.6, "y": 0.4}, {"x": True, "y": False}, True, True)
    wrong = _Outcome({"x": -0.1, "y": -3.0}, {"x": 0.6, "y": 0.4}, {"x": False, "y": False}, False, False)
    rows = {"one model": [agree] * 354 + [wrong] * 123}
    assert 100 * np.mean([o.vote_right for o in rows["one model"]]) != 100 * 354 / 477  # the float trap is real
    threshold, table = choose(rows, temperature=1.0, vote_weight=0.0)
    assert threshold == 1.0 and table["one model"]["calibrated"] == pytest.approx(table["one model"]["vote"])


def test_a_confident_model_overrules_the_vote_and_an_unsure_one_defers_to_it() -> None:
    """`decides_right`, which calibrate's accuracy and the ZeroEval cross-fit both count with: the model's top
    option at or above the threshold decides, else the vote (and the vote alone where the model was skipped)."""
    model_right = _Outcome({"x": -2.0, "y": -0.2}, {"x": 0.6, "y": 0.4}, {"x": False, "y": True}, False, False)
    assert decides_right(model_right, temperature=1.0, threshold=0.5)  # y at ~0.84 overrules the vote's x
    assert not decides_right(model_right, temperature=1.0, threshold=0.9)  # below 0.9: the vote's wrong x
    assert not decides_right(model_right, temperature=1.0, threshold=1.0)  # 1.0 is always the vote
    skipped = _Outcome(None, None, {"x": True}, True, True)
    assert decides_right(skipped, temperature=1.0, threshold=0.0)
    # the vote's probabilities, weighted in, can turn the model's pick back to the vote's
    assert not decides_right(model_right, temperature=10.0, threshold=0.0, vote_weight=3.0)


def test_the_temperature_fit_prefers_the_settings_that_put_mass_on_the_right_option() -> None:
    overconfident = [
        _Outcome({"x": -0.01, "y": -5.0}, {"x": 0.5, "y": 0.5}, {"x": True, "y": False}, True, True),
        _Outcome({"x": -0.01, "y": -5.0}, {"x": 0.5, "y": 0.5}, {"x": False, "y": True}, False, False),
    ]
    # right half the time at ~99%: flattening the letter probabilities lowers the log-loss
    assert fit_temperature({"row": overconfident})[0] > 1.0
