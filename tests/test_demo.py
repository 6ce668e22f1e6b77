"""`python -m aggregate_graph.cli.demo`: the bundled excerpt is real pool data, unreserved and unseen by the shipped
SSA's training, and `run_demo` reports every problem, majority vote's pick, gold and a summary that adds up.
The trained aggregators are not run here."""

from __future__ import annotations

import io
import random
import re
from pathlib import Path

import pytest
import yaml

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import MajorityVote, source_of
from aggregate_graph.cli import demo
from aggregate_graph.reading.answers import equivalent
from training.build import split_problems
from training.data import problem_key
from training.pools import FAITHFUL_COT_CONFIGS, is_reserved, load_faithful_cot, reserved_questions

BUILD_CONFIG = Path(__file__).parents[1] / "training" / "configs" / "ssa_choice_build.yaml"
K = 5


@pytest.fixture(scope="module")
def bundled() -> list[SampleSet]:
    return demo.load_demo_sets()


@pytest.fixture(scope="module")
def pool() -> list[SampleSet]:
    return load_faithful_cot()


def test_bundled_sets_are_the_seeded_subsets_of_the_real_pool(bundled: list[SampleSet], pool: list[SampleSet]):
    assert len(bundled) == 6
    for s in bundled:
        full = pool[s.metadata["problem_id"]]
        assert (s.id, s.question, s.gold, s.metadata) == (full.id, full.question, full.gold, full.metadata)
        expected = sorted(random.Random(s.metadata["problem_id"]).sample(range(len(FAITHFUL_COT_CONFIGS)), K))
        assert [c.index for c in s.candidates] == expected
        assert s.candidates == [full.candidates[i] for i in expected]  # text, answer, model, params: all of it


def test_no_bundled_problem_is_reserved(bundled: list[SampleSet]):
    reserved = reserved_questions()
    assert not any(is_reserved(s, reserved) for s in bundled)
    assert all(s.metadata["problem_id"] % 5 for s in bundled)


def test_bundled_problems_are_held_out_of_the_shipped_ssa_training(bundled: list[SampleSet], pool: list[SampleSet]):
    # build() splits the unreserved problems first thing with a fresh Random(seed): the same split, recomputed.
    config = yaml.safe_load(BUILD_CONFIG.read_text())
    # the build's other pool (GPT-3 solutions) covers the same GSM8K test questions: the split is over these keys
    assert (config["sample_sets"], config["problems"]) == ("faithful_cot+gpt3_solutions", "unreserved")
    reserved = reserved_questions()
    keys = [problem_key(s) for s in pool if not is_reserved(s, reserved) and s.gold is not None]
    held_out = split_problems(keys, config["validation_fraction"], random.Random(config["seed"]))
    assert all(problem_key(s) in held_out for s in bundled)


def test_bundled_mix_shows_majority_failing_and_succeeding(bundled: list[SampleSet]):
    majority = [MajorityVote().invoke(s) for s in bundled]
    some_right = [any(equivalent(c.answer, s.gold) for c in s.candidates) for s in bundled]
    wrong = [not equivalent(m.answer, s.gold) for m, s in zip(majority, bundled, strict=True)]
    assert all(some_right)
    assert sum(wrong) >= 3 and not all(wrong)
    assert all(m.tie is None for m in majority)  # every verdict is the vote's, not the tie-break's


def test_run_demo_with_majority(bundled: list[SampleSet]):
    out = io.StringIO()
    right = demo.run_demo(bundled, {"majority": MajorityVote()}, out)
    text = out.getvalue()

    picks = [MajorityVote().invoke(s).answer for s in bundled]
    expected = sum(equivalent(p, s.gold) for p, s in zip(picks, bundled, strict=True))
    assert right == {"majority": expected} and expected == 2
    for number, s in enumerate(bundled, 1):
        assert f"[{number}/6] GSM8K test #{s.metadata['problem_id']}\n" in text
        for c in s.candidates:
            assert re.search(rf"^    {re.escape(source_of(c))} +{re.escape(c.answer or '')} [✓✗]$", text, re.M)
    shown = re.findall(r"^  majority +(\S+) ([✓✗])  \(backed by \d of 5\)$", text, re.M)
    assert shown == [(p, "✓" if equivalent(p, s.gold) else "✗") for p, s in zip(picks, bundled, strict=True)]
    assert re.findall(r"^  gold +(\S+)$", text, re.M) == [s.gold for s in bundled]
    assert re.search(r"^latency per problem: majority \d+\.\d ms$", text, re.M)
    assert text.rstrip().splitlines()[-1] == f"summary: majority right {expected}/6 (some candidate right: 6/6)"


@pytest.mark.usefixtures("restored_environment")  # main() quiets the libraries through os.environ
def test_main_majority_only(capsys: pytest.CaptureFixture[str]):
    assert demo.main(["--aggregators", "majority"]) == 0
    out = capsys.readouterr().out
    assert out.count("GSM8K test #") == 6
    assert out.rstrip().endswith("summary: majority right 2/6 (some candidate right: 6/6)")


@pytest.mark.usefixtures("restored_environment")
def test_main_names_the_missing_trained_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    missing = tmp_path / "trained" / "ssa_smollm2"
    monkeypatch.setattr(demo, "SHIPPED_SSA", missing)
    assert demo.main([]) == 1
    captured = capsys.readouterr()
    assert str(missing) in captured.err and "--aggregators majority" in captured.err
    assert captured.out == ""
