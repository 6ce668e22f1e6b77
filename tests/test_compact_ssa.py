"""The compact SSA style: candidate tails, stated answers, sources and the weighted tally; `build` records it
(aggregator.json + weights.json) and a trained folder renders at run time exactly the prompts it was trained on.
Also the reserved-problem rule: build and evaluate can keep GSM8K test ids with id % 5 == 0 out, or keep only them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import SSAStyle, WeightedVote, render_ssa_prompt
from aggregate_graph.aggregators.trained import load_trained_aggregator
from aggregate_graph.jsonl import read_jsonl
from tests.conftest import chat
from training.build import BuildConfig, build
from training.data import load_sample_sets
from training.evaluate import EvaluateConfig, evaluate
from training.pools import is_reserved, load_faithful_cot

COMPACT = SSAStyle(
    max_candidate_tokens=10, tail_only=True, chars_per_token=3, show_answers=True, show_sources=True, show_tally=True
)


def test_compact_blocks_keep_the_tail_state_the_answer_and_tally_the_vote() -> None:
    long_program = "x = 1\n" * 100 + "answer = total  # 18"
    candidates = [
        Candidate(index=0, text=long_program, answer="18", model="gpt4", params={"prompt": "noNL"}),
        Candidate(index=1, text="It is 20.\n<answer>20</answer>", answer="20", model="code001"),
        Candidate(index=2, text="no idea", answer=None, model="code001"),
    ]
    prompt = render_ssa_prompt("Q?", candidates, style=COMPACT)
    assert "Answer 1 [gpt4[prompt=noNL]]:\n[…] " in prompt and "answer = total  # 18\nFinal: 18" in prompt
    assert prompt.count("x = 1") <= 5  # 30 characters of tail, not the whole program
    assert "Final: none" in prompt and "<answer>20</answer>" not in prompt.split("Answer 3")[0]  # neutralised
    assert "\nVotes: 18 = 1; 20 = 1\n" in prompt
    weights = WeightedVote({"gpt4[prompt=noNL]": 3.0, "code001": -1.0})
    weighted = render_ssa_prompt("Q?", candidates, style=COMPACT, weights=weights)
    assert "\nWeighted votes: 18 = 98%; 20 = 2%\n" in weighted
    # The paper's style is unchanged when no style is given.
    assert "Final:" not in render_ssa_prompt("Q?", [c.text for c in candidates])


def test_trained_folder_renders_the_prompts_it_was_trained_on(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    summary = build(
        BuildConfig(
            sample_sets="faithful_cot", problems="unreserved", limit=40, output_dir=str(tmp_path / "data"),
            k_min=5, k_max=5, subsets_per_problem=1, hard_fraction=None, validation_fraction=0.25,
            max_candidate_tokens=32, tail_only=True, chars_per_token=2.96, show_answers=True, show_sources=True,
            show_tally=True, short_instruction=True, weights="fit", answer_only_targets=True,
        )
    )  # fmt: skip
    assert summary["train"]["examples"] > 0
    record = json.loads((tmp_path / "data" / "aggregator.json").read_text())
    assert record["style"]["tail_only"] and record["weights"] == "weights.json"
    # What sft/export carry beside the adapter: the two render files.
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("aggregator.json", "weights.json"):
        shutil.copy(tmp_path / "data" / name, folder / name)
    row = next(read_jsonl(tmp_path / "data" / "train.jsonl"))
    assert row["completion"][0]["content"] == f"<answer>{row['gold']}</answer>"
    sets = {s.id: s for s in load_sample_sets("faithful_cot", limit=40)}
    set_id, indices = row["id"].split("/")
    shown = [c for c in sets[set_id].candidates if str(c.index) in indices.split("-")]
    server = serve([f"<answer>{row['gold']}</answer>"])
    aggregator = load_trained_aggregator(folder, model=chat(server))
    result = aggregator.invoke(sets[set_id].model_copy(update={"candidates": shown}))
    assert server.requests[0]["messages"][-1]["content"] == row["prompt"][0]["content"]
    assert result.details["parse_status"] == "parsed" and result.answer == row["gold"]


def test_reserved_problems_are_kept_out_or_kept_alone(tmp_path: Path) -> None:
    unreserved = load_sample_sets("faithful_cot", problems="unreserved")
    reserved = load_sample_sets("faithful_cot", problems="reserved")
    assert (len(unreserved), len(reserved)) == (1055, 264)
    assert all(s.metadata["problem_id"] % 5 == 0 for s in reserved)
    assert not any(is_reserved(s) for s in unreserved)
    # Recognised by the question text, whatever the source: a logged set of a reserved question is reserved.
    logged = SampleSet(question="  " + load_faithful_cot()[5].question.replace(" ", "  "), candidates=[])
    assert is_reserved(logged)
    result = evaluate(
        EvaluateConfig(sample_sets="faithful_cot", problems="reserved", output_dir=str(tmp_path / "e"), k=5,
                       draws=3, curve=False, bootstrap=200)
    )  # fmt: skip
    assert result["problems"] == 264 and result["draws"] == 3 and not result["curve"]
    maj = result["metrics"]["maj"]["mean"]
    assert 70 < maj < 82 and result["metrics"]["pass"]["mean"] > 90  # the guide's figures: maj@5 ≈ 75–77
    assert "3 random draws each" in (tmp_path / "e" / "metrics.md").read_text()
